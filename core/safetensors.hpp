// The safetensors format (8-byte little-endian header length, JSON header, byte buffer), read
// and written exactly as the reference implementation does, so weights move between dpx and
// PyTorch under their state_dict names. Reading validates everything before trusting it.
#pragma once
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.hpp"

namespace dpx {

// The reference refuses headers above this size (safetensors' MAX_HEADER_SIZE); so does dpx.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
// A header nests 3 levels deep (the header object, a tensor's object, its shape array); unknown
// fields may nest deeper. The reference's JSON parser (serde_json) refuses 128 levels and more,
// so dpx refuses them too, before parsing: every file the reference reads is read, and no
// header can make recursion over the parsed JSON (nlohmann's dump and copies) exhaust a stack.
inline constexpr int kSafetensorsMaxHeaderDepth = 127;

// "F32", "F64", "F16", "BF16", "I32", "I64", "U8": the file's names for dpx's dtypes.
std::string_view safetensors_dtype_name(DType dtype);
// The dtype for a file's name, or nothing for a name dpx does not hold (BOOL, I8, U16, F8_…).
std::optional<DType> safetensors_dtype_from_name(std::string_view name);

struct SafeTensors {
  std::string path;                                      // where it was read from, for messages
  std::vector<std::pair<std::string, Tensor>> tensors;   // host tensors, in file order of offsets
  std::map<std::string, std::string> metadata;           // the header's "__metadata__"

  // The tensor called `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
  // The tensor called `name`, checked against what a model expects (check_tensor_matches);
  // throws a dpx::Error naming the file and the tensor when it is missing or differs.
  const Tensor& expect(const std::string& name, const Shape& shape, DType dtype) const;
};

// Reads and validates a whole file; tensors keep the file's dtype. Throws a dpx::Error naming
// the file (and the tensor) for anything the reference implementation would reject, and for
// dtypes dpx does not hold.
SafeTensors read_safetensors(const std::string& path);
// The same from a whole file already in memory; `name` stands for the path in messages.
SafeTensors decode_safetensors(std::span<const uint8_t> bytes, const std::string& name);

// Writes tensors (on any device; copied to the host one at a time) in the order given, through
// write_file_atomic. The header lists "__metadata__" first (when not empty), then the tensors
// in the same order, padded with spaces to a multiple of 8 bytes as the reference does. For a
// file PyTorch maps without copies, order the tensors with sort_like_reference first.
// `flag` names the option that chose the path in errors ("--save", "--output", ...).
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {}, std::string_view flag = "--out");

// Puts tensors in the reference writer's order: descending dtype (I64, F64, F32, I32, BF16,
// F16, U8), then name. Every tensor then starts aligned to its element size, which PyTorch's
// zero-copy loading needs; write_safetensors itself keeps the order it is given.
void sort_like_reference(std::vector<std::pair<std::string, Tensor>>& tensors);

// Throws "<name>: file has F16 (64, 3, 7, 7), model expects F32 (64, 3, 7, 7)" unless `t` has
// exactly the expected shape and dtype. Used when loading model weights.
void check_tensor_matches(const std::string& name, const Tensor& t, const Shape& expected_shape,
                          DType expected_dtype);

}  // namespace dpx
