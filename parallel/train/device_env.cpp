// A rank's device on the CPU (see device_env.hpp): its Context, host-timed phases; the CUDA one
// is cuda/device_env_cuda.cpp.
#include "parallel/train/device_env.hpp"

#include "core/error.hpp"

namespace dpx::parallel {

#ifdef DPX_WITH_CUDA
std::unique_ptr<DeviceEnv> make_cuda_env(int device);  // parallel/train/cuda/
#else
void enable_peer_access(const std::vector<int>&) {}
#endif

std::unique_ptr<DeviceEnv> make_device_env(Device device, int threads, bool reference) {
  if (device.is_cpu()) {
    Context ctx = Context::cpu(threads);
    ctx.reference = reference;
    return std::make_unique<DeviceEnv>(ctx);
  }
#ifdef DPX_WITH_CUDA
  return make_cuda_env(device.index);
#else
  fail("--devices ", device.str(), ": this dpx was built without CUDA; rebuild with -DDPX_CUDA=ON on a machine "
       "with the CUDA toolkit, cuDNN and NCCL, or use --devices cpu:K");
#endif
}

}  // namespace dpx::parallel
