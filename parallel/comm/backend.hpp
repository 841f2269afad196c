// The backends ranks communicate with (--backend): threads (thread ranks, host memory), mpi
// (ranks that are MPI processes), nccl (GPUs, NCCL's collectives), p2p (thread ranks on GPUs,
// dpx's algorithms over device copies). How each one's ranks are made: runtime/launch.hpp.
#pragma once
#include <cstdint>

#include "core/choices.hpp"

namespace dpx::parallel {

// Which backends this dpx was built with; help texts offer only those. mpi: CMake's DPX_WITH_MPI
// (then also Algorithm::mpi and ranks that are processes). nccl and p2p: DPX_WITH_CUDA, which
// also needs NCCL (then also Algorithm::nccl).
#ifdef DPX_WITH_MPI
inline constexpr bool kMpiBuilt = true;
#else
inline constexpr bool kMpiBuilt = false;
#endif
#ifdef DPX_WITH_CUDA
inline constexpr bool kNcclBuilt = true;
#else
inline constexpr bool kNcclBuilt = false;
#endif
inline constexpr bool kP2PBuilt = kNcclBuilt;

enum class Backend : uint8_t { threads, mpi, nccl, p2p };
inline constexpr Choices<Backend, 4> kBackends = {
    {{Backend::threads, "threads"}, {Backend::mpi, "mpi"}, {Backend::nccl, "nccl"}, {Backend::p2p, "p2p"}}};

}  // namespace dpx::parallel
