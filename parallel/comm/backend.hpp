// The backends ranks communicate with (--backend): threads (thread ranks, host memory), mpi
// (ranks that are MPI processes), nccl (GPUs, NCCL's collectives), p2p (thread ranks on GPUs,
// dpx's algorithms over device copies). How each one's ranks are made: runtime/launch.hpp.
#pragma once
#include <cstdint>

#include "core/choices.hpp"

namespace dpx::parallel {

enum class Backend : uint8_t { threads, mpi, nccl, p2p };
inline constexpr Choices<Backend, 4> kBackends = {
    {{Backend::threads, "threads"}, {Backend::mpi, "mpi"}, {Backend::nccl, "nccl"}, {Backend::p2p, "p2p"}}};

}  // namespace dpx::parallel
