// safetensors header validation, following the reference implementation (huggingface/safetensors,
// Metadata::validate): offsets sorted by begin must tile the byte buffer exactly, and each
// tensor's byte size must equal numel × dtype size. Nothing from the file is trusted before that.
#include "core/safetensors_header.hpp"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "core/error.hpp"
#include "core/safetensors.hpp"

namespace dpx::safetensors_detail {

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";

template <typename... Args>
[[noreturn]] void invalid(const std::string& path, const Args&... args) {
  fail(path, ": invalid safetensors file: ", args...);
}

// Names come from the file: a hostile one may be megabytes long, so messages quote an excerpt.
template <typename... Args>
[[noreturn]] void invalid_tensor(const std::string& path, const std::string& name, const Args&... args) {
  fail(path, ": invalid safetensors file: tensor '", excerpt(name), "': ", args...);
}

// A JSON value of the header as a message may quote it.
std::string quote(const nlohmann::json& j) { return excerpt(j.dump()); }

// nlohmann's parse errors quote the text they stopped at ("; last read: '...'", "number overflow
// parsing '...'"), which may be a whole unterminated string of the header: keep an excerpt of it.
std::string json_error_excerpt(const std::string& what) {
  size_t token = std::string::npos;
  for (std::string_view marker : {"; last read: '", " parsing '"})
    if (size_t at = what.find(marker); at != std::string::npos) {
      token = at + marker.size();
      break;
    }
  if (token == std::string::npos) return excerpt(what, 300);
  size_t end = what.rfind("'; expected ");  // the token's closing quote, when more follows
  if (end == std::string::npos || end < token) end = !what.empty() && what.back() == '\'' ? what.size() - 1 : what.size();
  const std::string_view w = what;
  return std::string(w.substr(0, token)) + excerpt(w.substr(token, end - token)) + excerpt(w.substr(end), 120);
}

// The offset of the first '[' or '{' that opens a level deeper than `limit`, counted outside
// strings, or npos. Malformed JSON is the parser's to report; this only bounds the nesting
// that nlohmann's recursive dump() and copies would walk.
size_t too_deep_at(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

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
        // Appended piece by piece: GCC 12's -Wrestrict misreads `"literal" + std::string`.
        if (levels.size() == 1) {
          duplicate.append("tensor '").append(excerpt(key)).append("' appears twice in the header");
        } else {
          duplicate.append("'").append(excerpt(levels[levels.size() - 2].last_key));
          duplicate.append("' has the key '").append(excerpt(key)).append("' twice");
        }
      }
      level.last_key = std::move(key);
    }
    return true;
  }
};

// A non-negative JSON integer, or an error naming what it should have been.
uint64_t json_u64(const nlohmann::json& j, const std::string& path, const std::string& name, const char* what) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer()) invalid_tensor(path, name, what, " is negative (", quote(j), ")");
  invalid_tensor(path, name, what, " must be a non-negative integer, not ", quote(j));
}

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& j, uint64_t buffer_bytes) {
  if (!j.is_object())
    invalid_tensor(path, name, "must be an object with dtype, shape and data_offsets, not ", quote(j));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!j.contains(field)) invalid_tensor(path, name, "missing \"", field, "\"");
  const auto& jd = j["dtype"];
  const auto& js = j["shape"];
  const auto& jo = j["data_offsets"];
  if (!jd.is_string()) invalid_tensor(path, name, "\"dtype\" must be a string, not ", quote(jd));
  if (!js.is_array()) invalid_tensor(path, name, "\"shape\" must be an array of integers, not ", quote(js));
  if (!jo.is_array() || jo.size() != 2)
    invalid_tensor(path, name, "\"data_offsets\" must be an array [begin, end], not ", quote(jo));

  Entry e;
  e.name = name;
  const std::string dtype_str = jd.get<std::string>();
  std::optional<DType> dtype = safetensors_dtype_from_name(dtype_str);
  if (!dtype)
    fail(path, ": tensor '", excerpt(name), "' has dtype \"", excerpt(dtype_str), "\", which dpx does not hold; ",
         "dpx reads F64, F32, F16, BF16, I64, I32 and U8 (convert the tensor before saving it)");
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
  if (overflow) invalid_tensor(path, name, "shape ", quote(js), " has too many elements");
  if (static_cast<uint64_t>(bytes) != e.end - e.begin)
    invalid_tensor(path, name, "data_offsets [", e.begin, ", ", e.end, "] hold ", e.end - e.begin, " bytes but ",
                   dtype_str, " ", excerpt(shape_str(e.shape)), " needs ", static_cast<uint64_t>(bytes));
  if (e.end > buffer_bytes)
    invalid_tensor(path, name, "data_offsets [", e.begin, ", ", e.end, "] reach beyond the ", buffer_bytes,
                   " bytes of data in the file (is the file truncated?)");
  return e;
}

}  // namespace

uint64_t header_length(const uint8_t* len_le, uint64_t file_bytes, const std::string& path) {
  if (file_bytes < kLengthBytes)
    invalid(path, "the file has ", file_bytes, " bytes, shorter than the 8-byte header length");
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | len_le[i];
  if (header_bytes > kSafetensorsMaxHeaderBytes)
    invalid(path, "header length ", header_bytes, " is over the limit of ", kSafetensorsMaxHeaderBytes, " bytes");
  if (header_bytes > file_bytes - kLengthBytes)
    invalid(path, "header length ", header_bytes, " reaches beyond the end of the file (", file_bytes, " bytes)");
  return header_bytes;
}

Layout parse_header(std::string_view header, uint64_t buffer_bytes, const std::string& path) {
  if (size_t at = too_deep_at(header, kSafetensorsMaxHeaderDepth); at != std::string_view::npos)
    invalid(path, "the header nests arrays and objects deeper than ", kSafetensorsMaxHeaderDepth,
            " levels (at byte ", at, " of the header); a safetensors header needs 3 (is the file corrupt?)");
  DuplicateFinder duplicates;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header.begin(), header.end(), std::ref(duplicates));
  } catch (const nlohmann::json::exception& e) {
    invalid(path, "the header is not valid JSON (", json_error_excerpt(e.what()), ")");
  }
  if (!j.is_object()) invalid(path, "the header must be a JSON object, not ", j.type_name());
  if (!duplicates.duplicate.empty()) invalid(path, duplicates.duplicate);

  Layout out;
  for (const auto& [key, value] : j.items()) {
    if (key == kMetadataKey) {
      if (value.is_null()) continue;  // the reference reads null as "no metadata"
      if (!value.is_object()) invalid(path, "\"__metadata__\" must be an object of strings, not ", quote(value));
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          invalid(path, "\"__metadata__\" value of '", excerpt(mk), "' must be a string, not ", quote(mv));
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    out.entries.push_back(parse_entry(path, key, value, buffer_bytes));
  }

  // As the reference: sorted by offsets, each begins where the previous ended, the last ends
  // at the end of the file. Name breaks ties between empty tensors, for a stable order.
  std::vector<Entry>& entries = out.entries;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (e.begin < covered)
      invalid_tensor(path, e.name, "data_offsets [", e.begin, ", ", e.end, "] overlap tensor '",
                     excerpt(entries[i - 1].name), "' [", entries[i - 1].begin, ", ", entries[i - 1].end, "]");
    if (e.begin > covered)
      invalid_tensor(path, e.name, "data_offsets [", e.begin, ", ", e.end, "] leave a hole of ", e.begin - covered,
                     " bytes after ",
                     i == 0 ? std::string("the start of the data") : "tensor '" + excerpt(entries[i - 1].name) + "'",
                     " (tensors must cover the data contiguously)");
    covered = e.end;
  }
  if (covered != buffer_bytes)
    invalid(path, "the tensors cover ", covered, " bytes but the data after the header has ", buffer_bytes,
            " bytes (trailing bytes)");
  return out;
}

}  // namespace dpx::safetensors_detail
