// libFuzzer target: the safetensors decoder (core/safetensors.hpp) on any bytes. Each input is
// read twice: as a whole file, and as "header NUL data" framed with the right length, so that
// mutations of the JSON header reach the checks behind the length prefix.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "core/error.hpp"
#include "core/safetensors.hpp"

namespace {

void decode(std::span<const uint8_t> bytes) {
  try {
    dpx::SafeTensors st = dpx::decode_safetensors(bytes, "fuzz.safetensors");
    uint64_t total = 0;  // what was read must fit in the input
    for (const auto& [name, t] : st.tensors) total += t.nbytes();
    if (total > bytes.size()) __builtin_trap();
  } catch (const dpx::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  decode({data, size});
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t header_bytes = nul ? static_cast<size_t>(nul - data) : size;
  std::vector<uint8_t> file(8);
  for (int i = 0; i < 8; ++i) file[i] = static_cast<uint8_t>(uint64_t{header_bytes} >> (8 * i));
  file.insert(file.end(), data, data + header_bytes);
  if (nul) file.insert(file.end(), nul + 1, data + size);
  decode(file);
  return 0;
}
