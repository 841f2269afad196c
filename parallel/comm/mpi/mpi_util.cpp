// MPI error checks, dtype and op mapping, and the 16-bit float ops (see mpi_util.hpp).
#include "parallel/comm/mpi/mpi_util.hpp"

#include <unistd.h>

#include "core/error.hpp"

namespace dpx::parallel::mpi {

namespace {

// MPI's user-op callback receives only the datatype: these two handles, set once by
// create_types(), tell which 16-bit type it is.
MPI_Datatype f16_type = MPI_DATATYPE_NULL, bf16_type = MPI_DATATYPE_NULL;
MPI_Op half_ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, prod, max, min

template <ReduceOp op>
void half_op(void* in, void* inout, int* len, MPI_Datatype* type) {
  const DType dtype = *type == f16_type ? DType::f16 : DType::bf16;
  reduce_into(inout, in, inout, static_cast<size_t>(*len), dtype, op);  // MPI: inout = in (op) inout
}

}  // namespace

void mpi_failed(int code, const char* expr, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(code, text, &len);
  int rank = -1, size = 0, initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  fail("MPI call '", expr, "' failed at ", file, ":", line, " on rank ", rank, " of ", size, " (", host, "): ",
       std::string(text, static_cast<size_t>(len)));
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::f16: return f16_type;
    case DType::bf16: return bf16_type;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
  }
  fail("no MPI datatype for ", dtype_name(dtype));
}

MPI_Op mpi_op(DType dtype, ReduceOp op) {
  const bool half = dtype == DType::f16 || dtype == DType::bf16;
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return half ? half_ops[0] : MPI_SUM;
    case ReduceOp::prod: return half ? half_ops[1] : MPI_PROD;
    case ReduceOp::max: return half ? half_ops[2] : MPI_MAX;
    case ReduceOp::min: return half ? half_ops[3] : MPI_MIN;
  }
  fail("no MPI op for ", reduce_op_name(op));
}

void create_types() {
  DPX_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &f16_type));
  DPX_MPI_CHECK(MPI_Type_commit(&f16_type));
  DPX_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &bf16_type));
  DPX_MPI_CHECK(MPI_Type_commit(&bf16_type));
  DPX_MPI_CHECK(MPI_Op_create(&half_op<ReduceOp::sum>, 1, &half_ops[0]));
  DPX_MPI_CHECK(MPI_Op_create(&half_op<ReduceOp::prod>, 1, &half_ops[1]));
  DPX_MPI_CHECK(MPI_Op_create(&half_op<ReduceOp::max>, 1, &half_ops[2]));
  DPX_MPI_CHECK(MPI_Op_create(&half_op<ReduceOp::min>, 1, &half_ops[3]));
}

void free_types() {
  for (MPI_Op& op : half_ops)
    if (op != MPI_OP_NULL) MPI_Op_free(&op);
  if (f16_type != MPI_DATATYPE_NULL) MPI_Type_free(&f16_type);
  if (bf16_type != MPI_DATATYPE_NULL) MPI_Type_free(&bf16_type);
}

std::string thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "thread level " + std::to_string(level);
}

void require_thread_multiple(int provided) {
  if (provided >= MPI_THREAD_MULTIPLE) return;
  fail("the MPI library (", library_version(), ") gives ", thread_level_name(provided),
       " where dpx needs MPI_THREAD_MULTIPLE: its DDP communication thread and its watchdog call MPI while the "
       "training thread does. Use an MPI built with thread support (Open MPI: --enable-mpi-thread-multiple, the "
       "default since 3.0; MPICH: --enable-threads=multiple)");
}

const char* srun_mpi_plugin() {
#ifdef OPEN_MPI
  return "pmix";
#else
  return "pmi2";
#endif
}

std::string library_name() {
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  MPI_Get_library_version(lib, &len);
  std::string first(lib, static_cast<size_t>(len));
  first = first.substr(0, first.find_first_of(",\n"));
  // MPICH says "MPICH Version:\t4.0.2": "MPICH 4.0.2", as Open MPI's "Open MPI v4.1.4".
  if (const size_t v = first.find(" Version:"); v != std::string::npos) {
    const size_t digits = first.find_first_not_of(" \t", v + 9);
    first = first.substr(0, v) + " " + (digits == std::string::npos ? "" : first.substr(digits));
  }
  return first;
}

std::string library_version() {
  return library_name() + ", MPI " + std::to_string(MPI_VERSION) + "." + std::to_string(MPI_SUBVERSION);
}

}  // namespace dpx::parallel::mpi
