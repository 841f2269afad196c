// The messages of gpu_status.hpp.
#include "core/gpu_status.hpp"

namespace dpx {

std::string cuda_version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

std::string cuda_unavailable_reason(DeviceCountResult result, int devices, int driver_version, int runtime_version,
                                    std::string_view error_text) {
  if (result == DeviceCountResult::ok && devices > 0) return "";
  if (driver_version == 0) return "no NVIDIA driver is installed on this machine (no GPU usable)";
  if (result == DeviceCountResult::insufficient_driver || driver_version < runtime_version)
    return "the NVIDIA driver supports CUDA " + cuda_version_text(driver_version) + ", older than the CUDA " +
           cuda_version_text(runtime_version) + " runtime dpx was built with: update the driver, or build dpx with a " +
           "CUDA toolkit no newer than " + cuda_version_text(driver_version);
  if (result == DeviceCountResult::ok || result == DeviceCountResult::no_device)
    return "the NVIDIA driver sees no GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES)";
  return "CUDA cannot start: " + std::string(error_text);
}

}  // namespace dpx
