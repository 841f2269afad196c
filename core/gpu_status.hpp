// Why no CUDA device can be used, from what the CUDA runtime answered: a plain function of the
// answers (no CUDA headers), so that every message is tested on a machine without a GPU
// (tests/core/test_gpu_status.cpp); core/cuda/memory.cpp asks the runtime and calls it.
#pragma once
#include <string>
#include <string_view>

namespace dpx {

// cudaGetDeviceCount's result, as far as the message depends on it.
enum class DeviceCountResult { ok, no_device, insufficient_driver, other };

// "" when a device can be used; else a clause for an error message. cudaGetDeviceCount says
// "insufficient driver" both when no driver is installed and when it is older than the runtime:
// the driver's version (cudaDriverGetVersion, 0 without a driver) tells them apart. Versions are
// CUDA's integers (12080 = 12.8).
std::string cuda_unavailable_reason(DeviceCountResult result, int devices, int driver_version, int runtime_version,
                                    std::string_view error_text = "");

// "" when a GPU of compute capability `capability` (major * 10 + minor) computes in `precision`
// (--precision fp32, tf32, bf16 or fp16); else why not, naming the flag: bf16 needs 8.0 (Ampere),
// fp16 5.3; fp32 and tf32 run anywhere (before Ampere TF32 changes nothing, as in PyTorch).
std::string precision_unsupported_reason(std::string_view precision, int capability, int device);

// 12080 -> "12.8".
std::string cuda_version_text(int version);

}  // namespace dpx
