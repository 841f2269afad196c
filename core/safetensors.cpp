// safetensors reading and writing: the file (or bytes in memory) is split into its header, which
// core/safetensors_header.cpp parses and validates, and its data, copied into host tensors only
// after the header's layout has been checked against the file's size.
#include "core/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>

#include "core/atomic_file.hpp"
#include "core/safetensors_header.hpp"

namespace dpx {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and dpx copies it as is");

namespace {

using safetensors_detail::kLengthBytes;
constexpr std::string_view kMetadataKey = "__metadata__";

// Reads exactly n bytes at offset; a short read means the file shrank while being read.
void read_exact(int fd, const std::string& path, void* dst, uint64_t n, uint64_t offset) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail("cannot read ", path, ": ", std::generic_category().message(errno));
    }
    if (r == 0) fail("cannot read ", path, ": unexpected end of file (was it changed while being read?)");
    p += r;
    n -= static_cast<uint64_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The tensors of a validated layout, their bytes fetched by read(dst, bytes, offset in the data).
template <typename ReadData>
SafeTensors assemble(safetensors_detail::Layout layout, const std::string& path, ReadData read) {
  SafeTensors out;
  out.path = path;
  out.metadata = std::move(layout.metadata);
  out.tensors.reserve(layout.entries.size());
  for (safetensors_detail::Entry& e : layout.entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    read(t.raw(), t.nbytes(), e.begin);
    out.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
    case DType::u8: return "U8";
  }
  return "?";
}

std::optional<DType> safetensors_dtype_from_name(std::string_view name) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8})
    if (safetensors_dtype_name(t) == name) return t;
  return std::nullopt;
}

void sort_like_reference(std::vector<std::pair<std::string, Tensor>>& tensors) {
  // The reference sorts by its Dtype enum, declared "in increasing alignment order":
  // BOOL, U8, I8, F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64.
  auto rank = [](DType t) {
    switch (t) {
      case DType::u8: return 1;
      case DType::f16: return 7;
      case DType::bf16: return 8;
      case DType::i32: return 9;
      case DType::f32: return 11;
      case DType::f64: return 12;
      case DType::i64: return 13;
    }
    return 0;
  };
  std::stable_sort(tensors.begin(), tensors.end(), [&](const auto& a, const auto& b) {
    int ra = rank(a.second.dtype()), rb = rank(b.second.dtype());
    return ra != rb ? ra > rb : a.first < b.first;
  });
}

const Tensor* SafeTensors::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const Tensor& SafeTensors::expect(const std::string& name, const Shape& shape, DType dtype) const {
  const Tensor* t = find(name);
  if (!t)
    fail(path, ": no tensor '", name, "' in the file (it holds ", tensors.size(),
         " tensors); is it a checkpoint of another model?");
  try {
    check_tensor_matches(name, *t, shape, dtype);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }
  return *t;
}

void check_tensor_matches(const std::string& name, const Tensor& t, const Shape& expected_shape,
                          DType expected_dtype) {
  if (t.shape() == expected_shape && t.dtype() == expected_dtype) return;
  fail(name, ": file has ", safetensors_dtype_name(t.dtype()), " ", shape_str(t.shape()), ", model expects ",
       safetensors_dtype_name(expected_dtype), " ", shape_str(expected_shape));
}

SafeTensors read_safetensors(const std::string& path) {
  Fd f;
  // O_NONBLOCK: a FIFO named as weights is refused below (not a regular file), not waited on.
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (f.fd < 0) fail("cannot open ", path, ": ", std::generic_category().message(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("cannot read ", path, ": ", std::generic_category().message(errno));
  if (!S_ISREG(st.st_mode)) fail("cannot read ", path, ": not a regular file");
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);

  uint8_t len_le[kLengthBytes] = {};
  if (file_bytes >= kLengthBytes) read_exact(f.fd, path, len_le, kLengthBytes, 0);
  const uint64_t header_bytes = safetensors_detail::header_length(len_le, file_bytes, path);
  const uint64_t data_start = kLengthBytes + header_bytes;
  std::string header(header_bytes, '\0');
  read_exact(f.fd, path, header.data(), header_bytes, kLengthBytes);
  safetensors_detail::Layout layout = safetensors_detail::parse_header(header, file_bytes - data_start, path);
  return assemble(std::move(layout), path, [&](void* dst, uint64_t n, uint64_t offset) {
    read_exact(f.fd, path, dst, n, data_start + offset);
  });
}

SafeTensors decode_safetensors(std::span<const uint8_t> bytes, const std::string& name) {
  const uint64_t header_bytes = safetensors_detail::header_length(bytes.data(), bytes.size(), name);
  const uint64_t data_start = kLengthBytes + header_bytes;
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + kLengthBytes, header_bytes);
  safetensors_detail::Layout layout = safetensors_detail::parse_header(header, bytes.size() - data_start, name);
  return assemble(std::move(layout), name, [&](void* dst, uint64_t n, uint64_t offset) {
    if (n) std::memcpy(dst, bytes.data() + data_start + offset, n);
  });
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata, std::string_view flag) {
  // ordered_json keeps insertion order, so the header lists entries as the reference does:
  // "__metadata__" first, then the tensors in buffer order, fields dtype, shape, data_offsets.
  using ojson = nlohmann::ordered_json;
  ojson header = ojson::object();
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == kMetadataKey) fail("cannot write ", path, ": a tensor may not be called \"__metadata__\"");
    if (!names.insert(name).second) fail("cannot write ", path, ": tensor '", name, "' is given twice");
    if (!t.defined()) fail("cannot write ", path, ": tensor '", name, "' is undefined (no storage)");
    ojson entry = ojson::object();
    entry["dtype"] = safetensors_dtype_name(t.dtype());
    entry["shape"] = t.shape();
    entry["data_offsets"] = ojson::array({offset, offset + t.nbytes()});
    header[name] = std::move(entry);
    offset += t.nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail("cannot write ", path, ": a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // aligns the data to 8 bytes, as the reference
  if (text.size() > kSafetensorsMaxHeaderBytes)
    fail("cannot write ", path, ": the header would be ", text.size(), " bytes, over the limit of ",
         kSafetensorsMaxHeaderBytes, " that readers accept");

  write_file_atomic(path, [&](std::ostream& os) {
    char len_le[kLengthBytes];
    for (size_t i = 0; i < kLengthBytes; ++i) len_le[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
    os.write(len_le, kLengthBytes);
    os.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const auto& [name, t] : tensors) {
      // One tensor at a time on the host, so saving a GPU model never holds two host copies.
      Tensor host = t.device().is_cpu() ? t : t.to(Device::cpu());
      os.write(static_cast<const char*>(host.raw()), static_cast<std::streamsize>(host.nbytes()));
    }
  }, flag);
}

}  // namespace dpx
