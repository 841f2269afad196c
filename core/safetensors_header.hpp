// The safetensors header, read and checked as the reference implementation checks it: the
// 8-byte length, then the JSON that lays out the tensors. Shared by the file reader and the
// in-memory decoder (core/safetensors.cpp); not part of dpx's API.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"

namespace dpx::safetensors_detail {

inline constexpr uint64_t kLengthBytes = 8;

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // offsets into the data after the header
};

struct Layout {
  std::vector<Entry> entries;                   // sorted by offsets; they tile the data exactly
  std::map<std::string, std::string> metadata;  // the header's "__metadata__"
};

// The header's length, from the file's first 8 bytes (little-endian), checked against the
// file's size; `len_le` is read only when the file has 8 bytes.
uint64_t header_length(const uint8_t* len_le, uint64_t file_bytes, const std::string& path);

// Parses and validates the header; `buffer_bytes` is the size of the data after it. Throws a
// dpx::Error naming `path` for anything the reference would reject.
Layout parse_header(std::string_view header, uint64_t buffer_bytes, const std::string& path);

}  // namespace dpx::safetensors_detail
