// Why no GPU can be used (core/gpu_status.hpp): the message for each answer the CUDA runtime can
// give, tested without a GPU. A driver older than the runtime must be reported as such, not as
// "no GPU".
#include <doctest/doctest.h>

#include "core/gpu_status.hpp"

using namespace dpx;

TEST_CASE("a usable device gives no reason") {
  CHECK(cuda_unavailable_reason(DeviceCountResult::ok, 1, 13000, 13000).empty());
  CHECK(cuda_unavailable_reason(DeviceCountResult::ok, 8, 13020, 13000).empty());
}

TEST_CASE("a driver older than the runtime is reported as such, with what to do") {
  const std::string r = cuda_unavailable_reason(DeviceCountResult::insufficient_driver, 0, 12040, 13000);
  CHECK(r.find("supports CUDA 12.4, older than the CUDA 13.0 runtime") != std::string::npos);
  CHECK(r.find("update the driver") != std::string::npos);
  CHECK(r.find("no GPU") == std::string::npos);
  // The runtime may answer "no device" while the driver is too old: the versions decide.
  CHECK(cuda_unavailable_reason(DeviceCountResult::no_device, 0, 12080, 13000).find("older than") != std::string::npos);
}

TEST_CASE("no driver, no device and other failures each say so") {
  CHECK(cuda_unavailable_reason(DeviceCountResult::insufficient_driver, 0, 0, 13000) ==
        "no NVIDIA driver is installed on this machine (no GPU usable)");
  CHECK(cuda_unavailable_reason(DeviceCountResult::no_device, 0, 13000, 13000).find("sees no GPU") != std::string::npos);
  CHECK(cuda_unavailable_reason(DeviceCountResult::ok, 0, 13010, 13000).find("CUDA_VISIBLE_DEVICES") != std::string::npos);
  CHECK(cuda_unavailable_reason(DeviceCountResult::other, 0, 13000, 13000, "initialization error") ==
        "CUDA cannot start: initialization error");
}

TEST_CASE("CUDA versions print as major.minor") {
  CHECK(cuda_version_text(12080) == "12.8");
  CHECK(cuda_version_text(13000) == "13.0");
  CHECK(cuda_version_text(11040) == "11.4");
}

TEST_CASE("--precision bf16 needs compute capability 8.0, fp16 5.3; fp32 and tf32 run anywhere") {
  CHECK(precision_unsupported_reason("bf16", 80, 0).empty());
  CHECK(precision_unsupported_reason("bf16", 90, 1).empty());
  CHECK(precision_unsupported_reason("fp16", 70, 0).empty());
  CHECK(precision_unsupported_reason("fp32", 35, 0).empty());
  CHECK(precision_unsupported_reason("tf32", 60, 0).empty());
  CHECK(precision_unsupported_reason("bf16", 75, 1) ==
        "--precision bf16 needs a GPU of compute capability 8.0 (Ampere) or newer; cuda:1 is 7.5: use --precision "
        "fp16 or fp32");
  CHECK(precision_unsupported_reason("fp16", 50, 0) ==
        "--precision fp16 needs a GPU of compute capability 5.3 or newer; cuda:0 is 5.0: use --precision fp32");
}
