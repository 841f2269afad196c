// The nccl backend in a build without CUDA: every entry point says how to get it.
#include "core/error.hpp"
#include "parallel/comm/nccl/nccl_backend.hpp"

namespace dpx::parallel {

namespace {

[[noreturn]] void not_built() {
  usage_fail("--backend nccl: not built (this dpx has no CUDA backend; configure with -DDPX_CUDA=ON on a machine "
             "with CUDA, cuDNN and NCCL, or set CUDNN_ROOT and NCCL_ROOT); use --backend threads");
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<int>&, double) { not_built(); }
std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int, double) { not_built(); }
void check_nccl_gpus(int) { not_built(); }
void abort_nccl_group(Communicator&, const std::string&) {}
std::string nccl_version() { return "not built"; }

}  // namespace dpx::parallel
