// IDX reading and writing. The decoder pulls bytes from a source (memory, or zlib inflating
// memory), header first: corrupt dimensions are reported before any large allocation, and a
// gzip file never takes more memory than its header promises (plus a small scratch buffer).
#include "core/data/idx.hpp"

#include <unistd.h>

#include <zlib.h>

#include <bit>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <sstream>
#include <vector>

#include "core/atomic_file.hpp"
#include "core/input_files.hpp"

namespace dpx::data {

namespace {

constexpr int kMaxDims = 8;                        // MNIST uses 1 and 3; more means a corrupt header
constexpr uint64_t kMaxDataBytes = uint64_t{1} << 40;  // 1 TiB: no real IDX file comes close

bool known_type(uint8_t code) {
  return code == 0x08 || code == 0x09 || code == 0x0B || code == 0x0C || code == 0x0D || code == 0x0E;
}

std::string hex_bytes(const uint8_t* p, size_t n) {
  std::ostringstream os;
  for (size_t i = 0; i < n; ++i)
    os << (i ? " " : "") << std::hex << std::setw(2) << std::setfill('0') << static_cast<int>(p[i]);
  return os.str();
}

bool looks_gzip(std::span<const uint8_t> b) { return b.size() >= 2 && b[0] == 0x1f && b[1] == 0x8b; }

// Where the decoder gets its bytes. read() returns fewer than n only at the end of the data.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual size_t read(uint8_t* dst, size_t n) = 0;
  // No more than this many bytes can follow; lets a corrupt header fail before a huge allocation.
  virtual uint64_t max_remaining() const = 0;
};

class MemorySource : public ByteSource {
 public:
  explicit MemorySource(std::span<const uint8_t> b) : b_(b) {}
  size_t read(uint8_t* dst, size_t n) override {
    size_t k = std::min(n, b_.size() - pos_);
    if (k) std::memcpy(dst, b_.data() + pos_, k);
    pos_ += k;
    return k;
  }
  uint64_t max_remaining() const override { return b_.size() - pos_; }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

// Inflates gzip (one or more concatenated members, as `cat a.gz b.gz` makes) on demand.
class GzipSource : public ByteSource {
 public:
  GzipSource(std::span<const uint8_t> b, const std::string& name) : name_(name) {
    if (b.size() > UINT_MAX) fail("'", name, "': compressed file of ", b.size(), " bytes is too large (4 GiB at most)");
    if (inflateInit2(&zs_, 16 + MAX_WBITS) != Z_OK) fail("'", name, "': zlib could not start inflating");
    zs_.next_in = const_cast<Bytef*>(b.data());
    zs_.avail_in = static_cast<uInt>(b.size());
  }
  ~GzipSource() override { inflateEnd(&zs_); }
  // Deflate expands at most 1032:1 (zlib's FAQ / deflateBound), plus the stream's own framing.
  uint64_t max_remaining() const override { return ended_ ? 0 : uint64_t{zs_.avail_in} * 1032 + (1 << 16); }

  size_t read(uint8_t* dst, size_t n) override {
    size_t done = 0;
    while (done < n && !ended_) {
      size_t want = std::min<size_t>(n - done, UINT_MAX);
      zs_.next_out = dst + done;
      zs_.avail_out = static_cast<uInt>(want);
      int rc = inflate(&zs_, Z_NO_FLUSH);
      done += want - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        // Another gzip member may follow; anything else after the stream is not gzip data.
        if (zs_.avail_in == 0) {
          ended_ = true;
        } else if (zs_.avail_in >= 2 && zs_.next_in[0] == 0x1f && zs_.next_in[1] == 0x8b) {
          inflateReset(&zs_);
        } else {
          fail("'", name_, "': ", zs_.avail_in, " bytes of trailing garbage after the gzip stream");
        }
      } else if (rc == Z_BUF_ERROR && zs_.avail_in == 0) {
        fail("'", name_, "': truncated gzip stream: the compressed data ends before its end marker "
             "(the file was probably cut short while downloading or copying; fetch it again)");
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        fail("'", name_, "': the gzip stream is corrupt (zlib: ", zs_.msg ? zs_.msg : "error " + std::to_string(rc),
             "); fetch or install the file again");
      }
    }
    return done;
  }

 private:
  z_stream zs_{};
  std::string name_;
  bool ended_ = false;
};

// Reads exactly n bytes or reports how many the source held.
void read_exact(ByteSource& src, uint8_t* dst, size_t n, const std::string& name, const char* what,
                size_t already = 0) {
  size_t got = src.read(dst, n);
  if (got < n)
    fail("'", name, "': truncated ", what, ": expected ", n + already, " bytes, found ", got + already,
         " (the file was cut short; fetch it again)");
}

// Counts the bytes left in a source without keeping them (bounded by the source's size).
uint64_t drain(ByteSource& src) {
  std::vector<uint8_t> scratch(1 << 16);
  uint64_t total = 0;
  for (size_t k; (k = src.read(scratch.data(), scratch.size())) > 0;) total += k;
  return total;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Big-endian elements -> host order, in place (same width).
template <typename U>
void swap_in_place(void* data, int64_t n) {
  if constexpr (std::endian::native == std::endian::big) return;
  U* p = static_cast<U*>(data);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (sizeof(U) == 4) p[i] = __builtin_bswap32(p[i]);
    else p[i] = __builtin_bswap64(p[i]);
  }
}

Tensor decode(ByteSource& src, const std::string& name) {
  uint8_t magic[4];
  size_t got = src.read(magic, 4);
  if (got < 4) fail("'", name, "': truncated header: ", got, " bytes, an IDX file starts with a 4-byte magic number");
  if (magic[0] != 0 || magic[1] != 0 || !known_type(magic[2])) {
    std::string base = "'" + name + "': ";
    if (magic[0] == 0 && magic[1] == 0)
      fail(base, "unknown IDX element type code 0x", hex_bytes(magic + 2, 1),
           "; known: 08 u8, 09 i8, 0b i16, 0c i32, 0d f32, 0e f64");
    fail(base, "not an IDX file: the magic number is ", hex_bytes(magic, 4),
         ", expected 00 00 <type> <dims> (e.g. 00 00 08 03 for MNIST images, 00 00 08 01 for labels)");
  }
  auto type = static_cast<IdxType>(magic[2]);
  int ndims = magic[3];
  if (ndims == 0) fail("'", name, "': the IDX header has zero dimensions (magic ", hex_bytes(magic, 4), ")");
  if (ndims > kMaxDims)
    fail("'", name, "': absurd IDX header: ", ndims, " dimensions (dpx reads at most ", kMaxDims, "); the file is corrupt");
  uint8_t dims_raw[4 * kMaxDims];
  read_exact(src, dims_raw, 4 * static_cast<size_t>(ndims), name, "header", 4);
  Shape shape(static_cast<size_t>(ndims));
  uint64_t bytes = idx_type_size(type);
  for (int d = 0; d < ndims; ++d) shape[d] = be32(dims_raw + 4 * d);
  for (int d = 0; d < ndims; ++d) {
    if (shape[d] == 0) fail("'", name, "': dimension ", d, " of ", shape_str(shape), " is zero; the IDX file holds no data");
    // Checked before multiplying, so the product cannot overflow.
    if (bytes > kMaxDataBytes / static_cast<uint64_t>(shape[d]))
      fail("'", name, "': absurd IDX dimensions ", shape_str(shape), " (more than 1 TiB of data); the header is corrupt");
    bytes *= static_cast<uint64_t>(shape[d]);
  }
  const size_t esize = idx_type_size(type);
  const int64_t n = static_cast<int64_t>(bytes / esize);
  const size_t header = 4 + 4 * static_cast<size_t>(ndims);
  auto truncated = [&](uint64_t have) {
    fail("'", name, "': truncated data: ", shape_str(shape), " ", idx_type_name(type), " elements need ", bytes,
         " bytes after the ", header, "-byte header, found ", have, " (the file was cut short; fetch it again)");
  };
  if (bytes > src.max_remaining()) truncated(drain(src));
  Tensor t = Tensor::empty(shape, idx_tensor_dtype(type));
  std::vector<uint8_t> narrow;  // i8 / i16 arrive narrower than their i32 tensor
  uint8_t* dst = static_cast<uint8_t*>(t.raw());
  if (esize < dtype_size(t.dtype())) {
    narrow.resize(bytes);
    dst = narrow.data();
  }
  size_t have = src.read(dst, bytes);
  if (have < bytes) truncated(have);
  if (uint64_t extra = drain(src))
    fail("'", name, "': ", extra, " bytes of trailing garbage after the ", bytes, " bytes of ", shape_str(shape), " ",
         idx_type_name(type), " elements; the header's dimensions do not match the file");
  switch (type) {
    case IdxType::u8: break;
    case IdxType::i8: {
      int32_t* o = t.data<int32_t>();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<int8_t>(narrow[i]);
      break;
    }
    case IdxType::i16: {
      int32_t* o = t.data<int32_t>();
      for (int64_t i = 0; i < n; ++i)
        o[i] = static_cast<int16_t>(static_cast<uint16_t>((narrow[2 * i] << 8) | narrow[2 * i + 1]));
      break;
    }
    case IdxType::i32:
    case IdxType::f32: swap_in_place<uint32_t>(t.raw(), n); break;
    case IdxType::f64: swap_in_place<uint64_t>(t.raw(), n); break;
  }
  return t;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("'", path, "' is a directory, not an IDX file");
  // Opened without blocking on a FIFO (then refused: not a regular file), and read through stdio.
  const int fd = open_regular_file(path);
  if (fd < 0)
    fail("cannot open IDX file '", path, "': ", errno == ENODEV ? "not a regular file (a FIFO, device or socket)"
                                                                 : std::strerror(errno));
  std::FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    ::close(fd);
    fail("cannot open IDX file '", path, "': ", std::strerror(errno));
  }
  std::vector<uint8_t> bytes;
  if (auto size = std::filesystem::file_size(path, ec); !ec) bytes.reserve(size);
  uint8_t buf[1 << 16];
  for (size_t k; (k = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.insert(bytes.end(), buf, buf + k);
  bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) fail("error reading IDX file '", path, "'");
  return bytes;
}

// Appends v big-endian, as IDX stores every multi-byte element.
template <typename T>
void append_be(std::vector<uint8_t>& out, T v) {
  for (int b = static_cast<int>(sizeof(T)) - 1; b >= 0; --b) out.push_back(static_cast<uint8_t>(v >> (8 * b)));
}

int64_t integer_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::u8: return static_cast<const uint8_t*>(t.raw())[i];
    case DType::i32: return static_cast<const int32_t*>(t.raw())[i];
    case DType::i64: return static_cast<const int64_t*>(t.raw())[i];
    default: fail("write_idx: integer element types need a u8, i32 or i64 tensor, got ", dtype_name(t.dtype()));
  }
}

double real_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f32: return static_cast<const float*>(t.raw())[i];
    case DType::f64: return static_cast<const double*>(t.raw())[i];
    default: return static_cast<double>(integer_at(t, i));
  }
}

std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& raw, const std::string& path) {
  if (raw.size() > UINT_MAX) fail("write_idx '", path, "': ", raw.size(), " bytes is too large to gzip in one piece (4 GiB at most)");
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    fail("write_idx '", path, "': zlib could not start compressing");
  std::vector<uint8_t> out(deflateBound(&zs, raw.size()));
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) fail("write_idx '", path, "': zlib failed to compress (error ", rc, ")");
  return out;
}

}  // namespace

std::string_view idx_type_name(IdxType t) {
  switch (t) {
    case IdxType::u8: return "u8";
    case IdxType::i8: return "i8";
    case IdxType::i16: return "i16";
    case IdxType::i32: return "i32";
    case IdxType::f32: return "f32";
    case IdxType::f64: return "f64";
  }
  return "?";
}

size_t idx_type_size(IdxType t) {
  switch (t) {
    case IdxType::u8:
    case IdxType::i8: return 1;
    case IdxType::i16: return 2;
    case IdxType::i32:
    case IdxType::f32: return 4;
    case IdxType::f64: return 8;
  }
  return 0;
}

DType idx_tensor_dtype(IdxType t) {
  switch (t) {
    case IdxType::u8: return DType::u8;
    case IdxType::i8:
    case IdxType::i16:
    case IdxType::i32: return DType::i32;
    case IdxType::f32: return DType::f32;
    case IdxType::f64: return DType::f64;
  }
  return DType::u8;
}

IdxType idx_type_for(DType dtype) {
  switch (dtype) {
    case DType::u8: return IdxType::u8;
    case DType::i32:
    case DType::i64: return IdxType::i32;
    case DType::f32: return IdxType::f32;
    case DType::f64: return IdxType::f64;
    default: fail("IDX has no element type for ", dtype_name(dtype), " tensors (use u8, i32, i64, f32 or f64)");
  }
}

Tensor decode_idx(std::span<const uint8_t> bytes, const std::string& name) {
  if (looks_gzip(bytes)) {
    GzipSource src(bytes, name);
    return decode(src, name);
  }
  MemorySource src(bytes);
  return decode(src, name);
}

Tensor read_idx(const std::string& path) {
  std::vector<uint8_t> bytes = read_file(path);
  return decode_idx(bytes, path);
}

void write_idx(const std::string& path, const Tensor& t, IdxType type, bool gzip) {
  DPX_CHECK(t.defined() && t.device().is_cpu(), "write_idx '", path, "': needs a defined host tensor");
  if (t.dim() < 1 || t.dim() > kMaxDims) fail("write_idx '", path, "': IDX holds 1 to ", kMaxDims, " dimensions, got ", shape_str(t.shape()));
  for (int64_t d : t.shape())
    if (d <= 0 || d > std::numeric_limits<uint32_t>::max())
      fail("write_idx '", path, "': every dimension must be in 1..2^32-1, got ", shape_str(t.shape()));
  std::vector<uint8_t> out = {0, 0, static_cast<uint8_t>(type), static_cast<uint8_t>(t.dim())};
  for (int64_t d : t.shape()) append_be(out, static_cast<uint32_t>(d));
  out.reserve(out.size() + static_cast<size_t>(t.numel()) * idx_type_size(type));
  auto check_range = [&](int64_t v, int64_t lo, int64_t hi, int64_t i) {
    if (v < lo || v > hi)
      fail("write_idx '", path, "': element ", i, " = ", v, " does not fit IDX type ", idx_type_name(type), " [", lo, ", ", hi, "]");
  };
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (type) {
      case IdxType::u8: { int64_t v = integer_at(t, i); check_range(v, 0, 255, i); out.push_back(static_cast<uint8_t>(v)); break; }
      case IdxType::i8: { int64_t v = integer_at(t, i); check_range(v, -128, 127, i); out.push_back(static_cast<uint8_t>(v)); break; }
      case IdxType::i16: { int64_t v = integer_at(t, i); check_range(v, INT16_MIN, INT16_MAX, i); append_be(out, static_cast<uint16_t>(v)); break; }
      case IdxType::i32: { int64_t v = integer_at(t, i); check_range(v, INT32_MIN, INT32_MAX, i); append_be(out, static_cast<uint32_t>(v)); break; }
      case IdxType::f32: append_be(out, std::bit_cast<uint32_t>(static_cast<float>(real_at(t, i)))); break;
      case IdxType::f64: append_be(out, std::bit_cast<uint64_t>(real_at(t, i))); break;
    }
  }
  if (gzip) out = gzip_bytes(out, path);
  write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(out.data()), out.size()));
}

}  // namespace dpx::data
