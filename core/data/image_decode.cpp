// JPEG (TurboJPEG) and PNG (libspng) decoding to RGB by PIL's conversion rules, and the writers
// dpx data uses. Every library error becomes a BadImage naming the file; sizes are checked
// against kMaxImagePixels before any pixel buffer is allocated.
#include "core/data/image_decode.hpp"

#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace dpx::data {

namespace {

// One TurboJPEG handle per thread and direction: a handle is not thread-safe, and making one
// per image costs an allocation of libjpeg's state.
struct TjHandle {
  tjhandle handle = nullptr;
  explicit TjHandle(tjhandle h) : handle(h) {}
  ~TjHandle() {
    if (handle) tjDestroy(handle);
  }
};

tjhandle decompressor() {
  thread_local TjHandle h(tjInitDecompress());
  if (!h.handle) fail("TurboJPEG could not make a decompressor: ", tjGetErrorStr2(nullptr));
  return h.handle;
}

tjhandle compressor() {
  thread_local TjHandle h(tjInitCompress());
  if (!h.handle) fail("TurboJPEG could not make a compressor: ", tjGetErrorStr2(nullptr));
  return h.handle;
}

bool is_jpeg(std::span<const uint8_t> b) { return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF; }
bool is_png(std::span<const uint8_t> b) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), sig, 8) == 0;
}

[[noreturn]] void bad(const std::string& name, const std::string& what) {
  throw BadImage(name + ": " + what);
}

// What the first bytes look like, for the message about a file that is no image dpx reads.
std::string what_it_is(std::span<const uint8_t> b) {
  auto starts = [&](const char* magic) { return b.size() >= std::strlen(magic) && std::memcmp(b.data(), magic, std::strlen(magic)) == 0; };
  if (starts("GIF8")) return "a GIF image";
  if (starts("BM")) return "a BMP image";
  if (starts("RIFF") && b.size() >= 12 && std::memcmp(b.data() + 8, "WEBP", 4) == 0) return "a WebP image";
  if (starts("II*") || starts("MM\0*")) return "a TIFF image";
  if (b.size() >= 2 && b[0] == 0xFF && b[1] == 0xD8) return "a damaged JPEG (no marker after its start)";
  return "not an image";
}

void check_pixels(const std::string& name, int64_t w, int64_t h, int64_t max_pixels) {
  if (w <= 0 || h <= 0) bad(name, detail::concat("the header gives a size of ", w, "x", h));
  if (w * h > max_pixels)
    bad(name, detail::concat(w, "x", h, " pixels is more than the ", max_pixels,
                             " dpx (as PIL) decodes: a decompression bomb or a damaged header"));
}

// ---- JPEG ------------------------------------------------------------------------------------

const char* jpeg_color(int colorspace) {
  switch (colorspace) {
    case TJCS_GRAY: return "grey";
    case TJCS_CMYK: return "CMYK";
    case TJCS_YCCK: return "YCCK";
    default: return "RGB";
  }
}

struct JpegHeader {
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
};

// libjpeg's warnings are damage (a truncated file, corrupt entropy-coded data) except this one,
// which PIL and most viewers shrug off (libjpeg: JWRN_EXTRANEOUS_DATA).
bool harmless_warning(const char* message) {
  return std::strstr(message, "extraneous bytes before marker") != nullptr;
}

JpegHeader jpeg_header(std::span<const uint8_t> b, const std::string& name) {
  JpegHeader h;
  tjhandle tj = decompressor();
  if (tjDecompressHeader3(tj, b.data(), static_cast<unsigned long>(b.size()), &h.width, &h.height, &h.subsamp,
                          &h.colorspace) != 0) {
    // A warning still fills the outputs (TurboJPEG sets them before it reports it).
    if (tjGetErrorCode(tj) != TJERR_WARNING || !harmless_warning(tjGetErrorStr2(tj)))
      bad(name, std::string("damaged JPEG header (libjpeg: ") + tjGetErrorStr2(tj) + ")");
  }
  return h;
}

// PIL's CMYK -> RGB (Convert.c, cmyk2rgb, Pillow 9.4): after inverting Adobe's stored values
// (PIL reads every CMYK JPEG as "CMYK;I"), R = clip(nk - nk * C / 255) with nk = 255 - K,
// rounded as PIL's MULDIV255.
inline uint8_t muldiv255(int a, int b) {
  const int t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

void cmyk_to_rgb(const uint8_t* cmyk_stored, uint8_t* rgb, size_t pixels) {
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* p = cmyk_stored + 4 * i;
    const int nk = p[3];  // 255 - K, K = 255 - stored
    for (int c = 0; c < 3; ++c) {
      const int ink = 255 - p[c];
      const int v = nk - muldiv255(ink, nk);
      rgb[3 * i + c] = static_cast<uint8_t>(std::clamp(v, 0, 255));
    }
  }
}

void decode_jpeg(std::span<const uint8_t> b, const std::string& name, RgbImage& out, int denom, int64_t max_pixels) {
  const JpegHeader h = jpeg_header(b, name);
  check_pixels(name, h.width, h.height, max_pixels);
  const tjscalingfactor sf{1, denom};
  const int w = TJSCALED(h.width, sf), ht = TJSCALED(h.height, sf);
  const bool cmyk = h.colorspace == TJCS_CMYK || h.colorspace == TJCS_YCCK;
  out.width = w;
  out.height = ht;
  const size_t pixels = static_cast<size_t>(w) * static_cast<size_t>(ht);
  std::vector<uint8_t> cmyk_buffer;
  uint8_t* dst = nullptr;
  if (cmyk) {
    cmyk_buffer.resize(pixels * 4);
    dst = cmyk_buffer.data();
  } else {
    out.pixels.resize(pixels * 3);
    dst = out.pixels.data();
  }
  // Flags 0: libjpeg's accurate integer IDCT and fancy upsampling, PIL's defaults.
  tjhandle tj = decompressor();
  if (tjDecompress2(tj, b.data(), static_cast<unsigned long>(b.size()), dst, w, 0, ht, cmyk ? TJPF_CMYK : TJPF_RGB,
                    0) != 0) {
    const char* message = tjGetErrorStr2(tj);
    if (tjGetErrorCode(tj) != TJERR_WARNING || !harmless_warning(message))
      bad(name, std::string(tjGetErrorCode(tj) == TJERR_WARNING ? "damaged JPEG data" : "cannot decode the JPEG") +
                    " (libjpeg: " + message + ")");
  }
  if (cmyk) {
    out.pixels.resize(pixels * 3);
    cmyk_to_rgb(cmyk_buffer.data(), out.pixels.data(), pixels);
  }
}

// ---- PNG -------------------------------------------------------------------------------------

struct SpngContext {
  spng_ctx* ctx;
  explicit SpngContext(int flags) : ctx(spng_ctx_new(flags)) {
    if (!ctx) fail("libspng could not make a context (out of memory)");
  }
  ~SpngContext() { spng_ctx_free(ctx); }
  SpngContext(const SpngContext&) = delete;
  SpngContext& operator=(const SpngContext&) = delete;
};

// Chunks other than the image data (text, ICC profiles) are not needed: a PNG may not make dpx
// hold more than this of them.
constexpr size_t kPngChunkLimitBytes = size_t{64} << 20;

std::string png_color(const spng_ihdr& ihdr) {
  std::string c;
  switch (ihdr.color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE: c = "grey"; break;
    case SPNG_COLOR_TYPE_TRUECOLOR: c = "RGB"; break;
    case SPNG_COLOR_TYPE_INDEXED: c = "palette"; break;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA: c = "grey+alpha"; break;
    default: c = "RGBA"; break;
  }
  if (ihdr.bit_depth != 8) c.append(" ").append(std::to_string(ihdr.bit_depth)).append("-bit");
  return c;
}

spng_ihdr png_open(SpngContext& png, std::span<const uint8_t> b, const std::string& name) {
  spng_set_chunk_limits(png.ctx, kPngChunkLimitBytes, kPngChunkLimitBytes);
  int err = spng_set_png_buffer(png.ctx, b.data(), b.size());
  spng_ihdr ihdr{};
  if (!err) err = spng_get_ihdr(png.ctx, &ihdr);
  if (err) bad(name, std::string("damaged PNG header (libspng: ") + spng_strerror(err) + ")");
  return ihdr;
}

void decode_png(std::span<const uint8_t> b, const std::string& name, RgbImage& out, int64_t max_pixels) {
  SpngContext png(0);
  const spng_ihdr ihdr = png_open(png, b, name);
  check_pixels(name, ihdr.width, ihdr.height, max_pixels);
  out.width = static_cast<int>(ihdr.width);
  out.height = static_cast<int>(ihdr.height);
  const size_t pixels = static_cast<size_t>(out.width) * static_cast<size_t>(out.height);
  auto check = [&](int err) {
    if (err) bad(name, std::string("cannot decode the PNG (libspng: ") + spng_strerror(err) + ")");
  };
  if (ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth == 16) {
    // PIL opens 16-bit grey as mode "I" and its conversion to RGB clips each value to 255
    // (Convert.c, i2rgb): what torchvision's ImageFolder then sees, kept here.
    std::vector<uint16_t> grey(pixels);
    check(spng_decode_image(png.ctx, grey.data(), pixels * 2, SPNG_FMT_PNG, 0));  // host-endian
    out.pixels.resize(pixels * 3);
    for (size_t i = 0; i < pixels; ++i) {
      const uint8_t v = static_cast<uint8_t>(std::min<uint16_t>(grey[i], 255));
      out.pixels[3 * i] = out.pixels[3 * i + 1] = out.pixels[3 * i + 2] = v;
    }
    return;
  }
  // Every other type: libspng's RGB8 is PIL's convert("RGB"): palette looked up, grey replicated
  // (1, 2 and 4 bits scaled to 0-255), 16-bit samples by their high byte, alpha and tRNS dropped,
  // no gamma applied (tests/core/test_image_decode.cpp holds each to PIL's pixels).
  size_t len = 0;
  check(spng_decoded_image_size(png.ctx, SPNG_FMT_RGB8, &len));
  if (len != pixels * 3) bad(name, "libspng's RGB size does not match the header");
  out.pixels.resize(len);
  check(spng_decode_image(png.ctx, out.pixels.data(), len, SPNG_FMT_RGB8, 0));
}

}  // namespace

const char* image_format_name(ImageFormat f) { return f == ImageFormat::jpeg ? "JPEG" : "PNG"; }

ImageHeader read_image_header(std::span<const uint8_t> bytes, const std::string& name, int64_t max_pixels) {
  if (bytes.empty()) bad(name, "empty file (0 bytes)");
  ImageHeader h;
  if (is_jpeg(bytes)) {
    const JpegHeader j = jpeg_header(bytes, name);
    h.format = ImageFormat::jpeg;
    h.width = j.width;
    h.height = j.height;
    h.color = jpeg_color(j.colorspace);
  } else if (is_png(bytes)) {
    SpngContext png(0);
    const spng_ihdr ihdr = png_open(png, bytes, name);
    h.format = ImageFormat::png;
    h.width = static_cast<int>(std::min<uint32_t>(ihdr.width, INT32_MAX));
    h.height = static_cast<int>(std::min<uint32_t>(ihdr.height, INT32_MAX));
    h.color = png_color(ihdr);
  } else {
    bad(name, what_it_is(bytes).append(": dpx reads JPEG and PNG files only"));
  }
  check_pixels(name, h.width, h.height, max_pixels);
  return h;
}

void decode_rgb(std::span<const uint8_t> bytes, const std::string& name, RgbImage& out, int scale_denominator,
                int64_t max_pixels) {
  DPX_CHECK(scale_denominator == 1 || scale_denominator == 2 || scale_denominator == 4 || scale_denominator == 8,
            "decode_rgb: scale 1/", scale_denominator, " is not one of 1/1, 1/2, 1/4, 1/8");
  if (bytes.empty()) bad(name, "empty file (0 bytes)");
  if (is_jpeg(bytes))
    decode_jpeg(bytes, name, out, scale_denominator, max_pixels);
  else if (is_png(bytes))
    decode_png(bytes, name, out, max_pixels);
  else
    bad(name, what_it_is(bytes).append(": dpx reads JPEG and PNG files only"));
}

// ---- writing ---------------------------------------------------------------------------------

std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int width, int height, int channels, int quality) {
  DPX_CHECK(channels == 1 || channels == 3 || channels == 4, "encode_jpeg: ", channels, " channels");
  DPX_CHECK(quality >= 1 && quality <= 100, "encode_jpeg: quality ", quality);
  std::vector<uint8_t> inverted;
  const uint8_t* src = pixels;
  if (channels == 4) {  // ink amounts -> Adobe's stored (inverted) values, as PIL writes "CMYK;I"
    const size_t n = static_cast<size_t>(width) * height * 4;
    inverted.resize(n);
    for (size_t i = 0; i < n; ++i) inverted[i] = static_cast<uint8_t>(255 - pixels[i]);
    src = inverted.data();
  }
  const int pf = channels == 1 ? TJPF_GRAY : channels == 3 ? TJPF_RGB : TJPF_CMYK;
  const int subsamp = channels == 1 ? TJSAMP_GRAY : TJSAMP_420;
  tjhandle tj = compressor();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (tjCompress2(tj, src, width, 0, height, pf, &buf, &size, subsamp, quality, 0) != 0) {
    tjFree(buf);
    fail("TurboJPEG could not compress a ", width, "x", height, " image: ", tjGetErrorStr2(tj));
  }
  std::vector<uint8_t> out(buf, buf + size);
  tjFree(buf);
  return out;
}

namespace {

std::vector<uint8_t> encode_png_with(const void* data, size_t bytes, spng_ihdr ihdr, const spng_plte* plte,
                                     const std::string& software = "") {
  SpngContext png(SPNG_CTX_ENCODER);
  int err = spng_set_option(png.ctx, SPNG_ENCODE_TO_BUFFER, 1);
  if (!err) err = spng_set_ihdr(png.ctx, &ihdr);
  if (!err && plte) err = spng_set_plte(png.ctx, const_cast<spng_plte*>(plte));
  std::string text = software;
  spng_text chunk{};
  if (!err && !text.empty()) {
    std::strncpy(chunk.keyword, "Software", sizeof chunk.keyword - 1);
    chunk.type = SPNG_TEXT;
    chunk.length = text.size();
    chunk.text = text.data();
    err = spng_set_text(png.ctx, &chunk, 1);
  }
  if (!err) err = spng_encode_image(png.ctx, data, bytes, SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  if (err) fail("libspng could not encode a ", ihdr.width, "x", ihdr.height, " PNG: ", spng_strerror(err));
  size_t len = 0;
  void* buf = spng_get_png_buffer(png.ctx, &len, &err);
  if (!buf || err) fail("libspng could not encode a PNG: ", spng_strerror(err));
  std::vector<uint8_t> out(static_cast<uint8_t*>(buf), static_cast<uint8_t*>(buf) + len);
  std::free(buf);
  return out;
}

}  // namespace

std::vector<uint8_t> encode_png(const uint8_t* pixels, int width, int height, int channels,
                                const std::string& software) {
  DPX_CHECK(channels == 1 || channels == 3 || channels == 4, "encode_png: ", channels, " channels");
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(width);
  ihdr.height = static_cast<uint32_t>(height);
  ihdr.bit_depth = 8;
  ihdr.color_type = channels == 1   ? SPNG_COLOR_TYPE_GRAYSCALE
                    : channels == 3 ? SPNG_COLOR_TYPE_TRUECOLOR
                                    : SPNG_COLOR_TYPE_TRUECOLOR_ALPHA;
  return encode_png_with(pixels, static_cast<size_t>(width) * height * channels, ihdr, nullptr, software);
}

std::vector<uint8_t> encode_png_palette(const uint8_t* indices, int width, int height,
                                        const std::vector<uint8_t>& palette_rgb) {
  const size_t entries = palette_rgb.size() / 3;
  DPX_CHECK(entries >= 1 && entries <= 256 && palette_rgb.size() % 3 == 0, "encode_png_palette: ", palette_rgb.size(),
            " palette bytes");
  spng_plte plte{};
  plte.n_entries = static_cast<uint32_t>(entries);
  for (size_t i = 0; i < entries; ++i) {
    plte.entries[i].red = palette_rgb[3 * i];
    plte.entries[i].green = palette_rgb[3 * i + 1];
    plte.entries[i].blue = palette_rgb[3 * i + 2];
  }
  spng_ihdr ihdr{};
  ihdr.width = static_cast<uint32_t>(width);
  ihdr.height = static_cast<uint32_t>(height);
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_INDEXED;
  return encode_png_with(indices, static_cast<size_t>(width) * height, ihdr, &plte);
}

}  // namespace dpx::data
