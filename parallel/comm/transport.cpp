// Transport's shared part: the element-wise reductions of a reducing exchange (plain loops the
// compiler vectorises for f32/f64/integers; f16/bf16 through f32 one element at a time), byte
// counting, the default (dissemination) barrier, the node layout.
#include "parallel/comm/transport.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>

#include "core/error.hpp"

namespace dpx::parallel {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::prod: return "prod";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::avg: return "avg";
  }
  return "?";
}

namespace {

// Wrapping integer arithmetic: signed overflow is undefined in C++, unsigned wraps.
template <typename T>
T wrap_add(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T>
T wrap_mul(T a, T b) {
  // uint8_t and friends promote to int, whose product can overflow: multiply as uint64_t.
  return static_cast<T>(static_cast<uint64_t>(static_cast<std::make_unsigned_t<T>>(a)) *
                        static_cast<uint64_t>(static_cast<std::make_unsigned_t<T>>(b)));
}

template <typename T>
void reduce_typed(T* out, const T* a, const T* b, size_t n, ReduceOp op) {
  constexpr bool is_int = std::is_integral_v<T>;
  switch (op) {
    case ReduceOp::sum:
      if constexpr (is_int) for (size_t i = 0; i < n; ++i) out[i] = wrap_add(a[i], b[i]);
      else for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      return;
    case ReduceOp::prod:
      if constexpr (is_int) for (size_t i = 0; i < n; ++i) out[i] = wrap_mul(a[i], b[i]);
      else for (size_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
      return;
    case ReduceOp::max:
      for (size_t i = 0; i < n; ++i) out[i] = b[i] > a[i] ? b[i] : a[i];
      return;
    case ReduceOp::min:
      for (size_t i = 0; i < n; ++i) out[i] = b[i] < a[i] ? b[i] : a[i];
      return;
    case ReduceOp::avg:
      break;
  }
  fail("reduce_into: avg is reduced as sum and finished with finish_average");
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void reduce_16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n, ReduceOp op) {
  for (size_t i = 0; i < n; ++i) {
    float x = ToF(a[i]), y = ToF(b[i]), r;
    switch (op) {
      case ReduceOp::sum: r = x + y; break;
      case ReduceOp::prod: r = x * y; break;
      case ReduceOp::max: r = y > x ? y : x; break;
      case ReduceOp::min: r = y < x ? y : x; break;
      default: fail("reduce_into: avg is reduced as sum and finished with finish_average");
    }
    out[i] = FromF(r);
  }
}

template <typename T>
void divide_typed(T* data, size_t n, int ranks) {
  // Integers divide as int64_t: a uint8_t divisor would wrap for 256 ranks or more.
  using D = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
  const D d = static_cast<D>(ranks);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<T>(static_cast<D>(data[i]) / d);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void divide_16(uint16_t* data, size_t n, int ranks) {
  const float d = static_cast<float>(ranks);
  for (size_t i = 0; i < n; ++i) data[i] = FromF(ToF(data[i]) / d);
}

}  // namespace

void reduce_into(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op) {
  if (count == 0) return;
  switch (dtype) {
    case DType::f32:
      return reduce_typed(static_cast<float*>(out), static_cast<const float*>(a), static_cast<const float*>(b), count, op);
    case DType::f64:
      return reduce_typed(static_cast<double*>(out), static_cast<const double*>(a), static_cast<const double*>(b), count, op);
    case DType::i32:
      return reduce_typed(static_cast<int32_t*>(out), static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), count, op);
    case DType::i64:
      return reduce_typed(static_cast<int64_t*>(out), static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), count, op);
    case DType::u8:
      return reduce_typed(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), count, op);
    case DType::f16:
      return reduce_16<half_to_float, float_to_half>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                                                     static_cast<const uint16_t*>(b), count, op);
    case DType::bf16:
      return reduce_16<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(a),
                                                     static_cast<const uint16_t*>(b), count, op);
  }
}

void finish_average(void* data, size_t count, DType dtype, int ranks) {
  if (count == 0 || ranks == 1) return;
  switch (dtype) {
    case DType::f32: return divide_typed(static_cast<float*>(data), count, ranks);
    case DType::f64: return divide_typed(static_cast<double*>(data), count, ranks);
    case DType::i32: return divide_typed(static_cast<int32_t*>(data), count, ranks);
    case DType::i64: return divide_typed(static_cast<int64_t*>(data), count, ranks);
    case DType::u8: return divide_typed(static_cast<uint8_t*>(data), count, ranks);
    case DType::f16: return divide_16<half_to_float, float_to_half>(static_cast<uint16_t*>(data), count, ranks);
    case DType::bf16: return divide_16<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(data), count, ranks);
  }
}

void Transport::exchange(const Exchange& x) {
  do_exchange(x);
  // Both halves run at once (full duplex): a step costs as much as its larger half.
  const size_t bytes = std::max(x.send_peer >= 0 ? x.send_bytes : 0, x.recv_peer >= 0 ? x.recv_bytes : 0);
  if (net_sim_.enabled()) {
    // The exchange has completed, so both ranks are here (a late peer already cost its delay);
    // what the network adds is the message's own time.
    const auto wait = std::chrono::duration<double>(net_sim_.message_s(bytes));
    std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::nanoseconds>(wait));
  }
  if (x.send_peer >= 0) bytes_sent_.fetch_add(x.send_bytes, std::memory_order_relaxed);
  if (x.recv_peer >= 0) bytes_received_.fetch_add(x.recv_bytes, std::memory_order_relaxed);
  exchanges_.fetch_add(1, std::memory_order_relaxed);
  step_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if (x.recv_peer >= 0 && x.reduce_with) reduced_bytes_.fetch_add(x.recv_bytes, std::memory_order_relaxed);
}

void Transport::copy_local(void* dst, const void* src, size_t bytes) {
  if (dst != src && bytes > 0) std::memcpy(dst, src, bytes);
}

void Transport::average_local(void* data, size_t count, DType dtype, int ranks) {
  finish_average(data, count, dtype, ranks);
}

void Transport::barrier() {
  // Round d: tell rank + d, hear from rank - d. After ceil(log2 n) rounds every rank has
  // (transitively) heard from every other, so none can leave before all have arrived.
  const int n = size(), r = rank();
  for (int d = 1; d < n; d *= 2) {
    Exchange x;
    x.send_peer = (r + d) % n;
    x.recv_peer = (r - d + n) % n;
    do_exchange(x);
  }
}

int Transport::node_of(int rank) const {
  return node_of_rank_.empty() ? 0 : node_of_rank_[static_cast<size_t>(rank)];
}

void Transport::set_node_layout(std::vector<int> node_of_rank) {
  if (!node_of_rank.empty() && node_of_rank.size() != static_cast<size_t>(size()))
    fail("a node layout of ", node_of_rank.size(), " entries for a group of ", size(), " ranks");
  node_of_rank_ = std::move(node_of_rank);
}

}  // namespace dpx::parallel
