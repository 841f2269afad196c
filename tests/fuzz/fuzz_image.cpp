// libFuzzer target: the image decoders (core/data/image_decode.hpp: TurboJPEG and libspng behind
// dpx's wrappers) on any bytes, as an image folder's file reaches them. The header is read, then
// the pixels decoded at every DCT scale; a dpx::Error is the answer to a bad file. The header and
// the decoded image must agree on the size (ceil(side / d) for a JPEG at 1/d), and a file whose
// header is refused must not decode.
#include <cstdint>
#include <span>

#include "core/data/image_decode.hpp"
#include "core/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dpx::data;
  const std::span<const uint8_t> bytes(data, size);
  // A small pixel limit: the fuzzer finds more in many small images than in a few large ones,
  // and a header claiming more must be refused before anything is allocated.
  constexpr int64_t kMaxPixels = 1 << 20;
  ImageHeader h;
  bool header_ok = true;
  try {
    h = read_image_header(bytes, "fuzz", kMaxPixels);
  } catch (const dpx::Error&) {
    header_ok = false;
  }
  RgbImage image;
  for (int d : {1, 2, 4, 8}) {
    try {
      decode_rgb(bytes, "fuzz", image, d, kMaxPixels);
    } catch (const dpx::Error&) {
      continue;
    }
    if (!header_ok) __builtin_trap();  // decoded what the header reader refused
    const int scale = h.format == ImageFormat::jpeg ? d : 1;
    if (image.width != (h.width + scale - 1) / scale || image.height != (h.height + scale - 1) / scale) __builtin_trap();
    if (image.pixels.size() != static_cast<size_t>(image.width) * image.height * 3) __builtin_trap();
  }
  return 0;
}
