// libFuzzer target: the IDX decoder (core/data/idx.hpp) on any bytes, raw or gzip as read_idx
// tells them apart. Each raw input is also gzipped and decoded again: both ways must agree.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "core/data/idx.hpp"
#include "core/error.hpp"

namespace {

std::vector<uint8_t> gzip(std::span<const uint8_t> raw) {
  z_stream zs{};
  if (deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) __builtin_trap();
  std::vector<uint8_t> out(deflateBound(&zs, raw.size()));
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) __builtin_trap();
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// The decoded tensor's dtype, shape and bytes, or nothing when the input was refused.
std::optional<std::vector<uint8_t>> decode(std::span<const uint8_t> bytes) {
  try {
    dpx::Tensor t = dpx::data::decode_idx(bytes, "fuzz.idx");
    std::vector<uint8_t> out(static_cast<const uint8_t*>(t.raw()), static_cast<const uint8_t*>(t.raw()) + t.nbytes());
    out.push_back(static_cast<uint8_t>(t.dtype()));
    for (int64_t d : t.shape()) out.insert(out.end(), reinterpret_cast<uint8_t*>(&d), reinterpret_cast<uint8_t*>(&d) + 8);
    return out;
  } catch (const dpx::Error&) {
    return std::nullopt;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  const auto as_is = decode(input);
  const bool is_gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  if (!is_gzip && decode(gzip(input)) != as_is) __builtin_trap();  // gzip must not change the answer
  return 0;
}
