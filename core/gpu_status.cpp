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

std::string precision_unsupported_reason(std::string_view precision, int capability, int device) {
  const int need = precision == "bf16" ? 80 : precision == "fp16" ? 53 : 0;
  if (capability >= need) return "";
  auto cc = [](int c) { return std::to_string(c / 10) + "." + std::to_string(c % 10); };
  return "--precision " + std::string(precision) + " needs a GPU of compute capability " + cc(need) +
         (precision == "bf16" ? " (Ampere) or newer" : " or newer") + "; cuda:" + std::to_string(device) + " is " +
         cc(capability) + ": use --precision " + (precision == "bf16" && capability >= 53 ? "fp16 or fp32" : "fp32");
}

}  // namespace dpx
