// IDX files (the MNIST / Fashion-MNIST format), raw or gzip-compressed: a reader that turns
// any IDX element type into a host Tensor with the file's dimensions, and a writer (raw or gzip)
// for tests and for users who make small data sets. Bad files give a dpx::Error naming the file.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/tensor.hpp"

namespace dpx::data {

// The element type code: byte 3 of an IDX file (http://yann.lecun.com/exdb/mnist/, "THE IDX
// FILE FORMAT"). Multi-byte elements are big-endian in the file.
enum class IdxType : uint8_t { u8 = 0x08, i8 = 0x09, i16 = 0x0B, i32 = 0x0C, f32 = 0x0D, f64 = 0x0E };
std::string_view idx_type_name(IdxType t);
size_t idx_type_size(IdxType t);
// The tensor dtype an element type is read into: u8 -> u8; i8, i16, i32 -> i32; f32; f64.
DType idx_tensor_dtype(IdxType t);

// Reads an IDX file into a host tensor. Gzip is detected from the content (magic 1f 8b), not
// from the name, so "x.gz" holding raw IDX reads fine. Throws dpx::Error naming `path` for: a
// missing or unreadable file, a corrupt or truncated gzip stream, a wrong magic number, an
// unknown type code, zero or absurd dimensions, truncated data and trailing bytes.
Tensor read_idx(const std::string& path);

// The same from bytes already in memory (raw or gzip); `name` is used in error messages.
Tensor decode_idx(std::span<const uint8_t> bytes, const std::string& name);

// Writes `t` (host; u8, i32, i64, f32 or f64) as IDX with element type `type`; gzip-compressed
// when `gzip`. Integer values must fit the element type (checked). The file is written next to
// `path` and renamed into place (write_file_atomic), so a failed write leaves no partial file.
void write_idx(const std::string& path, const Tensor& t, IdxType type, bool gzip = false);
// The natural element type for a tensor's dtype (u8 -> u8, i32/i64 -> i32, f32, f64).
IdxType idx_type_for(DType dtype);

}  // namespace dpx::data
