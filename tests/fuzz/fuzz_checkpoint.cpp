// libFuzzer target: the checkpoint reader (parallel/train/checkpoint.hpp's checkpoint_from) on any bytes,
// decoded as a safetensors file first, as --resume reads one. A dpx::Error is the answer to a bad
// checkpoint; any other exception, a crash or a sanitizer report is a finding. Every step record
// the reader accepts must name a rank of the checkpoint's run (a record that did not once wrote
// past the end of a vector).
#include <cstdint>
#include <span>

#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "parallel/train/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const dpx::SafeTensors st = dpx::decode_safetensors(std::span<const uint8_t>(data, size), "fuzz.safetensors");
    const dpx::parallel::Checkpoint c = dpx::parallel::checkpoint_from(st, "fuzz.safetensors");
    for (const auto& r : c.steps)
      if (r.rank < 0 || r.rank >= c.ranks || r.global_step < 0 || r.global_step >= c.progress.global_step + 1)
        __builtin_trap();
  } catch (const dpx::Error&) {
  }
  return 0;
}
