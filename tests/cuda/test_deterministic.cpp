// GPU tests of --deterministic (Context::deterministic, kernels/determinism.hpp): max-pool's and
// index_select's backward add in the reference's order (bit for bit its result, also where the
// default path's float atomics would not be), convolutions repeat bit for bit, and
// cuda::copy_peer_async orders its copy after the source stream's work.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <vector>

#include "core/cuda/memory.hpp"
#include "tests/cuda/gpu_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {
Context deterministic_gpu() {
  Context g = gpu();
  g.deterministic = true;
  return g;
}
}  // namespace

TEST_CASE("max-pool backward over overlapping windows equals the reference bit for bit, with --deterministic or not") {
  Context c = reference();
  const Shape xs{2, 3, 17, 17};
  ops::Pool2dParams p;  // 3x3 windows, stride 1: every input is in up to 9 windows
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 1;
  const Shape ys{2, 3, 15, 15};
  Tensor x = uniform(xs, 70, -1.f, 1.f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(static_cast<int>(x.data<float>()[i] * 2));
  for (Context g : {deterministic_gpu(), gpu()}) {
    CAPTURE(g.deterministic);
    Tensor y = Tensor::empty(ys), am = Tensor::empty(ys, DType::i32);
    Tensor gy = Tensor::empty(ys, DType::f32, dev()), gam = Tensor::empty(ys, DType::i32, dev());
    ops::max_pool2d_forward(c, y, am, x, p);
    ops::max_pool2d_forward(g, gy, gam, x.to(dev()), p);
    REQUIRE(bitwise_equal(gam, am));
    Tensor dy = uniform(ys, 71), dx0 = uniform(xs, 72);
    Tensor dx = dx0.clone(), gdx = dx0.to(dev());
    ops::max_pool2d_backward(c, dx, dy, am, p, ops::DxMode::add);
    ops::max_pool2d_backward(g, gdx, dy.to(dev()), gam, p, ops::DxMode::add);
    CHECK(bitwise_equal(gdx, dx));
  }
}

TEST_CASE("--deterministic: index_select backward on a table past the scan limit still scans") {
  Context c = reference(), g = deterministic_gpu();
  const int64_t R = 2048, D = 64, n = 1024;  // R * D * n = 2^27 > 2^26: atomics without the flag
  Tensor index = random_labels(n, R, 73);
  Tensor dout = uniform({n, D}, 74), dt0 = uniform({R, D}, 75);
  Tensor dt = dt0.clone(), gdt = dt0.to(dev());
  ops::index_select_backward(c, dt, dout, index);
  ops::index_select_backward(g, gdt, dout.to(dev()), index.to(dev()));
  CHECK(bitwise_equal(gdt, dt));
}

TEST_CASE("--deterministic: a convolution's forward and backward repeat bit for bit") {
  Context g = deterministic_gpu();
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 1;
  Tensor x = uniform({8, 16, 29, 29}, 76).to(dev()), w = uniform({32, 16, 3, 3}, 77).to(dev());
  Tensor dy = uniform({8, 32, 15, 15}, 78).to(dev());
  std::vector<Tensor> ys, dws, dxs;
  for (int run = 0; run < 2; ++run) {
    g.cuda->conv_algos.clear();  // choose again, as a second run would
    g.cuda->conv_plans.clear();
    Tensor y = Tensor::empty({8, 32, 15, 15}, DType::f32, dev());
    Tensor dx = Tensor::zeros({8, 16, 29, 29}, DType::f32, dev()), dw = Tensor::zeros({32, 16, 3, 3}, DType::f32, dev());
    ops::conv2d_forward(g, y, x, w, nullptr, p);
    ops::conv2d_backward(g, &dx, &dw, nullptr, dy, x, w, p, ops::DxMode::add);
    ys.push_back(y);
    dxs.push_back(dx);
    dws.push_back(dw);
  }
  CHECK(bitwise_equal(ys[0], ys[1]));
  CHECK(bitwise_equal(dxs[0], dxs[1]));
  CHECK(bitwise_equal(dws[0], dws[1]));
}

TEST_CASE("cuda::copy_peer_async copies after the work queued on the source stream") {
  const int d = 0;
  cudaStream_t a = nullptr, b = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
  const size_t bytes = size_t{64} << 20;
  void* src = cuda::allocate(bytes, d);
  void* dst = cuda::allocate(bytes, d);
  cuda::memset_zero(src, bytes, d);
  cuda::memset_zero(dst, bytes, d);
  // Stream a writes src late (after a large copy); the copy on b must see the write.
  void* big = cuda::allocate(bytes, d);
  REQUIRE(cudaMemcpyAsync(big, src, bytes, cudaMemcpyDeviceToDevice, a) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(src, 0x5A, bytes, a) == cudaSuccess);
  cuda::copy_peer_async(dst, d, b, src, d, a, bytes);
  cuda::synchronize(b, d);
  std::vector<unsigned char> host(bytes);
  cuda::copy(host.data(), Device::cpu(), dst, Device::cuda(d), bytes);
  size_t wrong = 0;
  for (unsigned char v : host) wrong += v != 0x5A;
  CHECK(wrong == 0);
  cuda::synchronize(a, d);
  cuda::release(big, bytes, d);
  cuda::release(src, bytes, d);
  cuda::release(dst, bytes, d);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}
