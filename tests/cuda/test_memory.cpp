// GPU tests of core/cuda: the caching allocator (rounding, reuse, stats, stream pools,
// record_stream, out of memory), pinned memory with asynchronous copies, events, CudaState and
// Tensor round trips between host and device.
#include <doctest/doctest.h>

#include <atomic>
#include <thread>

#include "core/cuda/event.hpp"
#include "core/cuda/memory.hpp"
#include "tests/cuda/gpu_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

TEST_CASE("cuda allocator: sizes round up, freed blocks are cached and reused, stats add up") {
  const int d = 0;
  cuda::empty_cache(d);  // a known start: nothing cached, so every expectation below is exact
  REQUIRE(cuda::bytes_cached(d) == 0);
  const size_t used0 = cuda::bytes_in_use(d);
  CHECK(cuda::allocate(0, d) == nullptr);

  void* p = cuda::allocate(1000, d);  // small: rounds to 512-byte multiples
  REQUIRE(p != nullptr);
  CHECK(cuda::bytes_in_use(d) == used0 + 1024);
  cuda::release(p, 1000, d);
  CHECK(cuda::bytes_in_use(d) == used0);
  CHECK(cuda::bytes_cached(d) == 1024);
  void* q = cuda::allocate(600, d);  // the same 1024-byte bin: the cached block comes back
  CHECK(q == p);
  CHECK(cuda::bytes_cached(d) == 0);
  cuda::release(q, 600, d);

  void* big = cuda::allocate((3 << 20) + 1, d);  // large: rounds to 2 MiB multiples (4 MiB)
  CHECK(cuda::bytes_in_use(d) == used0 + (4 << 20));
  cuda::release(big, (3 << 20) + 1, d);
  void* big2 = cuda::allocate(4 << 20, d);
  CHECK(big2 == big);
  cuda::reset_peak_bytes_in_use(d);
  void* extra = cuda::allocate(2 << 20, d);  // nothing cached fits: a new block
  CHECK(extra != big2);
  CHECK(cuda::peak_bytes_in_use(d) == used0 + (6 << 20));
  cuda::release(extra, 2 << 20, d);
  cuda::release(big2, 4 << 20, d);
  CHECK(cuda::bytes_in_use(d) == used0);
  CHECK(cuda::bytes_cached(d) == 1024 + (6 << 20));
  CHECK(cuda::peak_bytes_in_use(d) == used0 + (6 << 20));

  cuda::empty_cache(d);
  CHECK(cuda::bytes_cached(d) == 0);
  CHECK(cuda::bytes_in_use(d) == used0);
}

TEST_CASE("cuda allocator: blocks return to their stream's pool, record_stream delays reuse") {
  const int d = 0;
  cudaStream_t a = nullptr, b = nullptr;
  REQUIRE(cudaStreamCreate(&a) == cudaSuccess);
  REQUIRE(cudaStreamCreate(&b) == cudaSuccess);
  void* p = cuda::allocate(4096, d, a);
  cuda::release(p, 4096, d);
  void* on_b = cuda::allocate(4096, d, b);
  CHECK(on_b != p);  // a block freed by stream a's user is not handed to stream b
  void* r = cuda::allocate(4096, d, a);
  CHECK(r == p);

  // Stream b is held busy by a host function until `go`; r is declared in use on b.
  std::atomic<bool> go{false};
  REQUIRE(cudaLaunchHostFunc(
              b, [](void* flag) {
                while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::yield();
              },
              &go) == cudaSuccess);
  cuda::record_stream(r, d, b);
  cuda::release(r, 4096, d);
  void* while_busy = cuda::allocate(4096, d, a);
  CHECK(while_busy != r);  // stream b may still read r
  go = true;
  CHECK(cudaStreamSynchronize(b) == cudaSuccess);
  void* after = cuda::allocate(4096, d, a);
  CHECK(after == r);

  for (void* x : {on_b, while_busy, after}) cuda::release(x, 4096, d);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

TEST_CASE("cuda allocator: out of memory is a clear error and the allocator stays usable") {
  const size_t huge = size_t(1) << 50;  // 1 PiB
  CHECK_THROWS_WITH_AS(cuda::allocate(huge, 0), doctest::Contains("out of GPU memory on cuda:0"), Error);
  void* p = cuda::allocate(1024, 0);
  CHECK(p != nullptr);
  cuda::release(p, 1024, 0);
  CHECK_THROWS_WITH_AS(cuda::allocate(16, cuda::device_count()), doctest::Contains("does not exist"), Error);
}

TEST_CASE("cuda pinned memory and asynchronous copies round-trip on a stream") {
  const int64_t n = (1 << 20) + 3;
  const size_t bytes = n * sizeof(float);
  auto* src = static_cast<float*>(cuda::allocate_pinned(bytes, 0));
  auto* back = static_cast<float*>(cuda::allocate_pinned(bytes, 0));
  REQUIRE(src != nullptr);
  for (int64_t i = 0; i < n; ++i) src[i] = static_cast<float>(i % 1000) * 0.5f;
  Tensor d = Tensor::empty({n}, DType::f32, dev());
  cudaStream_t s = state().stream;
  cuda::copy_async(d.raw(), dev(), src, Device::cpu(), bytes, s);
  cuda::copy_async(back, Device::cpu(), d.raw(), dev(), bytes, s);
  cuda::synchronize(s, 0);
  bool same = true;
  for (int64_t i = 0; i < n; ++i) same = same && back[i] == src[i];
  CHECK(same);
  cuda::release_pinned(src, bytes, s, 0);
  cuda::release_pinned(back, bytes);
  cuda::synchronize(s, 0);
  CHECK(cuda::pinned_bytes_cached() >= 2 * bytes);
  void* again = cuda::allocate_pinned(bytes, 0);
  CHECK((again == src || again == back));
  cuda::release_pinned(again, bytes);
}

TEST_CASE("cuda events time work on a stream") {
  Context ctx = gpu();
  Tensor big = Tensor::empty({1 << 24}, DType::f32, dev());
  cuda::StreamTimer timer(0);
  timer.start(state().stream);
  for (int i = 0; i < 4; ++i) ops::fill(ctx, big, static_cast<float>(i));
  timer.stop(state().stream);
  float ms = timer.elapsed_ms();
  CHECK(ms > 0.f);
  CHECK(ms < 10000.f);
  cuda::Event e(0, false);
  e.record(state().stream);
  e.synchronize();
  CHECK(e.done());
}

TEST_CASE("cuda state and contexts: clear errors for missing state and devices") {
  CHECK_THROWS_WITH_AS(cuda::make_cuda_state(cuda::device_count()), doctest::Contains("does not exist"), Error);
  Context bare;
  bare.device = dev();  // a CUDA device but no CudaState
  Tensor t = Tensor::empty({4}, DType::f32, dev());
  CHECK_THROWS_WITH_AS(ops::fill(bare, t, 1.f), doctest::Contains("without CUDA state"), Error);
  Context ctx = gpu(true);
  CHECK(ctx.allow_tf32);
  CHECK(ctx.cuda == &state());
  CHECK(ctx.device == dev());
}

TEST_CASE("Tensor on cuda: zeros, host round trip, device-to-device copy") {
  Tensor z = Tensor::zeros({3, 5, 7}, DType::f32, dev());
  for (float v : z.to_vector()) CHECK(v == 0.f);
  Tensor h = uniform({3, 5, 7}, 11);
  Tensor g = h.to(dev());
  Tensor g2 = Tensor::empty(g.shape(), DType::f32, dev());
  g2.copy_from(g);
  CHECK(bitwise_equal(g2, h));
  Tensor rows = g.slice(1, 3);  // a view at an offset into the device storage
  CHECK(bitwise_equal(rows, h.slice(1, 3)));
}
