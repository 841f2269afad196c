// Concatenation along dimension 1 on CUDA (torch.cat(inputs, 1): a Fire module's two branches)
// and its backward, each as one launch for up to kMaxParts inputs, as PyTorch's batched cat copy:
// a block row per input (blockIdx.y), a block layer per image (blockIdx.z), its blocks striding
// over that image's run of the input (C_i x rest elements), so that no element's place needs a
// division; four floats at a time where every run, offset and pointer of the launch allows
// 16-byte accesses (PyTorch's aligned16 path). copy_channels moves one run per image the same
// way (DenseNet's layers write into and read out of their block's buffer: no concatenation).
// Runs shorter than a block (channels-last maps, whose "images" are pixels) are strided over
// flat instead (for_each_in_runs).
// History (H100): one strided copy per input cost DenseNet-121 6.2 ms a forward step and the
// backward's add per input 6.0 ms against PyTorch's 2.5 ms (2026-11-26); one launch per 64 inputs
// with a 64-bit division and remainder per element still took 7.2 and 7.7 ms (2026-11-27).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.hpp"

namespace dpx::cuda {

namespace {

using detail::f32;

constexpr int kMaxParts = 64;

// The inputs of one launch, in elements of the launch's access type V (float or float4): each
// one's data, its run per image (C_i x rest) and its first element in an image of the whole (its
// first channel x rest).
template <typename Ptr>
struct Parts {
  Ptr data[kMaxParts];
  int64_t run[kMaxParts];
  int64_t offset[kMaxParts];
};

// Elements per channel of whole (N, C, ...) (the op layer checked that the parts fit it).
int64_t per_channel(const Tensor& whole) {
  int64_t S = 1;
  for (int d = 2; d < whole.dim(); ++d) S *= whole.size(d);
  return S;
}

__device__ inline void add_into(float& a, float b) { a += b; }
__device__ inline void add_into(float4& a, float4 b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}

// Calls body(n, j, step, left) for every element of every image n < images, each once: body
// moves elements j + u * step of image n's run for u < kUnroll<V> while u * step < left, all its
// loads before its stores, so that a thread has kUnroll<V> accesses in flight: 4 floats (one at a
// time, squeezenet1_1's copies of maps with odd planes, which cannot take float4s, ran at about
// 2 TB/s of the H200's 4.8, PyTorch's cat at 3.9: 2026-11-28), or one float4 (at 40 registers
// rather than 72-92 for four, the occupancy that let DenseNet's float4 copies beat PyTorch's cat).
// A run at least a block long: a block layer per image (blockIdx.z, striding by gridDim.z), a
// block's kUnroll<V> x blockDim.x elements of the run a step, no division. A shorter one (a
// channels-last map's rows: a pixel per "image", a few dozen channels each) would leave most of a
// block idle that way: every thread of the grid then strides over the images x run elements one
// at a time, each element's image by one division. Either works with any grid.
template <typename V>
constexpr int kUnroll = sizeof(V) == sizeof(float) ? 4 : 1;

template <typename V, typename Body>
__device__ void for_each_in_runs(int64_t images, int64_t run, Body body) {
  if (run >= blockDim.x) {
    const int64_t step = blockDim.x, stride = int64_t(gridDim.x) * blockDim.x * kUnroll<V>;
    for (int64_t n = blockIdx.z; n < images; n += gridDim.z)
      for (int64_t j = blockIdx.x * step * kUnroll<V> + threadIdx.x; j < run; j += stride) body(n, j, step, run - j);
    return;
  }
  const int64_t threads = int64_t(gridDim.x) * gridDim.z * blockDim.x;
  for (int64_t i = (int64_t(blockIdx.z) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x; i < images * run;
       i += threads) {
    const int64_t n = i / run;
    body(n, i - n * run, int64_t(1), int64_t(1));  // the one element
  }
}

// dst[u * step] = src[u * step] (or += with accumulate) for u < kUnroll<V> while u * step < left:
// the loads first.
template <typename V>
__device__ inline void move_run(V* dst, const V* src, int64_t step, int64_t left, bool accumulate) {
  V v[kUnroll<V>], old[kUnroll<V>];
#pragma unroll
  for (int u = 0; u < kUnroll<V>; ++u)
    if (u * step < left) {
      v[u] = src[u * step];
      if (accumulate) old[u] = dst[u * step];
    }
#pragma unroll
  for (int u = 0; u < kUnroll<V>; ++u)
    if (u * step < left) {
      if (accumulate) add_into(v[u], old[u]);
      dst[u * step] = v[u];
    }
}

// Every element j of part p = blockIdx.y's run in image n:
// out[n * image + offset_p + j] = part_p[n * run_p + j].
template <typename V>
__global__ void concat_kernel(V* out, Parts<const V*> parts, int64_t images, int64_t image) {
  const int p = static_cast<int>(blockIdx.y);
  const int64_t run = parts.run[p];
  const V* src = parts.data[p];
  V* dst = out + parts.offset[p];
  for_each_in_runs<V>(images, run, [&](int64_t n, int64_t j, int64_t step, int64_t left) {
    move_run(dst + n * image + j, src + n * run + j, step, left, false);
  });
}

// dpart_p[n * run_p + j] += dout[n * image + offset_p + j].
template <typename V>
__global__ void split_add_kernel(Parts<V*> parts, const V* dout, int64_t images, int64_t image) {
  const int p = static_cast<int>(blockIdx.y);
  const int64_t run = parts.run[p];
  V* dst = parts.data[p];
  const V* src = dout + parts.offset[p];
  for_each_in_runs<V>(images, run, [&](int64_t n, int64_t j, int64_t step, int64_t left) {
    move_run(dst + n * run + j, src + n * image + j, step, left, true);
  });
}

// dst[n * dst_image + j] (+)= src[n * src_image + j] for j < run (copy_channels, the runs at
// their channel offsets).
template <typename V>
__global__ void copy_channels_kernel(V* dst, const V* src, int64_t images, int64_t run, int64_t dst_image,
                                     int64_t src_image, bool overwrite) {
  for_each_in_runs<V>(images, run, [&](int64_t n, int64_t j, int64_t step, int64_t left) {
    move_run(dst + n * dst_image + j, src + n * src_image + j, step, left, !overwrite);
  });
}

// Calls launch(parts, count, longest) for the inputs in groups of at most kMaxParts, skipping
// empty ones; longest is the group's longest run. `data(i)` is input i's pointer, `channels(i)`
// its channel count; runs and offsets are counted in elements of V, so the caller has checked
// that they divide (aligned16).
template <typename V, typename Ptr, typename Data, typename Channels, typename Launch>
void in_groups(size_t n, int64_t S, int64_t images, Data data, Channels channels, Launch launch) {
  constexpr int64_t w = sizeof(V) / sizeof(float);
  Parts<Ptr> parts{};
  int count = 0;
  int64_t first = 0, longest = 0;
  for (size_t i = 0; i < n; ++i) {
    const int64_t run = channels(i) * S / w;
    if (run > 0 && images > 0) {
      parts.data[count] = reinterpret_cast<Ptr>(data(i));
      parts.run[count] = run;
      parts.offset[count] = first * S / w;
      longest = std::max(longest, run);
      if (++count == kMaxParts) {
        launch(parts, count, longest);
        count = 0;
        longest = 0;
      }
    }
    first += channels(i);
  }
  if (count > 0) launch(parts, count, longest);
}

// Whether every run, offset and pointer allows float4 accesses: runs of C_i x S elements start at
// offsets of (first channel) x S in images of C x S, so S % 4 == 0 makes them all multiples of 4.
// `data(i)` is null for an empty input (it is skipped).
template <typename Data>
bool aligned16(size_t n, int64_t S, const void* whole, Data data) {
  if (S % 4 != 0 || !detail::aligned16(whole)) return false;
  for (size_t i = 0; i < n; ++i)
    if (!detail::aligned16(data(i))) return false;
  return true;
}

// Blocks per (part, image): each thread moves at least 4 accesses of the longest run; images
// on blockIdx.z (at most 65,535 layers, the loop covers the rest). Where even the longest run is
// shorter than a block (for_each_in_runs strides over images x run), one layer of blocks enough
// for 4 accesses a thread of the images x longest elements.
dim3 grid_of(int64_t longest, int count, int64_t images) {
  if (longest < detail::kThreads)
    return dim3(detail::grid_for((images * longest + 3) / 4), static_cast<unsigned>(count), 1);
  return dim3(detail::grid_for((longest + 3) / 4), static_cast<unsigned>(count),
              static_cast<unsigned>(std::min<int64_t>(images, 65535)));
}

template <typename V>
void concat_as(cudaStream_t stream, Tensor& out, const std::vector<Tensor>& inputs, int64_t S) {
  const int64_t N = out.size(0), image = out.size(1) * S / (sizeof(V) / sizeof(float));
  V* o = reinterpret_cast<V*>(f32(out, "concat_channels", "out"));
  in_groups<V, const V*>(
      inputs.size(), S, N, [&](size_t i) { return f32(inputs[i], "concat_channels", "an input"); },
      [&](size_t i) { return inputs[i].size(1); },
      [&](const Parts<const V*>& parts, int count, int64_t longest) {
        concat_kernel<V><<<grid_of(longest, count, N), detail::kThreads, 0, stream>>>(o, parts, N, image);
        check_launch();
      });
}

template <typename V>
void split_as(cudaStream_t stream, const std::vector<Tensor*>& dinputs, const Tensor& dout, int64_t S) {
  const int64_t N = dout.size(0), image = dout.size(1) * S / (sizeof(V) / sizeof(float));
  const V* d = reinterpret_cast<const V*>(f32(dout, "split_channels_backward", "dout"));
  in_groups<V, V*>(
      dinputs.size(), S, N, [&](size_t i) { return f32(*dinputs[i], "split_channels_backward", "a dinput"); },
      [&](size_t i) { return dinputs[i]->size(1); },
      [&](const Parts<V*>& parts, int count, int64_t longest) {
        split_add_kernel<V><<<grid_of(longest, count, N), detail::kThreads, 0, stream>>>(parts, d, N, image);
        check_launch();
      });
}

}  // namespace

void concat_channels(Context& ctx, Tensor& out, const std::vector<Tensor>& inputs) {
  CudaState& st = state_of(ctx);
  const int64_t S = per_channel(out);
  if (out.numel() == 0) return;
  if (aligned16(inputs.size(), S, out.raw(), [&](size_t i) { return inputs[i].numel() ? inputs[i].raw() : nullptr; }))
    concat_as<float4>(st.stream, out, inputs, S);
  else
    concat_as<float>(st.stream, out, inputs, S);
}

void split_channels_backward(Context& ctx, const std::vector<Tensor*>& dinputs, const Tensor& dout) {
  CudaState& st = state_of(ctx);
  const int64_t S = per_channel(dout);
  if (dout.numel() == 0) return;
  if (aligned16(dinputs.size(), S, dout.raw(),
                [&](size_t i) { return dinputs[i]->numel() ? dinputs[i]->raw() : nullptr; }))
    split_as<float4>(st.stream, dinputs, dout, S);
  else
    split_as<float>(st.stream, dinputs, dout, S);
}

void copy_channels(Context& ctx, Tensor& dst, int64_t dst_channel, const Tensor& src, int64_t src_channel,
                   int64_t channels, DxMode mode) {
  CudaState& st = state_of(ctx);
  const int64_t N = dst.size(0), S = per_channel(dst), run = channels * S;
  if (N == 0 || run == 0) return;
  float* d = f32(dst, "copy_channels", "dst");
  const float* x = f32(src, "copy_channels", "src");
  // Runs, images and offsets are all multiples of S, as a concatenation's: the same float4 test.
  const int64_t w = aligned16(1, S, d, [&](size_t) { return x; }) ? 4 : 1;
  const dim3 grid = grid_of(run / w, 1, N);
  const bool overwrite = mode == DxMode::overwrite;
  const int64_t dst_image = dst.size(1) * S / w, src_image = src.size(1) * S / w;
  if (w == 4)
    copy_channels_kernel<float4><<<grid, detail::kThreads, 0, st.stream>>>(
        reinterpret_cast<float4*>(d + dst_channel * S), reinterpret_cast<const float4*>(x + src_channel * S), N,
        run / 4, dst_image, src_image, overwrite);
  else
    copy_channels_kernel<float><<<grid, detail::kThreads, 0, st.stream>>>(d + dst_channel * S, x + src_channel * S, N,
                                                                          run, dst_image, src_image, overwrite);
  check_launch();
}

}  // namespace dpx::cuda
