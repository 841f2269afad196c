// `dpx --version`: the versions of dpx and of every library built into this binary.
#include <Eigen/Core>
#include <sstream>

#include "core/cuda/memory.hpp"
#include "core/version_config.hpp"
#include "kernels/cpu/conv2d_algos.hpp"
#include "tools/commands.hpp"

#ifdef DPX_WITH_CUDA
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>
#endif
#ifdef DPX_WITH_MPI
#include "parallel/comm/mpi/mpi_util.hpp"
#endif
#include <zlib.h>

namespace dpx::tools {

std::string version_text(const parallel::LaunchInfo& launch) {
  std::ostringstream os;
  os << "dpx " << DPX_VERSION_STRING << " (" << DPX_BUILD_TYPE << ", " << DPX_CXX_COMPILER << ")\n";
  os << "Eigen " << EIGEN_WORLD_VERSION << "." << EIGEN_MAJOR_VERSION << "." << EIGEN_MINOR_VERSION << "\n";
  if (cpu::onednn_available()) os << "oneDNN " << cpu::onednn_version() << " (CPU convolutions; --conv-algo)\n";
  else os << "oneDNN: not built in (CPU convolutions use dpx's own kernels)\n";
  os << "zlib " << ZLIB_VERSION << "\n";
#ifdef _OPENMP
  os << "OpenMP " << _OPENMP << "\n";
#endif
#ifdef DPX_WITH_CUDA
  os << "CUDA runtime (built) " << CUDART_VERSION / 1000 << "." << (CUDART_VERSION % 1000) / 10 << "\n";
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    os << "CUDA driver " << driver / 1000 << "." << (driver % 1000) / 10 << "\n";
  else
    os << "CUDA driver none\n";
  if (const std::string why = cuda::unavailable_reason(); !why.empty()) os << "GPUs: none usable: " << why << "\n";
  else os << "GPUs: " << cuda::device_count() << "\n";
  os << "cuDNN " << CUDNN_MAJOR << "." << CUDNN_MINOR << "." << CUDNN_PATCHLEVEL << "\n";
  os << "NCCL " << NCCL_MAJOR << "." << NCCL_MINOR << "." << NCCL_PATCH << "\n";
#else
  os << "CUDA not built in (configure with -DDPX_CUDA=ON on a machine with CUDA, cuDNN and NCCL)\n";
#endif
#ifdef DPX_WITH_MPI
  os << "MPI " << MPI_VERSION << "." << MPI_SUBVERSION << " (" << parallel::mpi::library_name() << "): ";
  if (launch.backend == "mpi")
    os << launch.thread_level << ", " << launch.ranks << " ranks on " << launch.nodes << " node"
       << (launch.nodes > 1 ? "s" : "") << "\n";
  else
    os << "not in use (run under mpirun or srun for ranks that are processes)\n";
#else
  os << "MPI not built in\n";
#endif
  return os.str();
}

}  // namespace dpx::tools
