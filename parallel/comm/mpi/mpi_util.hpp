// What every file of the mpi backend shares: the check that turns a failed MPI call into a
// dpx::Error naming the call, file:line, rank and host; and dpx's element types and reductions
// as MPI datatypes and ops (f16 and bf16 as 2-byte types with ops of dpx's own, combined in f32
// as every dpx backend does).
#pragma once
#include <mpi.h>

#include <string>

#include "core/dtype.hpp"
#include "parallel/comm/transport.hpp"

namespace dpx::parallel::mpi {

// Throws dpx::Error: "MPI call '<expr>' failed at file:line on rank R of N (host): <MPI's text>".
[[noreturn]] void mpi_failed(int code, const char* expr, const char* file, int line);

// The datatype, and the op to reduce it with (avg reduces as sum: the caller divides).
MPI_Datatype mpi_type(DType dtype);
MPI_Op mpi_op(DType dtype, ReduceOp op);
// Creates (and frees) the 16-bit float types and their ops; between MPI_Init and MPI_Finalize.
void create_types();
void free_types();

// "MPI_THREAD_MULTIPLE", ...
std::string thread_level_name(int level);
// Throws dpx::Error, saying why and what to do, unless `provided` is MPI_THREAD_MULTIPLE: DDP's
// communication thread and the watchdog call MPI while the training thread does.
void require_thread_multiple(int provided);
// The library and its version from MPI_Get_library_version's first line: "Open MPI v4.1.4",
// "MPICH 4.0.2"; library_version() adds the MPI standard: "Open MPI v4.1.4, MPI 3.1".
std::string library_name();
std::string library_version();
// The srun --mpi plugin through which this MPI library joins srun's tasks into one job: Open
// MPI 4 and 5 speak PMIx ("pmix"); MPICH and its family (Intel MPI, MVAPICH) PMI-2 ("pmi2").
const char* srun_mpi_plugin();

}  // namespace dpx::parallel::mpi

// Every MPI call goes through this (llm.c's mpiCheck): a failure is an exception with a message.
#define DPX_MPI_CHECK(expr)                                                        \
  do {                                                                             \
    const int dpx_mpi_code_ = (expr);                                              \
    if (dpx_mpi_code_ != MPI_SUCCESS)                                              \
      ::dpx::parallel::mpi::mpi_failed(dpx_mpi_code_, #expr, __FILE__, __LINE__);  \
  } while (0)
