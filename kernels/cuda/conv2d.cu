// 2-D convolution on CUDA through cuDNN: forward, backward data, backward filter; the bias by
// dpx's kernels, and fp32 depthwise convolutions wholly by dpx's kernels
// (kernels/cuda/depthwise_conv.cu, as PyTorch's own). Each pass runs through its graph-API plan
// (conv_plan.hpp), built once per shape; where the graph API declines a shape, through the legacy
// call, whose algorithm comes from cuDNN's heuristics (as PyTorch's default, benchmark=False) or,
// with Context::conv_search (--cudnn-algo search), from timing every candidate once
// (cudnnFind*AlgorithmEx, as PyTorch's benchmark=True); plans and choices are cached in CudaState,
// their workspace comes from the caching allocator. DPX_CUDNN_LOG=1 prints each choice to stderr.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/capture.hpp"
#include "core/cuda/half.cuh"
#include "kernels/conv_paths.hpp"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv_plan.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/depthwise_conv.cuh"
#include "kernels/cuda/fast_divide.hpp"
#include "kernels/determinism.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;

// ---- descriptors (created per call: host-only and cheap next to the convolution itself) -----
// `format`: CUDNN_TENSOR_NCHW, or CUDNN_TENSOR_NHWC for channels-last maps (and a filter laid out
// (k, kh, kw, c)); the sizes are given in n, c, h, w order either way.
struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc(int64_t n, int64_t c, int64_t h, int64_t w, cudnnDataType_t type, cudnnTensorFormat_t format) {
    DPX_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
    DPX_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, format, type, int(n), int(c), int(h), int(w)));
  }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(int64_t k, int64_t c, int64_t kh, int64_t kw, cudnnDataType_t type, cudnnTensorFormat_t format) {
    DPX_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    DPX_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d, type, format, int(k), int(c), int(kh), int(kw)));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  // `compute`: fp32 for every data type (compute_type below): fp16 and bf16 data as cuDNN's
  // PSEUDO_HALF and PSEUDO_BFLOAT16 configurations, accumulated in fp32 on tensor cores.
  ConvDesc(const Conv2dParams& p, cudnnDataType_t compute) {
    DPX_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    // Cross-correlation is what deep-learning "convolution" means (PyTorch's conv2d).
    DPX_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, p.pad_h, p.pad_w, p.stride_h, p.stride_w,
                                                    p.dilation_h, p.dilation_w, CUDNN_CROSS_CORRELATION,
                                                    compute));
    DPX_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, p.groups));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// Without TF32, fp32 convolutions must use FMA math: cuDNN's default math lets Ampere and newer
// GPUs run fp32 as TF32. With TF32 allowed, default math (as PyTorch); never
// CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, which may also convert fp32 data to fp16.
// bf16/fp16 data (--precision) asks for tensor-op math: with default math, cuDNN 9.19's legacy
// heuristics and search offered bf16 convolutions no tensor-core algorithm (H100, 2026-11-27:
// resnet18's bf16 convolution backward took 186 ms a step, fp32's 13.5 ms), while fp16 in
// tensor-op math got tensor-core ones.
bool half_compute(const Context& ctx) { return ctx.compute != DType::f32; }
bool tensor_ops_allowed(const Context& ctx) { return ctx.allow_tf32 || half_compute(ctx); }
cudnnMathType_t base_math(const Context& ctx) {
  if (half_compute(ctx)) return CUDNN_TENSOR_OP_MATH;
  return ctx.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}
// fp32 for every data type: cuDNN 9.19's legacy descriptor refuses a bf16 compute type
// (CUDNN_STATUS_BAD_PARAM: float, double, half, int32 or fp8 only; seen on the H100, 2026-11-26),
// so bf16 data runs in PSEUDO_BFLOAT16 configuration, fp32 accumulation on tensor cores.
cudnnDataType_t compute_type(const Context&) { return CUDNN_DATA_FLOAT; }
// The data type of the convolution's tensors: the compute dtype (operands rounded to it).
cudnnDataType_t data_type(const Context& ctx) {
  return ctx.compute == DType::bf16 ? CUDNN_DATA_BFLOAT16 : ctx.compute == DType::f16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

bool tensor_op_math(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

struct Shapes {
  int64_t n, c, h, w, k, kh, kw, oh, ow;
  bool channels_last;  // x, y (N, H, W, C) and cuDNN's filter (k, kh, kw, c / groups)
};

AlgoKey make_key(ConvPass pass, const Shapes& s, const Conv2dParams& p, const Context& ctx) {
  AlgoKey key;
  key.v = {static_cast<int64_t>(pass), s.n, s.c, s.h, s.w, s.k, s.kh, s.kw, p.stride_h, p.stride_w,
           p.pad_h, p.pad_w, p.dilation_h, p.dilation_w, p.groups, ctx.allow_tf32 ? 1 : 0,
           ctx.deterministic ? 1 : 0, static_cast<int64_t>(ctx.compute), ctx.conv_search ? 1 : 0,
           s.channels_last ? 1 : 0, 0};
  return key;
}

// The most workspace any of cuDNN's `count` legacy algorithms of a pass needs in `math`, of those
// within search_workspace_limit() (those it cannot size, or that need more, are skipped): a
// search's workspace, as PyTorch sizes the one it gives cudnnFind. `size` leaves the convolution
// descriptor in `math`: the base math the search then runs in.
template <typename Algo, typename Size>
size_t largest_workspace(int count, cudnnMathType_t math, Size size) {
  const size_t limit = search_workspace_limit();
  size_t most = 0;
  for (int a = 0; a < count; ++a) {
    try {
      const size_t bytes = size(static_cast<Algo>(a), math);
      if (bytes <= limit) most = std::max(most, bytes);
    } catch (const Error&) {  // an algorithm this call does not support
    }
  }
  return most;
}

// The device memory a search needs beside the inputs: the pass's output (cuDNN writes it while
// timing, so the real output is left alone) and a workspace of `wanted` bytes, or of
// search_workspace_limit() where that is less, halved until it can be allocated.
class SearchScratch {
 public:
  SearchScratch(const CudaState& st, size_t output_bytes, size_t wanted) : output_(st, output_bytes) {
    for (size_t bytes = std::min(wanted, search_workspace_limit()); bytes > 0;
         bytes = bytes > (size_t(1) << 20) ? bytes / 2 : 0) {
      try {
        workspace_.emplace(st, bytes);
        workspace_bytes_ = bytes;
        break;
      } catch (const Error&) {  // not that much now: try half
      }
    }
  }
  void* output() const { return output_.as<void>(); }
  void* workspace() const { return workspace_ ? workspace_->as<void>() : nullptr; }
  size_t workspace_bytes() const { return workspace_bytes_; }

 private:
  detail::Scratch output_;
  std::optional<detail::Scratch> workspace_;
  size_t workspace_bytes_ = 0;
};

// Picks the first heuristic result that runs in the requested math and whose workspace can be
// allocated (PyTorch's rule), and caches it. `Perf` is one of cuDNN's *AlgoPerf_t structs. The
// heuristics' sizes were computed under the query's math type; `size(algo, math)` sets the math
// the convolution will run in on its descriptor and asks cuDNN again (TF32 may need more).
// With ctx.conv_search, `query` times the candidates (cudnnFind*AlgorithmEx: sorted by time,
// each with the workspace it needs) and the same rule takes the fastest usable one.
template <typename Perf, typename Query, typename Size>
AlgoChoice choose(const Context& ctx, CudaState& st, const AlgoKey& key, const char* what, Query query, Size size) {
  auto hit = st.conv_algos.find(key);
  if (hit != st.conv_algos.end()) return hit->second;
  // The search runs and times kernels and waits for them: inside a captured step it cannot.
  if (ctx.conv_search)
    capture::not_capturable("cuDNN's algorithm search (--cudnn-algo search) for a convolution first seen in the "
                            "capture (every shape should have run in an eager step before it)");
  std::vector<Perf> perf(32);
  int returned = 0;
  query(static_cast<int>(perf.size()), &returned, perf.data());
  returned = std::clamp(returned, 0, static_cast<int>(perf.size()));
  std::string tried;
  for (int i = 0; i < returned; ++i) {
    const Perf& r = perf[i];
    if (r.status != CUDNN_STATUS_SUCCESS) continue;
    if (!kernels::conv_algo_usable(ctx.deterministic, r.determinism == CUDNN_DETERMINISTIC, tensor_ops_allowed(ctx),
                                   tensor_op_math(r.mathType)))
      continue;
    const cudnnMathType_t math = tensor_ops_allowed(ctx) ? r.mathType : CUDNN_FMA_MATH;
    const size_t bytes = std::max(r.memory, size(r.algo, math));
    try {
      st.workspace(bytes);
    } catch (const Error&) {  // too large to allocate now: the next candidate may fit
      tried += " algo " + std::to_string(int(r.algo)) + " needs " + std::to_string(bytes) + " bytes;";
      continue;
    }
    AlgoChoice c;
    c.algo = static_cast<int>(r.algo);
    c.workspace_bytes = bytes;
    c.math = math;
    st.conv_algos.emplace(key, c);
    if (cudnn_log()) {  // each choice on stderr, when it is made (once per key)
      char timed[48] = "";
      if (ctx.conv_search) std::snprintf(timed, sizeof timed, ", %.3f ms", double(r.time));
      // key.v: pass, n c h w, k kh kw, stride, pad, dilation, groups, tf32, deterministic, compute, search
      const auto& v = key.v;
      std::fprintf(stderr,
                   "dpx cudnn: %s x %lldx%lldx%lldx%lld w %lldx%lldx%lldx%lld stride %lld,%lld pad %lld,%lld "
                   "dilation %lld,%lld groups %lld: algo %d, %s math, workspace %zu bytes, by %s (candidate %d of %d%s)\n",
                   what, (long long)v[1], (long long)v[2], (long long)v[3], (long long)v[4], (long long)v[5],
                   (long long)(v[2] / std::max<int64_t>(v[14], 1)), (long long)v[6], (long long)v[7], (long long)v[8],
                   (long long)v[9], (long long)v[10], (long long)v[11], (long long)v[12], (long long)v[13],
                   (long long)v[14], c.algo,
                   tensor_op_math(math) ? "tensor-op" : math == CUDNN_FMA_MATH ? "fma" : "default",
                   bytes, ctx.conv_search ? "search" : "heuristic", i + 1, returned, timed);
    }
    return c;
  }
  fail("conv2d: cuDNN offers no usable ", what, " algorithm for this shape (", returned,
       " candidates;", tried, ")");
}

// The sizes of a convolution whose arguments the op layer has checked.
Shapes shapes_of(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  const ops::ImageDims d = ops::image_dims(x.shape(), p.format);
  Shapes s{d.n, d.c, d.h, d.w, w.size(0), w.size(2), w.size(3), 0, 0, p.format == MemoryFormat::channels_last};
  s.oh = ops::conv_out_size(s.h, int(s.kh), p.stride_h, p.pad_h, p.dilation_h);
  s.ow = ops::conv_out_size(s.w, int(s.kw), p.stride_w, p.pad_w, p.dilation_w);
  return s;
}

// The convolution as the graph API takes it (conv_plan.hpp), its output written with `beta`.
ConvRequest request(const Context& ctx, ConvPass pass, const Shapes& s, const Conv2dParams& p, float beta) {
  ConvRequest r;
  r.pass = pass;
  r.n = s.n, r.c = s.c, r.h = s.h, r.w = s.w, r.k = s.k, r.kh = s.kh, r.kw = s.kw, r.oh = s.oh, r.ow = s.ow;
  r.groups = p.groups;
  r.pad[0] = p.pad_h, r.pad[1] = p.pad_w;
  r.stride[0] = p.stride_h, r.stride[1] = p.stride_w;
  r.dilation[0] = p.dilation_h, r.dilation[1] = p.dilation_w;
  r.data = data_type(ctx);
  r.allow_tensor_ops = tensor_ops_allowed(ctx);
  r.deterministic = ctx.deterministic;
  r.search = ctx.conv_search;
  r.beta = beta;
  r.channels_last = s.channels_last;
  return r;
}

// A depthwise convolution dpx computes itself (kernels/conv_paths.hpp), or nullopt for cuDNN.
// dpx's depthwise kernels read contiguous maps: channels-last ones go to cuDNN.
std::optional<detail::DepthwiseShape> depthwise(const Context& ctx, const Shapes& s, const Conv2dParams& p) {
  if (s.channels_last || !kernels::depthwise_by_dpx(s.c, s.k, p.groups, half_compute(ctx))) return std::nullopt;
  return detail::with_dividers(detail::DepthwiseShape{s.n, s.c, s.h, s.w, s.k, s.oh, s.ow, int(s.kh), int(s.kw),
                                                      p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.dilation_h,
                                                      p.dilation_w, int(s.k / s.c)});
}

// An input of a cuDNN call in the compute dtype: the fp32 tensor itself, its copy rounded to
// bf16/fp16 (--precision), or a tensor already in that dtype (ops.def's half-precision maps: the
// activated output of the batch norm before this convolution, or the gradient from the batch norm
// or the ReLU after it), itself.
class Operand {
 public:
  Operand(const Context& ctx, const CudaState& st, const Tensor& t, const char* op, const char* name) {
    if (half_compute(ctx) && t.dtype() == ctx.compute)
      p_ = t.raw();
    else if (half_compute(ctx))
      p_ = copy_.emplace(st, f32(t, op, name), t.numel(), ctx.compute).get();
    else
      p_ = f32(t, op, name);
  }
  const void* get() const { return p_; }

 private:
  std::optional<detail::HalfCopy> copy_;
  const void* p_ = nullptr;
};

// The output of a cuDNN call: in fp32, the tensor itself, cuDNN applying beta; in bf16/fp16,
// scratch of that type that cuDNN writes (beta 0) and finish() widens into the tensor with beta;
// a tensor already in that dtype (a map for the batch norm after this convolution), itself, cuDNN
// writing it (beta 0: the forward's; its bias and epilogue then follow in place, half_bias_relu).
class Result {
 public:
  Result(const Context& ctx, const CudaState& st, Tensor& t, const char* op, const char* name)
      : n_(t.numel()), dtype_(ctx.compute), stream_(st.stream) {
    if (half_compute(ctx) && t.dtype() == ctx.compute) {
      p_ = t.raw();
      return;
    }
    out_ = f32(t, op, name);
    p_ = out_;
    if (half_compute(ctx)) p_ = half_.emplace(st, static_cast<size_t>(n_) * dtype_size(dtype_)).as<void>();
  }
  void* get() const { return p_; }
  // The beta to hand cuDNN for a result that should be beta * out + the convolution.
  const float* cudnn_beta(const float* beta) const { return half_ ? &kZero : beta; }
  void finish(float beta) const {
    if (half_) detail::widen_into(out_, beta, p_, dtype_, n_, stream_);
  }
  // The bf16/fp16 result for a kernel that widens it itself (instead of finish), or null in fp32.
  const void* half_result() const { return half_ ? p_ : nullptr; }

 private:
  static constexpr float kZero = 0.f;
  float* out_ = nullptr;  // null where cuDNN writes the tensor in its own half dtype
  void* p_ = nullptr;
  int64_t n_;
  DType dtype_;
  cudaStream_t stream_;
  std::optional<detail::Scratch> half_;
};

// ---- the bias, by dpx's own kernels --------------------------------------------------------------
// y[n, k, :, :] = src[n, k, :, :] + b[k] in one pass (cudnnAddTensor did the same through the
// legacy API) by detail::per_plane, src being y itself (fp32) or cuDNN's bf16/fp16 result, which
// is widened on the way (one pass where a widening and then the bias read and wrote 14 bytes an
// element, now 6). A thread a value and a block per 256 floats took 1.2 ms for vgg16's
// 64x64x224x224 output: 1.4 TB/s of the H200's 4.8 (2026-11-28), all launch and no bandwidth.
struct AddBias {
  __device__ float operator()(float, float x, float b) const { return x + b; }
};
struct AddBiasRelu {  // Epilogue::relu folded in: max(x + b, 0), NaN passing as relu_forward
  __device__ float operator()(float, float x, float b) const { return detail::relu_of(x + b); }
};
template <typename H>
struct Halves {  // a bf16/fp16 result, widened
  const uint16_t* p;
  __device__ float operator()(int64_t i) const { return H::load(p[i]); }
};
template <typename H>
struct HalfQuads {  // the same four at a time (8 bytes)
  const uint2* p;
  __device__ float4 operator()(int64_t i) const { return load4<H>(p[i]); }
};

// Calls launch(total, plane, k) for a flat kernel whose element i has channel (i / plane) % k: with
// 32-bit indices and multiply-high dividers where the map's indices fit (detail::fits_int32), else
// 64-bit ones and the hardware's division.
template <typename Launch>
void with_channel_index(int64_t total, int64_t plane, int64_t k, Launch launch) {
  if (detail::fits_int32(total))
    launch(static_cast<uint32_t>(total), FastDivide(static_cast<uint32_t>(plane)), FastDivide(static_cast<uint32_t>(k)));
  else
    launch(static_cast<uint64_t>(total), PlainDivide(static_cast<uint64_t>(plane)),
           PlainDivide(static_cast<uint64_t>(k)));
  check_launch();
}

// The same over planes smaller than a block, a thread a value, its channel (i / plane) % k by
// multiply-highs: a block a plane left most of its threads idle there, 255 of 256 on
// squeeze-excitation's 1x1 maps, and took 0.13 ms for efficientnet_b0's 64x1152x1x1 expand
// convolution (H200, 2026-11-28), where PyTorch's convolution took 4 us and its bias add 2.
template <typename In, typename F, typename Index, typename Div>
__global__ void bias_flat_kernel(float* y, In in, const float* b, Index total, Div plane, Div k, F f) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < total; i += Index(gridDim.x) * blockDim.x)
    y[i] = f(0.f, in(i), b[k.mod(plane.div(i))]);
}

// y (N, K, OH, OW, fp32) = `half` (cuDNN's result in `dtype`, bf16 or fp16) widened, or y itself
// where `half` is null, plus b[k], then max(., 0) with `relu`: float4s where every plane is whole
// float4s and y and the result are aligned to them, bias_flat_kernel where a plane is smaller
// than a block.
void add_channel_bias(const CudaState& st, float* y, const void* half, DType dtype, const float* b, const Shapes& s,
                      bool relu) {
  const int64_t planes = s.n * s.k, plane = s.oh * s.ow, total = planes * plane;
  const bool flat = plane < detail::kThreads;
  const bool quads = !flat && plane % 4 == 0 && detail::aligned16(y) &&
                     reinterpret_cast<uintptr_t>(half) % sizeof(uint2) == 0;  // null is aligned
  auto* y4 = reinterpret_cast<float4*>(y);
  const auto floats = [&](auto in, auto f) {  // a float at a time
    if (!flat) {
      detail::per_plane<false>(st.stream, y, in, b, planes, plane, s.k, f);
      return;
    }
    with_channel_index(total, plane, s.k, [&](auto count, auto by_plane, auto by_k) {
      bias_flat_kernel<<<detail::grid_for(total), detail::kThreads, 0, st.stream>>>(y, in, b, count, by_plane, by_k, f);
    });
  };
  const auto with = [&](auto f) {
    const auto from_half = [&](auto type) {
      using H = decltype(type);
      if (quads)
        detail::per_plane<false>(st.stream, y4, HalfQuads<H>{static_cast<const uint2*>(half)}, b, planes, plane / 4,
                                 s.k, f);
      else
        floats(Halves<H>{static_cast<const uint16_t*>(half)}, f);
    };
    if (!half && quads)
      detail::per_plane<false>(st.stream, y4, detail::Floats<float4>{y4}, b, planes, plane / 4, s.k, f);
    else if (!half)
      floats(detail::Floats<float>{y}, f);
    else if (dtype == DType::f16)
      from_half(F16{});
    else
      from_half(BF16{});
  };
  if (relu)
    with(AddBiasRelu{});
  else
    with(AddBias{});
}

// A bf16/fp16 output (Y: detail::XHalf) in place, cuDNN having written it (ops.def's half-precision
// maps: the map the next convolution or a batch norm reads): y = epilogue(y + b[channel]) rounded
// once, the fp32 path's arithmetic (its widened result plus the bias, then the ReLU), rounded
// where the next convolution rounded it too, or, before a batch norm (VGG-BN), where the batch
// norm read fp32. Element i's channel is (i / plane) % k, plane 1 on channels-last maps.
template <typename Y, typename Index, typename Div>
__global__ void half_bias_relu_kernel(typename Y::T* y, const float* b, Index total, Div plane, Div k, bool relu) {
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < total; i += Index(gridDim.x) * blockDim.x) {
    float v = Y::load(y[i]);
    if (b) v = v + b[k.mod(plane.div(i))];
    if (relu) v = detail::relu_of(v);
    y[i] = Y::store(v);
  }
}

void half_bias_relu(const CudaState& st, Tensor& y, const float* b, const Shapes& s, bool relu) {
  const int64_t total = s.n * s.k * s.oh * s.ow, plane = s.channels_last ? 1 : s.oh * s.ow;
  detail::with_x_type(y.dtype(), [&](auto type) {
    using Y = decltype(type);
    typename Y::T* p = detail::x_data<Y>(y, "conv2d_forward", "y");
    with_channel_index(total, plane, s.k, [&](auto count, auto by_plane, auto by_k) {
      half_bias_relu_kernel<Y><<<detail::grid_for(total), detail::kThreads, 0, st.stream>>>(p, b, count, by_plane,
                                                                                            by_k, relu);
    });
  });
}

// db[k] += the sum of dy[n, k, :, :] over n and the plane, in a fixed order: a warp sums each
// (n, k) plane (lanes strided, then a tree), then one thread per channel adds the images' sums in
// order. cuDNN's legacy cudnnConvolutionBackwardBias was the suspect of squeezenet1_1's backward,
// 2.3x PyTorch's with 26 biased convolutions (H100, 2026-11-26); PyTorch sums grad_output itself.
// D: dy's element type (detail::XF32, or XHalf where dy is a half-precision map: its values widened).
template <typename D>
__global__ void plane_sum_kernel(float* sums, const typename D::T* dy, int64_t planes, int64_t plane) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t p = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5; p < planes; p += warps) {
    const typename D::T* d = dy + p * plane;
    float s = 0.f;
    for (int64_t j = lane; j < plane; j += 32) s += D::load(d[j]);
    for (int offset = 16; offset > 0; offset /= 2) s += __shfl_down_sync(0xffffffffu, s, offset);
    if (lane == 0) sums[p] = s;
  }
}

__global__ void add_image_sums_kernel(float* db, const float* sums, int64_t images, int64_t channels) {
  DPX_CUDA_LOOP(k, channels) {
    float s = 0.f;
    for (int64_t n = 0; n < images; ++n) s += sums[n * channels + k];
    db[k] += s;
  }
}

// On a channels-last output, rows (N*OH*OW) of K channels: the bias by detail::broadcast_rows_kernel,
// and db by the two passes below, on detail::kRowTile blocks of 32 channels by 8 rows (a warp reads
// 32 consecutive floats), no division per element.
// db's first pass on channels-last dy: sums[part, k] = dy[r, k] summed over the part's rows in
// order, kRowsPerPart rows a part (a thread a part and channel); add_image_sums_kernel then adds
// the parts in order (fixed, so every run gives the same bits).
constexpr int64_t kRowsPerPart = 256;
template <typename D>
__global__ void row_part_sum_kernel(float* sums, const typename D::T* dy, int64_t rows, int64_t channels) {
  const int64_t k = blockIdx.x * int64_t(32) + threadIdx.x;
  if (k >= channels) return;
  const int64_t parts_stride = int64_t(gridDim.y) * 8;
  for (int64_t part = blockIdx.y * int64_t(8) + threadIdx.y; part * kRowsPerPart < rows; part += parts_stride) {
    const int64_t end = min(rows, (part + 1) * kRowsPerPart);
    float s = 0.f;
    for (int64_t r = part * kRowsPerPart; r < end; ++r) s += D::load(dy[r * channels + k]);
    sums[part * channels + k] = s;
  }
}

// The filter as cuDNN takes it beside channels-last maps, (K, kH, kW, C / groups): w permuted into
// a new tensor. The weight itself stays (K, C / groups, kH, kW), PyTorch's layout.
Tensor filter_channels_last(Context& ctx, const Tensor& w) {
  Tensor out = Tensor::empty({w.size(0), w.size(2), w.size(3), w.size(1)}, DType::f32, w.device());
  cuda::permute(ctx, out, w, {0, 2, 3, 1});
  return out;
}

// ---- the legacy calls, where the graph API declined a convolution (conv_plan.hpp) -------------
// Each builds its descriptors, takes the cached algorithm choice (choose) and calls cuDNN; the
// operands and the result are the caller's (in the compute dtype).

cudnnTensorFormat_t format(const Shapes& s) { return s.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW; }

// A legacy call's descriptors: x, y (or dy), the filter, and the convolution in its base math.
struct LegacyDescs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  LegacyDescs(const Context& ctx, const Shapes& s, const Conv2dParams& p)
      : x(s.n, s.c, s.h, s.w, data_type(ctx), format(s)),
        y(s.n, s.k, s.oh, s.ow, data_type(ctx), format(s)),
        w(s.k, s.c / p.groups, s.kh, s.kw, data_type(ctx), format(s)),
        conv(p, compute_type(ctx)) {
    DPX_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.d, base_math(ctx)));
  }
};

void legacy_forward(const Context& ctx, CudaState& st, const AlgoKey& key, const Shapes& s, const Conv2dParams& p,
                    const Operand& hx, const Operand& hw, const Result& hy, int64_t y_numel) {
  const LegacyDescs d(ctx, s, p);
  const auto size = [&](cudnnConvolutionFwdAlgo_t algo, cudnnMathType_t math) {
    size_t bytes = 0;
    DPX_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.d, math));
    DPX_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(st.cudnn, d.x.d, d.w.d, d.conv.d, d.y.d, algo, &bytes));
    return bytes;
  };
  AlgoChoice c = choose<cudnnConvolutionFwdAlgoPerf_t>(
      ctx, st, key, "forward",
      [&](int n, int* got, auto* perf) {
        if (!ctx.conv_search) {
          DPX_CUDNN_CHECK(
              cudnnGetConvolutionForwardAlgorithm_v7(st.cudnn, d.x.d, d.w.d, d.conv.d, d.y.d, n, got, perf));
          return;
        }
        const SearchScratch scratch(st, static_cast<size_t>(y_numel) * dtype_size(ctx.compute),
                                    largest_workspace<cudnnConvolutionFwdAlgo_t>(
                                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, base_math(ctx), size));
        DPX_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(st.cudnn, d.x.d, hx.get(), d.w.d, hw.get(), d.conv.d,
                                                               d.y.d, scratch.output(), n, got, perf,
                                                               scratch.workspace(), scratch.workspace_bytes()));
      },
      size);
  DPX_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.d, c.math));
  const float one = 1.f, zero = 0.f;
  void* ws = st.workspace(c.workspace_bytes);
  DPX_CUDNN_CHECK(cudnnConvolutionForward(st.cudnn, &one, d.x.d, hx.get(), d.w.d, hw.get(), d.conv.d,
                                          static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), ws, c.workspace_bytes, &zero,
                                          d.y.d, hy.get()));
}

// dx = beta * dx + the gradient; `beta` as cuDNN takes it (Result::cudnn_beta).
void legacy_backward_data(const Context& ctx, CudaState& st, const AlgoKey& key, const Shapes& s, const Conv2dParams& p,
                          const Operand& hw, const Operand& hdy, const Result& hdx, const float* beta,
                          int64_t x_numel) {
  const LegacyDescs d(ctx, s, p);
  const auto size = [&](cudnnConvolutionBwdDataAlgo_t algo, cudnnMathType_t math) {
    size_t bytes = 0;
    DPX_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.d, math));
    DPX_CUDNN_CHECK(
        cudnnGetConvolutionBackwardDataWorkspaceSize(st.cudnn, d.w.d, d.y.d, d.conv.d, d.x.d, algo, &bytes));
    return bytes;
  };
  AlgoChoice c = choose<cudnnConvolutionBwdDataAlgoPerf_t>(
      ctx, st, key, "backward-data",
      [&](int n, int* got, auto* perf) {
        if (!ctx.conv_search) {
          DPX_CUDNN_CHECK(
              cudnnGetConvolutionBackwardDataAlgorithm_v7(st.cudnn, d.w.d, d.y.d, d.conv.d, d.x.d, n, got, perf));
          return;
        }
        const SearchScratch scratch(st, static_cast<size_t>(x_numel) * dtype_size(ctx.compute),
                                    largest_workspace<cudnnConvolutionBwdDataAlgo_t>(
                                        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, base_math(ctx), size));
        DPX_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(st.cudnn, d.w.d, hw.get(), d.y.d, hdy.get(),
                                                                    d.conv.d, d.x.d, scratch.output(), n, got, perf,
                                                                    scratch.workspace(), scratch.workspace_bytes()));
      },
      size);
  DPX_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.d, c.math));
  const float one = 1.f;
  void* ws = st.workspace(c.workspace_bytes);
  DPX_CUDNN_CHECK(cudnnConvolutionBackwardData(st.cudnn, &one, d.w.d, hw.get(), d.y.d, hdy.get(), d.conv.d,
                                               static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), ws,
                                               c.workspace_bytes, beta, d.x.d, hdx.get()));
}

// dw = beta * dw + the gradient; `beta` as cuDNN takes it (Result::cudnn_beta).
void legacy_backward_filter(const Context& ctx, CudaState& st, const AlgoKey& key, const Shapes& s,
                            const Conv2dParams& p, const Operand& hx, const Operand& hdy, const Result& hdw,
                            const float* beta, int64_t w_numel) {
  const LegacyDescs d(ctx, s, p);
  const auto size = [&](cudnnConvolutionBwdFilterAlgo_t algo, cudnnMathType_t math) {
    size_t bytes = 0;
    DPX_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.d, math));
    DPX_CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterWorkspaceSize(st.cudnn, d.x.d, d.y.d, d.conv.d, d.w.d, algo, &bytes));
    return bytes;
  };
  AlgoChoice c = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
      ctx, st, key, "backward-filter",
      [&](int n, int* got, auto* perf) {
        if (!ctx.conv_search) {
          DPX_CUDNN_CHECK(
              cudnnGetConvolutionBackwardFilterAlgorithm_v7(st.cudnn, d.x.d, d.y.d, d.conv.d, d.w.d, n, got, perf));
          return;
        }
        const SearchScratch scratch(st, static_cast<size_t>(w_numel) * dtype_size(ctx.compute),
                                    largest_workspace<cudnnConvolutionBwdFilterAlgo_t>(
                                        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, base_math(ctx), size));
        DPX_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(st.cudnn, d.x.d, hx.get(), d.y.d, hdy.get(),
                                                                      d.conv.d, d.w.d, scratch.output(), n, got, perf,
                                                                      scratch.workspace(), scratch.workspace_bytes()));
      },
      size);
  DPX_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.d, c.math));
  const float one = 1.f;
  void* ws = st.workspace(c.workspace_bytes);
  DPX_CUDNN_CHECK(cudnnConvolutionBackwardFilter(st.cudnn, &one, d.x.d, hx.get(), d.y.d, hdy.get(), d.conv.d,
                                                 static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), ws,
                                                 c.workspace_bytes, beta, d.w.d, hdw.get()));
}

}  // namespace

// With ctx.compute bf16 or fp16 (--precision), x, w and dy are rounded to it, cuDNN convolves
// them on tensor cores with fp32 accumulation into a bf16/fp16 result, and that result is widened
// into the fp32 output (on NCHW maps in the pass that adds the bias) or added into the fp32
// gradient; the bias stays fp32. An x, y or dy already in bf16/fp16 (ops.def, "half-precision
// maps") is cuDNN's operand or output as it is. Each convolution runs
// through its cached graph-API plan (conv_plan.hpp), or the legacy call where that declined it.
void conv2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b,
                    const Conv2dParams& p) {
  CudaState& st = state_of(ctx);
  const char* op = "conv2d_forward";
  Shapes s = shapes_of(x, w, p);
  if (y.numel() == 0) return;
  if (const auto dw = depthwise(ctx, s, p)) {
    detail::depthwise_forward(st, f32(y, op, "y"), f32(x, op, "x"), f32(w, op, "w"), b ? f32(*b, op, "b") : nullptr,
                              *dw);
    if (p.epilogue == Epilogue::relu) relu_forward(ctx, y, y);
    return;
  }
  const Tensor filter = s.channels_last ? filter_channels_last(ctx, w) : w;
  const Operand hx(ctx, st, x, op, "x"), hw(ctx, st, filter, op, "w");
  const Result hy(ctx, st, y, op, "y");
  const AlgoKey key = make_key(ConvPass::forward, s, p, ctx);
  if (!run_conv_plan(st, key, request(ctx, ConvPass::forward, s, p, 0.f), hx.get(), hw.get(), hy.get(), "forward"))
    legacy_forward(ctx, st, key, s, p, hx, hw, hy, y.numel());
  const bool relu = p.epilogue == Epilogue::relu;
  if (y.dtype() != DType::f32) {  // cuDNN wrote y itself (ops.def's half-precision maps)
    if (b || relu) half_bias_relu(st, y, b ? f32(*b, op, "b") : nullptr, s, relu);
    return;
  }
  if (b && !s.channels_last) {  // the bias pass widens a half result and applies the epilogue too
    add_channel_bias(st, f32(y, op, "y"), hy.half_result(), ctx.compute, f32(*b, op, "b"), s, relu);
    return;
  }
  hy.finish(0.f);
  if (b) {
    const int64_t rows = s.n * s.oh * s.ow;
    detail::broadcast_rows_kernel<true><<<detail::row_tile_grid(rows, s.k, 8), detail::kRowTile, 0, st.stream>>>(
        f32(y, op, "y"), f32(*b, op, "b"), rows, s.k);
    check_launch();
  }
  if (relu) relu_forward(ctx, y, y);  // in place
}

void conv2d_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Conv2dParams& p, DxMode dx_mode) {
  CudaState& st = state_of(ctx);
  const char* op = "conv2d_backward";
  Shapes s = shapes_of(x, w, p);
  if (dy.numel() == 0) return;
  const std::optional<detail::DepthwiseShape> depthwise_shape = depthwise(ctx, s, p);
  if (depthwise_shape) {
    if (dx)
      detail::depthwise_backward_data(st, f32(*dx, op, "dx"), f32(dy, op, "dy"), f32(w, op, "w"), *depthwise_shape,
                                      dx_mode == DxMode::add);
    if (dw) detail::depthwise_backward_filter(st, f32(*dw, op, "dw"), f32(dy, op, "dy"), f32(x, op, "x"), *depthwise_shape);
    dx = dw = nullptr;  // done: only the bias below
  }
  // alpha = 1 and beta = 1: every gradient accumulates (ops.def), dx unless overwritten.
  static constexpr float kZeroBeta = 0.f;
  const float one = 1.f, dx_beta = dx_mode == DxMode::overwrite ? 0.f : 1.f;
  std::optional<Operand> hdy;
  if (dx || dw) hdy.emplace(ctx, st, dy, op, "dy");
  if (dx) {
    // Added into dx (DxMode::add: a residual join, Module::backward_add): in bf16/fp16 by the pass
    // that widens cuDNN's half result (beta 0); in fp32 and TF32 cuDNN writes a new tensor with
    // beta 0 too, which is then added, as for dw below, until a GPU run has compared the engines
    // offered for beta 1 with those for beta 0 (not yet run).
    const bool fresh = dx_mode == DxMode::add && !half_compute(ctx);
    Tensor fresh_dx = fresh ? Tensor::empty(dx->shape(), DType::f32, dx->device()) : Tensor();
    const float written_beta = fresh ? 0.f : dx_beta;
    const Tensor filter = s.channels_last ? filter_channels_last(ctx, w) : w;
    const Operand hw(ctx, st, filter, op, "w");
    const Result hdx(ctx, st, fresh ? fresh_dx : *dx, op, "dx");
    const float* beta = hdx.cudnn_beta(&written_beta);
    const AlgoKey key = make_key(ConvPass::backward_data, s, p, ctx);
    if (!run_conv_plan(st, key, request(ctx, ConvPass::backward_data, s, p, *beta), hdx.get(), hw.get(), hdy->get(),
                       "backward-data"))
      legacy_backward_data(ctx, st, key, s, p, hw, *hdy, hdx, beta, x.numel());
    hdx.finish(written_beta);
    if (fresh) cuda::axpy(ctx, *dx, 1.f, fresh_dx);
  }
  if (dw) {
    // cuDNN writes the filter gradient with beta 0, as PyTorch asks for it (its grad_weight is a
    // fresh tensor), and it is then added into dw: in fp32 and TF32 into a new tensor (the add is
    // a pass of 12 bytes a weight), so that the search and the heuristics choose among the engines
    // PyTorch's call gets. On the H200 (2026-11-28) the backward of efficientnet_b0's 1x1
    // convolutions, small filters summed over 200,704 positions, took 8-16x PyTorch's time at
    // TF32, where cuDNN accumulated into dw with beta 1, and not at bf16, where it wrote half
    // scratch with beta 0; beta is the likely difference (not yet run). In bf16/fp16 Result's half
    // scratch is that fresh output, widened into dw with beta 1.
    // Channels-last: cuDNN writes the (K, kH, kW, C / groups) gradient into a new tensor, which is
    // then added into dw permuted back.
    const bool fresh = s.channels_last || !half_compute(ctx);
    Tensor filter_grad =
        fresh ? Tensor::empty(s.channels_last ? Shape{s.k, s.kh, s.kw, w.size(1)} : w.shape(), DType::f32, w.device())
              : *dw;
    const float* accumulate = fresh ? &kZeroBeta : &one;
    const Operand hx(ctx, st, x, op, "x");
    const Result hdw(ctx, st, filter_grad, op, "dw");
    const float* beta = hdw.cudnn_beta(accumulate);
    const AlgoKey key = make_key(ConvPass::backward_filter, s, p, ctx);
    if (!run_conv_plan(st, key, request(ctx, ConvPass::backward_filter, s, p, *beta), hx.get(), hdw.get(), hdy->get(),
                       "backward-filter"))
      legacy_backward_filter(ctx, st, key, s, p, hx, *hdy, hdw, beta, w.numel());
    hdw.finish(*accumulate);
    if (s.channels_last)
      cuda::permute_backward(ctx, *dw, filter_grad, {0, 2, 3, 1}, DxMode::add);
    else if (fresh)
      cuda::axpy(ctx, *dw, 1.f, filter_grad);
  }
  // db sums dy's values, widened where dy is a half-precision map (the gradient from the ReLU or
  // the batch norm after the convolution, ops.def), in a fixed order.
  if (db) {
    detail::with_x_type(dy.dtype(), [&](auto dy_type) {
      using D = decltype(dy_type);
      const auto* pdy = detail::x_data<D>(dy, op, "dy");
      // 1x1 maps (squeeze-excitation's) are rows of K channels in either layout: a warp a plane
      // would sum one value with 31 lanes idle.
      if (s.channels_last || s.oh * s.ow == 1) {
        const int64_t rows = s.n * s.oh * s.ow, parts = (rows + kRowsPerPart - 1) / kRowsPerPart;
        const detail::Scratch sums(st, static_cast<size_t>(parts * s.k) * sizeof(float));
        row_part_sum_kernel<D><<<detail::row_tile_grid(parts, s.k, 1), detail::kRowTile, 0, st.stream>>>(
            sums.as<float>(), pdy, rows, s.k);
        check_launch();
        add_image_sums_kernel<<<detail::grid_for(s.k), detail::kThreads, 0, st.stream>>>(f32(*db, op, "db"),
                                                                                       sums.as<float>(), parts, s.k);
      } else {
        const int64_t planes = s.n * s.k;
        const detail::Scratch sums(st, static_cast<size_t>(planes) * sizeof(float));
        plane_sum_kernel<D><<<detail::grid_for(planes * 32), detail::kThreads, 0, st.stream>>>(
            sums.as<float>(), pdy, planes, s.oh * s.ow);
        check_launch();
        add_image_sums_kernel<<<detail::grid_for(s.k), detail::kThreads, 0, st.stream>>>(f32(*db, op, "db"),
                                                                                       sums.as<float>(), s.n, s.k);
      }
      check_launch();
    });
  }
}

}  // namespace dpx::cuda
