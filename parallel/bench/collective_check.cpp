// Closed-form inputs and expected results for the benchmark's check (see collective_check.hpp).
// Both are periodic in the element index (period 24 = lcm(3, 8)), so the check costs one table
// lookup and one compare per element whatever the number of ranks.
#include "parallel/bench/collective_check.hpp"

#include <array>
#include <cstring>

namespace dpx::parallel {

namespace {

constexpr size_t kPeriod = 24;

int64_t input_value(size_t i, int rank, ReduceOp op) {
  if (op == ReduceOp::prod) return (i + static_cast<size_t>(rank)) % 8 == 0 ? 2 : 1;
  return 1 + static_cast<int64_t>((i + 2 * static_cast<size_t>(rank)) % 3);
}

// One element of `dtype` holding the integer v (or v / ranks for avg), as the kernels compute it.
struct Bits {
  std::array<unsigned char, 8> b{};
};

template <typename T>
Bits bits_of(T x) {
  Bits out;
  std::memcpy(out.b.data(), &x, sizeof(T));
  return out;
}

// The reduction of every rank's input, computed exactly (integers: with two's-complement wrap),
// then divided for avg exactly as finish_average divides.
Bits expected_reduced(size_t i, DType dtype, ReduceOp op, int ranks) {
  uint64_t acc = static_cast<uint64_t>(input_value(i, 0, op));
  for (int r = 1; r < ranks; ++r) {
    const uint64_t v = static_cast<uint64_t>(input_value(i, r, op));
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: acc += v; break;
      case ReduceOp::prod: acc *= v; break;
      case ReduceOp::max: acc = v > acc ? v : acc; break;
      case ReduceOp::min: acc = v < acc ? v : acc; break;
    }
  }
  const bool avg = op == ReduceOp::avg;
  switch (dtype) {
    case DType::f32: {
      float x = static_cast<float>(acc);
      return bits_of(avg ? x / static_cast<float>(ranks) : x);
    }
    case DType::f64: {
      double x = static_cast<double>(acc);
      return bits_of(avg ? x / static_cast<double>(ranks) : x);
    }
    case DType::f16:
    case DType::bf16: {
      auto round = dtype == DType::f16 ? float_to_half : float_to_bf16;
      auto widen = dtype == DType::f16 ? half_to_float : bf16_to_float;
      float x = widen(round(static_cast<float>(acc)));
      return bits_of(round(avg ? x / static_cast<float>(ranks) : x));
    }
    case DType::i32: {
      auto x = static_cast<int32_t>(static_cast<uint32_t>(acc));
      return bits_of(avg ? static_cast<int32_t>(x / ranks) : x);
    }
    case DType::i64: {
      auto x = static_cast<int64_t>(acc);
      return bits_of(avg ? x / ranks : x);
    }
    case DType::u8: {
      auto x = static_cast<uint8_t>(acc);
      return bits_of(avg ? static_cast<uint8_t>(x / ranks) : x);
    }
  }
  return {};
}

Bits input_bits(size_t i, DType dtype, ReduceOp op, int rank) {
  const int64_t v = input_value(i, rank, op);
  switch (dtype) {
    case DType::f32: return bits_of(static_cast<float>(v));
    case DType::f64: return bits_of(static_cast<double>(v));
    case DType::f16: return bits_of(float_to_half(static_cast<float>(v)));
    case DType::bf16: return bits_of(float_to_bf16(static_cast<float>(v)));
    case DType::i32: return bits_of(static_cast<int32_t>(v));
    case DType::i64: return bits_of(v);
    case DType::u8: return bits_of(static_cast<uint8_t>(v));
  }
  return {};
}

template <typename Expected>
int64_t count_wrong(const void* got, size_t count, size_t first, DType dtype, Expected expected) {
  const size_t es = dtype_size(dtype);
  std::array<Bits, kPeriod> table;
  for (size_t k = 0; k < kPeriod; ++k) table[(first + k) % kPeriod] = expected(first + k);
  const auto* p = static_cast<const unsigned char*>(got);
  int64_t wrong = 0;
  for (size_t i = 0; i < count; ++i)
    if (std::memcmp(p + i * es, table[(first + i) % kPeriod].b.data(), es) != 0) ++wrong;
  return wrong;
}

}  // namespace

void fill_input(void* dst, size_t count, size_t first, DType dtype, ReduceOp op, int rank) {
  const size_t es = dtype_size(dtype);
  std::array<Bits, kPeriod> table;
  for (size_t k = 0; k < kPeriod; ++k) table[(first + k) % kPeriod] = input_bits(first + k, dtype, op, rank);
  auto* p = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < count; ++i) std::memcpy(p + i * es, table[(first + i) % kPeriod].b.data(), es);
}

int64_t count_wrong_reduced(const void* got, size_t count, size_t first, DType dtype, ReduceOp op, int ranks) {
  return count_wrong(got, count, first, dtype, [&](size_t i) { return expected_reduced(i, dtype, op, ranks); });
}

int64_t count_wrong_input(const void* got, size_t count, size_t first, DType dtype, ReduceOp op, int rank) {
  return count_wrong(got, count, first, dtype, [&](size_t i) { return input_bits(i, dtype, op, rank); });
}

}  // namespace dpx::parallel
