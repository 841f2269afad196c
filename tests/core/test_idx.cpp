// Tests of the IDX reader and writer: round trips of every element type, raw and gzip; the
// byte layout against hand-written big-endian files; and every rejection of a bad file, each
// with a message that names the file and says what was wrong.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/data/idx.hpp"
#include "tests/common/files.hpp"
#include "tests/common/errors.hpp"

namespace fs = std::filesystem;
using dpx::DType;
using dpx::Tensor;
using namespace dpx::data;
using Bytes = std::vector<uint8_t>;

using dpx::testing::contains;
using dpx::testing::error_of;

namespace {

// Every test's files go into its own TempDir (tests/common/files.hpp), tagged "idx".
struct TempDir : dpx::testing::TempDir {
  TempDir() : dpx::testing::TempDir("idx") {}
};

void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

Bytes read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

Bytes gzip(const Bytes& raw) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&zs, raw.size()));
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// Writes `b` to a file and returns the message read_idx gives for it; checks it names the file.
std::string read_error(const TempDir& dir, const std::string& name, const Bytes& b) {
  std::string path = dir.file(name);
  write_bytes(path, b);
  std::string msg = error_of([&] { read_idx(path); });
  CHECK_MESSAGE(contains(msg, path), msg);
  return msg;
}

Tensor i32_tensor(const dpx::Shape& shape, const std::vector<int32_t>& v) {
  Tensor t = Tensor::empty(shape, DType::i32);
  std::memcpy(t.raw(), v.data(), t.nbytes());
  return t;
}

void check_same(const Tensor& a, const Tensor& b) {
  REQUIRE(a.dtype() == b.dtype());
  REQUIRE(a.shape() == b.shape());
  CHECK(std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);  // bitwise: NaN, -0 and extremes included
}

const Bytes kU8Header = {0, 0, 0x08, 0x01, 0, 0, 0, 10};  // u8, 1 dimension of 10

}  // namespace

TEST_CASE("idx: every element type round-trips, raw and gzip") {
  TempDir dir;
  Tensor u8 = Tensor::empty({3, 4, 5}, DType::u8);
  for (int64_t i = 0; i < u8.numel(); ++i) u8.data<uint8_t>()[i] = static_cast<uint8_t>(i * 37 + 1);
  Tensor i8 = i32_tensor({2, 3}, {-128, -1, 0, 1, 127, 5});
  Tensor i16 = i32_tensor({6}, {-32768, -1, 0, 1, 32767, 1234});
  Tensor i32 = i32_tensor({3, 2}, {std::numeric_limits<int32_t>::min(), -1, 0, 1, std::numeric_limits<int32_t>::max(), 123456789});
  Tensor f32 = Tensor::from({2, 3}, {-1.5f, 0.f, 3.25e-20f, 1e30f, -0.f, std::numeric_limits<float>::quiet_NaN()});
  Tensor f64 = Tensor::empty({4}, DType::f64);
  double dv[4] = {-2.5, 1e-300, 1e300, 0.1};
  std::memcpy(f64.raw(), dv, sizeof dv);
  struct Case { Tensor t; IdxType type; };
  for (const Case& c : {Case{u8, IdxType::u8}, Case{i8, IdxType::i8}, Case{i16, IdxType::i16},
                        Case{i32, IdxType::i32}, Case{f32, IdxType::f32}, Case{f64, IdxType::f64}}) {
    for (bool gz : {false, true}) {
      CAPTURE(idx_type_name(c.type));
      CAPTURE(gz);
      std::string path = dir.file(std::string(idx_type_name(c.type)) + (gz ? ".idx.gz" : ".idx"));
      write_idx(path, c.t, c.type, gz);
      Bytes bytes = read_bytes(path);
      REQUIRE(bytes.size() >= 4);
      CHECK((bytes[0] == 0x1f && bytes[1] == 0x8b) == gz);
      Tensor back = read_idx(path);
      CHECK(back.dtype() == idx_tensor_dtype(c.type));
      check_same(back, c.t);
    }
  }
}

TEST_CASE("idx: the byte layout is big-endian, as in the format's definition") {
  // i16 elements 0x0102 and 0xFFFE; f32 1.0 is 3f 80 00 00; f64 -2.0 is c0 00 .. 00.
  Tensor a = decode_idx(Bytes{0, 0, 0x0B, 1, 0, 0, 0, 2, 0x01, 0x02, 0xFF, 0xFE}, "mem");
  REQUIRE(a.dtype() == DType::i32);
  CHECK(a.data<int32_t>()[0] == 258);
  CHECK(a.data<int32_t>()[1] == -2);
  Tensor b = decode_idx(Bytes{0, 0, 0x0D, 2, 0, 0, 0, 1, 0, 0, 0, 1, 0x3f, 0x80, 0, 0}, "mem");
  CHECK(b.shape() == dpx::Shape{1, 1});
  CHECK(b.data<float>()[0] == 1.0f);
  Tensor c = decode_idx(Bytes{0, 0, 0x0E, 1, 0, 0, 0, 1, 0xc0, 0, 0, 0, 0, 0, 0, 0}, "mem");
  CHECK(c.data<double>()[0] == -2.0);
  Tensor d = decode_idx(Bytes{0, 0, 0x09, 1, 0, 0, 0, 2, 0x80, 0x7f}, "mem");
  CHECK(d.data<int32_t>()[0] == -128);
  CHECK(d.data<int32_t>()[1] == 127);

  TempDir dir;
  write_idx(dir.file("x"), i32_tensor({2}, {258, -2}), IdxType::i16);
  CHECK(read_bytes(dir.file("x")) == Bytes{0, 0, 0x0B, 1, 0, 0, 0, 2, 0x01, 0x02, 0xFF, 0xFE});
  Tensor labels = Tensor::empty({3}, DType::i64);
  for (int i = 0; i < 3; ++i) labels.data<int64_t>()[i] = 7 - i;
  write_idx(dir.file("y"), labels, idx_type_for(labels.dtype()));
  CHECK(read_bytes(dir.file("y")) == Bytes{0, 0, 0x0C, 1, 0, 0, 0, 3, 0, 0, 0, 7, 0, 0, 0, 6, 0, 0, 0, 5});
}

TEST_CASE("idx: gzip is detected from the content, not the name; gzip members may be concatenated") {
  TempDir dir;
  Bytes raw = kU8Header;
  for (uint8_t i = 0; i < 10; ++i) raw.push_back(i * 3);
  write_bytes(dir.file("raw-named.gz"), raw);  // a .gz name holding raw IDX
  write_bytes(dir.file("gzip-named-raw"), gzip(raw));
  Bytes two = gzip(Bytes(raw.begin(), raw.begin() + 11));
  Bytes tail = gzip(Bytes(raw.begin() + 11, raw.end()));
  two.insert(two.end(), tail.begin(), tail.end());
  write_bytes(dir.file("two-members.gz"), two);
  for (const char* name : {"raw-named.gz", "gzip-named-raw", "two-members.gz"}) {
    CAPTURE(name);
    Tensor t = read_idx(dir.file(name));
    REQUIRE(t.shape() == dpx::Shape{10});
    for (int i = 0; i < 10; ++i) CHECK(t.data<uint8_t>()[i] == i * 3);
  }
}

TEST_CASE("idx: bad files are rejected with a message naming the file and the problem") {
  TempDir dir;
  Bytes good = kU8Header;
  good.resize(good.size() + 10, 7);

  std::string msg = error_of([&] { read_idx(dir.file("absent-idx1-ubyte")); });
  CHECK(contains(msg, "cannot open IDX file"));
  CHECK(contains(msg, dir.file("absent-idx1-ubyte")));
  CHECK(contains(msg, "No such file"));
  msg = error_of([&] { read_idx(dir.path.string()); });
  CHECK(contains(msg, "is a directory"));

  msg = read_error(dir, "zip", {'P', 'K', 3, 4, 0, 0, 0, 0});
  CHECK(contains(msg, "not an IDX file: the magic number is 50 4b 03 04"));
  CHECK(contains(msg, "expected 00 00 <type> <dims>"));
  // A gzip header, then a deflate block of the reserved type 11; then a compression method 9.
  msg = read_error(dir, "corrupt.gz", {0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0x03, 0x07, 0x00, 0x00});
  CHECK(contains(msg, "the gzip stream is corrupt (zlib: invalid block type)"));
  msg = read_error(dir, "method.gz", {0x1f, 0x8b, 0x09, 0, 0, 0, 0, 0, 0, 0x03, 0x00, 0x00});
  CHECK(contains(msg, "the gzip stream is corrupt (zlib: unknown compression method)"));
  Bytes bad_crc = gzip(good);
  bad_crc[bad_crc.size() - 6] ^= 0xff;  // in the CRC-32 of the trailer
  msg = read_error(dir, "bad-crc.gz", bad_crc);
  CHECK(contains(msg, "the gzip stream is corrupt"));

  msg = read_error(dir, "type", {0, 0, 0x07, 1, 0, 0, 0, 1, 0});
  CHECK(contains(msg, "unknown IDX element type code 0x07"));
  msg = read_error(dir, "nodims", {0, 0, 0x08, 0});
  CHECK(contains(msg, "zero dimensions"));
  msg = read_error(dir, "zerodim", {0, 0, 0x08, 2, 0, 0, 0, 5, 0, 0, 0, 0});
  CHECK(contains(msg, "dimension 1 of (5, 0) is zero"));
  msg = read_error(dir, "huge", {0, 0, 0x08, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff});
  CHECK(contains(msg, "absurd IDX dimensions"));
  msg = read_error(dir, "manydims", {0, 0, 0x08, 40});
  CHECK(contains(msg, "absurd IDX header: 40 dimensions"));

  msg = read_error(dir, "empty", {});
  CHECK(contains(msg, "truncated header: 0 bytes"));
  msg = read_error(dir, "shorthdr", {0, 0, 0x08, 3, 0, 0, 0, 1, 0});
  CHECK(contains(msg, "truncated header: expected 16 bytes, found 9"));
  Bytes short_data(good.begin(), good.end() - 3);
  msg = read_error(dir, "short", short_data);
  CHECK(contains(msg, "truncated data: (10) u8 elements need 10 bytes after the 8-byte header, found 7"));
  msg = read_error(dir, "short.gz", gzip(short_data));  // complete gzip stream, short IDX inside
  CHECK(contains(msg, "truncated data"));
  Bytes cut = gzip(good);
  cut.resize(cut.size() / 2 + 2);
  msg = read_error(dir, "cut.gz", cut);
  CHECK(contains(msg, "truncated gzip stream"));

  Bytes long_data = good;
  long_data.insert(long_data.end(), {1, 2, 3});
  msg = read_error(dir, "long", long_data);
  CHECK(contains(msg, "3 bytes of trailing garbage after the 10 bytes of (10) u8 elements"));
  msg = read_error(dir, "long.gz", gzip(long_data));
  CHECK(contains(msg, "3 bytes of trailing garbage"));
  Bytes after = gzip(good);
  after.insert(after.end(), {'x', 'y', 'z', 'w'});
  msg = read_error(dir, "after.gz", after);
  CHECK(contains(msg, "4 bytes of trailing garbage after the gzip stream"));
}

TEST_CASE("idx: the writer checks ranges and types, and leaves no file behind on failure") {
  TempDir dir;
  std::string msg = error_of([&] { write_idx(dir.file("x"), i32_tensor({2}, {5, 200}), IdxType::i8); });
  CHECK(contains(msg, "element 1 = 200 does not fit IDX type i8 [-128, 127]"));
  msg = error_of([&] { write_idx(dir.file("x"), i32_tensor({1}, {-1}), IdxType::u8); });
  CHECK(contains(msg, "does not fit IDX type u8"));
  msg = error_of([&] { write_idx(dir.file("x"), Tensor::from({2}, {1.f, 2.f}), IdxType::i32); });
  CHECK(contains(msg, "need a u8, i32 or i64 tensor"));
  CHECK(fs::is_empty(dir.path));
  msg = error_of([] { idx_type_for(DType::f16); });
  CHECK(contains(msg, "no element type for f16"));
}
