// safetensors reading and writing. Validation follows the reference implementation
// (huggingface/safetensors, Metadata::validate): offsets sorted by begin must tile the byte
// buffer exactly, and each tensor's byte size must equal numel × dtype size.
#include "core/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <tuple>

#include "core/atomic_file.hpp"

namespace dpx {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and dpx copies it as is");

namespace {

constexpr uint64_t kLengthBytes = 8;
constexpr std::string_view kMetadataKey = "__metadata__";

template <typename... Args>
[[noreturn]] void invalid(const std::string& path, const Args&... args) {
  fail(path, ": invalid safetensors file: ", args...);
}

template <typename... Args>
[[noreturn]] void invalid_tensor(const std::string& path, const std::string& name, const Args&... args) {
  fail(path, ": invalid safetensors file: tensor '", name, "': ", args...);
}

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

// nlohmann keeps the last of duplicate keys silently; a duplicate tensor name would hide a
// tensor, so the parse callback records the first duplicate at any level.
struct DuplicateFinder {
  struct Level {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Level> levels;
  std::string duplicate;  // the message, empty while none was found

  bool operator()(int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      levels.emplace_back();
    } else if (event == E::object_end) {
      if (!levels.empty()) levels.pop_back();
    } else if (event == E::key && !levels.empty()) {
      Level& level = levels.back();
      std::string key = parsed.get<std::string>();
      if (!level.keys.insert(key).second && duplicate.empty()) {
        duplicate = levels.size() == 1
                        ? "tensor '" + key + "' appears twice in the header"
                        : "'" + levels[levels.size() - 2].last_key + "' has the key '" + key + "' twice";
      }
      level.last_key = std::move(key);
    }
    return true;
  }
};

// A non-negative JSON integer, or an error naming what it should have been.
uint64_t json_u64(const nlohmann::json& j, const std::string& path, const std::string& name,
                  const char* what) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) invalid_tensor(path, name, what, " is negative (", j.dump(), ")");
  invalid_tensor(path, name, what, " must be a non-negative integer, not ", j.dump());
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j,
                  uint64_t buffer_bytes) {
  if (!j.is_object())
    invalid_tensor(path, name, "must be an object with dtype, shape and data_offsets, not ", j.dump());
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!j.contains(field)) invalid_tensor(path, name, "missing \"", field, "\"");
  const auto& jd = j["dtype"];
  const auto& js = j["shape"];
  const auto& jo = j["data_offsets"];
  if (!jd.is_string()) invalid_tensor(path, name, "\"dtype\" must be a string, not ", jd.dump());
  if (!js.is_array()) invalid_tensor(path, name, "\"shape\" must be an array of integers, not ", js.dump());
  if (!jo.is_array() || jo.size() != 2)
    invalid_tensor(path, name, "\"data_offsets\" must be an array [begin, end], not ", jo.dump());

  Entry e;
  e.name = name;
  const std::string dtype_str = jd.get<std::string>();
  std::optional<DType> dtype = safetensors_dtype_from_name(dtype_str);
  if (!dtype)
    fail(path, ": tensor '", name, "' has dtype \"", dtype_str, "\", which dpx does not hold; dpx reads ",
         "F64, F32, F16, BF16, I64, I32 and U8 (convert the tensor before saving it)");
  e.dtype = *dtype;

  // Every partial product must fit in int64 (as the reference's checked_mul over usize), so a
  // hostile shape can neither wrap around to a small size nor overflow Tensor's element count.
  unsigned __int128 numel = 1;
  bool overflow = false;
  for (const auto& d : js) {
    uint64_t dim = json_u64(d, path, name, "a dimension of \"shape\"");
    e.shape.push_back(static_cast<int64_t>(dim));
    if (!overflow) numel *= dim;
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      overflow = true;
  }
  const unsigned __int128 bytes = numel * dtype_size(e.dtype);
  if (bytes > std::numeric_limits<uint64_t>::max()) overflow = true;
  e.begin = json_u64(jo[0], path, name, "data_offsets[0]");
  e.end = json_u64(jo[1], path, name, "data_offsets[1]");
  if (e.end < e.begin) invalid_tensor(path, name, "data_offsets [", e.begin, ", ", e.end, "] end before they begin");
  if (overflow) invalid_tensor(path, name, "shape ", js.dump(), " has too many elements");
  if (static_cast<uint64_t>(bytes) != e.end - e.begin)
    invalid_tensor(path, name, "data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, " bytes but ",
                   dtype_str, " ", shape_str(e.shape), " needs ", static_cast<uint64_t>(bytes));
  if (e.end > buffer_bytes)
    invalid_tensor(path, name, "data_offsets [", e.begin, ", ", e.end, "] reach beyond the ", buffer_bytes,
                   " bytes of data in the file (is the file truncated?)");
  return e;
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
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) fail("cannot open ", path, ": ", std::generic_category().message(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("cannot read ", path, ": ", std::generic_category().message(errno));
  if (!S_ISREG(st.st_mode)) fail("cannot read ", path, ": not a regular file");
  const uint64_t file_bytes = static_cast<uint64_t>(st.st_size);

  if (file_bytes < kLengthBytes)
    invalid(path, "the file has ", file_bytes, " bytes, shorter than the 8-byte header length");
  unsigned char len_le[kLengthBytes];
  read_exact(f.fd, path, len_le, kLengthBytes, 0);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | len_le[i];
  if (header_bytes > kSafetensorsMaxHeaderBytes)
    invalid(path, "header length ", header_bytes, " is over the limit of ", kSafetensorsMaxHeaderBytes, " bytes");
  if (header_bytes > file_bytes - kLengthBytes)
    invalid(path, "header length ", header_bytes, " reaches beyond the end of the file (", file_bytes, " bytes)");
  const uint64_t data_start = kLengthBytes + header_bytes;
  const uint64_t buffer_bytes = file_bytes - data_start;

  std::string header(header_bytes, '\0');
  read_exact(f.fd, path, header.data(), header_bytes, kLengthBytes);
  DuplicateFinder duplicates;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, std::ref(duplicates));
  } catch (const nlohmann::json::exception& e) {
    invalid(path, "the header is not valid JSON (", e.what(), ")");
  }
  if (!j.is_object()) invalid(path, "the header must be a JSON object, not ", j.type_name());
  if (!duplicates.duplicate.empty()) invalid(path, duplicates.duplicate);

  SafeTensors out;
  out.path = path;
  std::vector<Entry> entries;
  for (const auto& [key, value] : j.items()) {
    if (key == kMetadataKey) {
      if (value.is_null()) continue;  // the reference reads null as "no metadata"
      if (!value.is_object()) invalid(path, "\"__metadata__\" must be an object of strings, not ", value.dump());
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          invalid(path, "\"__metadata__\" value of '", mk, "' must be a string, not ", mv.dump());
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, value, buffer_bytes));
  }

  // As the reference: sorted by offsets, each begins where the previous ended, the last ends
  // at the end of the file. Name breaks ties between empty tensors, for a stable order.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < covered)
      invalid_tensor(path, e.name, "data_offsets [", e.begin, ", ", e.end, "] overlap tensor '",
                     entries[i - 1].name, "' [", entries[i - 1].begin, ", ", entries[i - 1].end, "]");
    if (e.begin > covered)
      invalid_tensor(path, e.name, "data_offsets [", e.begin, ", ", e.end, "] leave a hole of ", e.begin - covered,
                     " bytes after ", i == 0 ? std::string("the start of the data") : "tensor '" + entries[i - 1].name + "'",
                     " (tensors must cover the data contiguously)");
    covered = e.end;
  }
  if (covered != buffer_bytes)
    invalid(path, "the tensors cover ", covered, " bytes but the data after the header has ", buffer_bytes,
            " bytes (trailing bytes)");

  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    read_exact(f.fd, path, t.raw(), t.nbytes(), data_start + e.begin);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
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
