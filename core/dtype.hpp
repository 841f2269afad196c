// Element types of tensors. f16/bf16 are storage formats: CPU kernels compute in f32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dpx {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
  }
  return "?";
}

// Parses "f32", "float", "float32", "f64", "double", "f16", "half", "bf16", "i32", "int32",
// "i64", "int64", "u8", "uint8"; throws dpx::UsageError naming the accepted spellings.
DType parse_dtype(std::string_view name);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::u8; }

// IEEE half and bfloat16 conversions (round to nearest even), used by storage and safetensors.
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t b);

}  // namespace dpx
