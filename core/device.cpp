// Device names: "cpu", "cuda:N", parsed and printed (see device.hpp).
#include "core/device.hpp"

#include <charconv>

#include "core/error.hpp"

namespace dpx {

Device parse_device(std::string_view s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    int i = -1;
    auto r = std::from_chars(s.data() + 5, s.data() + s.size(), i);
    if (r.ec == std::errc() && r.ptr == s.data() + s.size() && i >= 0) return Device::cuda(i);
  }
  usage_fail("unknown device '", s, "': use cpu or cuda:N");
}

}  // namespace dpx
