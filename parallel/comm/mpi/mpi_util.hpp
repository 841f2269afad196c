// What every file of the mpi backend shares: the check that turns a failed MPI call into a
// dpx::Error naming the call, file:line, rank and host; and dpx's element types and reductions
// as MPI datatypes and ops (f16 and bf16 as 2-byte types with ops of dpx's own, combined in f32
// as every dpx backend does).
#pragma once
#include <mpi.h>

#include <string>

#include "core/dtype.hpp"
#include "parallel/comm/reduce.hpp"

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
// "Open MPI v4.1.4, MPI 3.1": the library's own first line and the standard it implements.
std::string library_version();

}  // namespace dpx::parallel::mpi

// Every MPI call goes through this (llm.c's mpiCheck): a failure is an exception with a message.
#define DPX_MPI_CHECK(expr)                                                        \
  do {                                                                             \
    const int dpx_mpi_code_ = (expr);                                              \
    if (dpx_mpi_code_ != MPI_SUCCESS)                                              \
      ::dpx::parallel::mpi::mpi_failed(dpx_mpi_code_, #expr, __FILE__, __LINE__);  \
  } while (0)
