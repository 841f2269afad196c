// Where a tensor lives: the host (cpu) or one CUDA device.
#pragma once
#include <string>
#include <string_view>

namespace dpx {

struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int i) { return {Kind::cuda, i}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

// "cpu" or "cuda:N" (plain "cuda" means cuda:0); throws dpx::UsageError otherwise.
Device parse_device(std::string_view s);

}  // namespace dpx
