// JPEG and PNG files to 8-bit RGB, as PIL's Image.open(f).convert("RGB") gives them (what
// torchvision's ImageFolder feeds its transforms): libjpeg-turbo's TurboJPEG API for JPEG (with
// DCT-domain scaling by 1/2, 1/4 or 1/8 when asked), libspng for PNG. Grey, CMYK and YCCK JPEGs,
// palette, grey + alpha, 1/2/4/16-bit and alpha PNGs are converted to RGB by PIL's rules (docs/data.md). A file that is not a readable JPEG or PNG throws BadImage naming it.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace dpx::data {

// A file that cannot be decoded: corrupt, truncated, empty, not an image, or too large. Callers
// that may skip bad files (--on-bad-image skip) catch this type; every other error stops them.
struct BadImage : Error {
  using Error::Error;
};

enum class ImageFormat { jpeg, png };
const char* image_format_name(ImageFormat f);

// What the header says, read without decoding the pixels.
struct ImageHeader {
  ImageFormat format = ImageFormat::jpeg;
  int width = 0, height = 0;
  std::string color;  // "RGB", "grey", "CMYK", "YCCK", "palette", "grey+alpha", "RGBA", with the
                      // bit depth for PNGs other than 8 ("grey 16-bit")
};

// An 8-bit RGB image, row-major (height, width, 3).
struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> pixels;
  const uint8_t* row(int y) const { return pixels.data() + static_cast<size_t>(y) * width * 3; }
};

// PIL refuses images over 2 x Image.MAX_IMAGE_PIXELS (DecompressionBombError): so does dpx, before
// allocating anything (a 50-byte PNG header can claim 4 billion pixels).
inline constexpr int64_t kMaxImagePixels = 2 * int64_t{89478485};

// The format from the first bytes (never from the file's name, as PIL), and the header. Throws
// BadImage naming `name` for an empty file, one that is neither JPEG nor PNG, a damaged header or
// more than `max_pixels` pixels.
ImageHeader read_image_header(std::span<const uint8_t> bytes, const std::string& name,
                              int64_t max_pixels = kMaxImagePixels);

// Decodes to RGB into `out` (its buffer is reused). JPEG: `scale_denominator` 1, 2, 4 or 8 decodes
// at that fraction of each side in the DCT domain (TurboJPEG's scaling factors 1/1 to 1/8; the
// size is rounded up: ceil(width / d)); PNG ignores it. Throws BadImage naming `name` for any
// error, and for libjpeg's warnings of damage (a truncated file, corrupt data) that PIL also
// refuses or would show as grey; extraneous bytes before a marker are accepted, as PIL does.
void decode_rgb(std::span<const uint8_t> bytes, const std::string& name, RgbImage& out, int scale_denominator = 1,
                int64_t max_pixels = kMaxImagePixels);

// The DCT scaling to decode a JPEG with when a (crop_w x crop_h) region of it becomes
// (out_w x out_h): the largest d of 8, 4, 2 whose scaled region is still at least
// kDctScaleMargin times the output on both sides, else 1.
inline constexpr double kDctScaleMargin = 2.0;
inline int dct_scale_for(double crop_w, double crop_h, int out_w, int out_h) {
  for (int d : {8, 4, 2})
    if (crop_w / d >= kDctScaleMargin * out_w && crop_h / d >= kDctScaleMargin * out_h) return d;
  return 1;
}

// ---- writing (dpx data make-imagefolder, dpx data preview) ----------------------------------
// JPEG from 8-bit pixels: `channels` 3 (RGB, 4:2:0), 1 (grey) or 4 (CMYK, written as YCCK with
// Adobe's inverted convention, as Photoshop and PIL write CMYK); quality 1-100.
std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int width, int height, int channels, int quality);
// PNG from 8-bit pixels: `channels` 1 (grey), 3 (RGB) or 4 (RGBA). A non-empty `software` is
// written as a tEXt chunk "Software" before the image data (dpx data preview's signature).
std::vector<uint8_t> encode_png(const uint8_t* pixels, int width, int height, int channels,
                                const std::string& software = "");
// An 8-bit palette PNG: `indices` (height, width) into `palette` (entries x 3 RGB, at most 256).
std::vector<uint8_t> encode_png_palette(const uint8_t* indices, int width, int height,
                                        const std::vector<uint8_t>& palette_rgb);

}  // namespace dpx::data
