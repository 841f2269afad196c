// Decoding JPEG and PNG files to RGB as PIL's convert("RGB") does, for every colour type, bit depth
// and layout of the fixtures (tests/core/data/images/, made by benchmarks/pytorch/make_image_fixtures.py),
// DCT-domain scaling, the writers, and every kind of bad file refused with its name.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/data/image_decode.hpp"
#include "core/data/image_folder.hpp"
#include "core/safetensors.hpp"
#include "tests/common/errors.hpp"
#include "tests/common/files.hpp"

using namespace dpx::data;
using dpx::testing::contains;
using dpx::testing::TempDir;

namespace {

std::string fixture(const std::string& name) { return std::string(DPX_SOURCE_DIR) + "/tests/core/data/images/" + name; }

std::vector<uint8_t> bytes_of(const std::string& path) {
  std::vector<uint8_t> b;
  read_image_file(path, b);
  return b;
}

const dpx::SafeTensors& expected() {
  static const dpx::SafeTensors e = dpx::read_safetensors(fixture("expected.safetensors"));
  return e;
}

// The message of the BadImage `f` throws ("" if it throws nothing or something else).
template <typename F>
std::string bad_image_message(F&& f) {
  try {
    f();
  } catch (const BadImage& e) {
    return e.what();
  } catch (...) {
    return "(another exception)";
  }
  return "";
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST_CASE("every fixture decodes to PIL's RGB pixels, bit for bit") {
  int cases = 0;
  for (const auto& [key, want] : expected().tensors) {
    if (key.rfind("decode/", 0) != 0) continue;
    const std::string name = key.substr(7);
    CAPTURE(name);
    RgbImage img;
    decode_rgb(bytes_of(fixture(name)), name, img);
    REQUIRE(want.shape() == dpx::Shape{img.height, img.width, 3});
    const uint8_t* w = want.data<uint8_t>();
    size_t differ = 0, first = 0;
    for (size_t i = 0; i < img.pixels.size(); ++i)
      if (img.pixels[i] != w[i] && differ++ == 0) first = i;
    CAPTURE(first);
    CHECK(differ == 0);
    ++cases;
  }
  CHECK(cases == 28);  // 8 JPEGs (4:2:0, 4:2:2, 4:4:4, progressive, grey, CMYK, YCCK, 1 pixel) and 20 PNGs
}

TEST_CASE("headers give the size and colour type without decoding") {
  struct Case {
    const char* file;
    ImageFormat format;
    const char* color;
  };
  for (const Case& c : {Case{"rgb420.jpg", ImageFormat::jpeg, "RGB"}, Case{"grey.jpg", ImageFormat::jpeg, "grey"},
                        Case{"cmyk.jpg", ImageFormat::jpeg, "CMYK"}, Case{"ycck.jpg", ImageFormat::jpeg, "YCCK"},
                        Case{"palette4.png", ImageFormat::png, "palette 4-bit"},
                        Case{"grey16.png", ImageFormat::png, "grey 16-bit"},
                        Case{"greyalpha8.png", ImageFormat::png, "grey+alpha"}, Case{"rgba16.png", ImageFormat::png, "RGBA 16-bit"}}) {
    CAPTURE(c.file);
    const ImageHeader h = read_image_header(bytes_of(fixture(c.file)), c.file);
    CHECK(h.format == c.format);
    CHECK(h.color == c.color);
    CHECK(h.width == (c.format == ImageFormat::jpeg ? 37 : 23));
    CHECK(h.height == (c.format == ImageFormat::jpeg ? 29 : 17));
  }
}

TEST_CASE("DCT scaling decodes JPEGs at 1/2, 1/4 and 1/8 of each side, close to the full image averaged") {
  const auto b = bytes_of(fixture("large.jpg"));  // 320 x 240
  RgbImage full;
  decode_rgb(b, "large.jpg", full, 1);
  REQUIRE(full.width == 320);
  for (int d : {2, 4, 8}) {
    CAPTURE(d);
    RgbImage scaled;
    decode_rgb(b, "large.jpg", scaled, d);
    CHECK(scaled.width == 320 / d);
    CHECK(scaled.height == 240 / d);
    // Each scaled pixel is about the mean of its d x d block: compare the means of the whole image.
    double mean_full = 0, mean_scaled = 0;
    for (uint8_t v : full.pixels) mean_full += v;
    for (uint8_t v : scaled.pixels) mean_scaled += v;
    mean_full /= static_cast<double>(full.pixels.size());
    mean_scaled /= static_cast<double>(scaled.pixels.size());
    CHECK(std::abs(mean_full - mean_scaled) < 1.0);
  }
  // Sizes round up, as TurboJPEG's TJSCALED: a 37 x 29 image at 1/8 is 5 x 4.
  RgbImage small;
  decode_rgb(bytes_of(fixture("rgb420.jpg")), "rgb420.jpg", small, 8);
  CHECK(small.width == 5);
  CHECK(small.height == 4);
  // PNGs have no DCT: any scale decodes the whole image.
  decode_rgb(bytes_of(fixture("rgb8.png")), "rgb8.png", small, 4);
  CHECK(small.width == 23);
  CHECK(dct_scale_for(320, 240, 32, 24) == 4);  // 80 x 60 is still 2.5 times the output
  CHECK(dct_scale_for(320, 240, 100, 100) == 1);
  CHECK(dct_scale_for(1000, 1000, 60, 60) == 8);
}

TEST_CASE("the writers' JPEGs and PNGs decode back (grey, RGB, CMYK, palette)") {
  const int w = 19, h = 13;
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3), grey(static_cast<size_t>(w) * h), cmyk(static_cast<size_t>(w) * h * 4);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 37) % 251);
  for (size_t i = 0; i < grey.size(); ++i) grey[i] = static_cast<uint8_t>(i % 256);
  for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = static_cast<uint8_t>(i % 4 == 3 ? 0 : 100);
  RgbImage out;
  decode_rgb(encode_png(rgb.data(), w, h, 3), "rgb.png", out);
  CHECK(out.pixels == rgb);  // lossless
  decode_rgb(encode_png(grey.data(), w, h, 1), "grey.png", out);
  CHECK(out.pixels[3 * 5 + 1] == grey[5]);
  std::vector<uint8_t> palette = {10, 20, 30, 200, 100, 0};
  std::vector<uint8_t> indices(static_cast<size_t>(w) * h);
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<uint8_t>(i % 2);
  decode_rgb(encode_png_palette(indices.data(), w, h, palette), "palette.png", out);
  CHECK(out.pixels[0] == 10);
  CHECK(out.pixels[3] == 200);
  const auto jpeg = encode_jpeg(rgb.data(), w, h, 3, 95);
  CHECK(read_image_header(jpeg, "x.jpg").color == "RGB");
  decode_rgb(encode_jpeg(grey.data(), w, h, 1, 90), "grey.jpg", out);
  CHECK(read_image_header(encode_jpeg(grey.data(), w, h, 1, 90), "g").color == "grey");
  // CMYK ink (100, 100, 100, no black) is written as YCCK and read back by PIL's rule:
  // 255 - 100 = 155 per channel, give or take JPEG's rounding.
  const auto y = encode_jpeg(cmyk.data(), w, h, 4, 95);
  CHECK(read_image_header(y, "y.jpg").color == "YCCK");
  decode_rgb(y, "y.jpg", out);
  CHECK(std::abs(static_cast<int>(out.pixels[0]) - 155) <= 2);
}

TEST_CASE("bad files of every kind are refused with BadImage naming the file") {
  TempDir dir("image_decode");
  const auto good = bytes_of(fixture("rgb420.jpg"));
  const auto png = bytes_of(fixture("rgb8.png"));
  RgbImage out;
  auto decode_file = [&](const std::string& path) {
    return bad_image_message([&] {
      std::vector<uint8_t> b;
      read_image_file(path, b);
      decode_rgb(b, path, out);
    });
  };
  // zero bytes
  write_bytes(dir.file("empty.jpg"), {});
  CHECK(contains(decode_file(dir.file("empty.jpg")), "empty.jpg: empty file"));
  // truncated JPEG and PNG
  write_bytes(dir.file("cut.jpg"), std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(good.size() / 2)));
  CHECK(contains(decode_file(dir.file("cut.jpg")), "cut.jpg: damaged JPEG data"));
  write_bytes(dir.file("cut.png"), std::vector<uint8_t>(png.begin(), png.begin() + static_cast<long>(png.size() * 2 / 3)));
  CHECK(contains(decode_file(dir.file("cut.png")), "cut.png: cannot decode the PNG"));
  // corrupt entropy-coded data: a restart marker where none belongs, and a run of 0xFF bytes
  size_t sos = 0;
  while (sos + 1 < good.size() && !(good[sos] == 0xFF && good[sos + 1] == 0xDA)) ++sos;
  REQUIRE(sos + 120 < good.size());
  std::vector<uint8_t> corrupt = good;
  corrupt[sos + 40] = 0xFF;
  corrupt[sos + 41] = 0xD0;
  write_bytes(dir.file("corrupt.jpg"), corrupt);
  CHECK(contains(decode_file(dir.file("corrupt.jpg")), "corrupt.jpg: damaged JPEG data (libjpeg: Corrupt JPEG data"));
  corrupt = good;
  std::fill(corrupt.begin() + static_cast<long>(sos) + 40, corrupt.begin() + static_cast<long>(sos) + 100, 0xFF);
  write_bytes(dir.file("marker.jpg"), corrupt);
  CHECK(contains(decode_file(dir.file("marker.jpg")), "marker.jpg: "));
  // a damaged PNG checksum
  std::vector<uint8_t> crc = png;
  crc[crc.size() - 20] ^= 0xFF;
  write_bytes(dir.file("crc.png"), crc);
  CHECK(contains(decode_file(dir.file("crc.png")), "crc.png: "));
  // not an image, and images of formats dpx does not read
  write_bytes(dir.file("text.jpg"), {'h', 'e', 'l', 'l', 'o'});
  CHECK(contains(decode_file(dir.file("text.jpg")), "text.jpg: not an image: dpx reads JPEG and PNG files only"));
  write_bytes(dir.file("anim.gif"), {'G', 'I', 'F', '8', '9', 'a', 0, 0});
  CHECK(contains(decode_file(dir.file("anim.gif")), "a GIF image"));
  // a header that claims more pixels than PIL decodes: refused before any allocation
  std::vector<uint8_t> bomb = png;
  const uint8_t huge[8] = {0, 1, 0x86, 0xA0, 0, 1, 0x86, 0xA0};  // 100000 x 100000
  std::memcpy(bomb.data() + 16, huge, 8);
  CHECK(contains(bad_image_message([&] { decode_rgb(bomb, "bomb.png", out); }), "bomb.png: "));
  CHECK(contains(bad_image_message([&] { read_image_header(bomb, "bomb.png"); }), "bomb.png: "));
  // not a regular file: a FIFO would block a reader for ever; a folder
  REQUIRE(::mkfifo(dir.file("fifo.jpg").c_str(), 0600) == 0);
  CHECK(contains(decode_file(dir.file("fifo.jpg")), "fifo.jpg: not a regular file"));
  std::filesystem::create_directory(dir.file("folder.jpg"));
  CHECK(contains(decode_file(dir.file("folder.jpg")), "folder.jpg: not a regular file"));
  CHECK(contains(decode_file(dir.file("missing.jpg")), "missing.jpg: No such file"));
  // too large to read
  CHECK(contains(bad_image_message([&] {
                   std::vector<uint8_t> b;
                   read_image_file(fixture("large.jpg"), b, 1000);
                 }),
                 "bytes, more than the 1000 dpx reads of one image"));
  // A JPEG with extraneous bytes before a marker is accepted, as PIL accepts it, with the same pixels.
  size_t dqt = 2;
  while (dqt + 1 < good.size() && !(good[dqt] == 0xFF && good[dqt + 1] == 0xDB)) ++dqt;
  std::vector<uint8_t> extra(good.begin(), good.begin() + static_cast<long>(dqt));
  extra.insert(extra.end(), {0x00, 0x00});
  extra.insert(extra.end(), good.begin() + static_cast<long>(dqt), good.end());
  CHECK(bad_image_message([&] { decode_rgb(extra, "extra.jpg", out); }).empty());
  RgbImage plain;
  decode_rgb(good, "good.jpg", plain);
  CHECK(out.pixels == plain.pixels);
  CHECK(read_image_header(extra, "extra.jpg").width == 37);
}
