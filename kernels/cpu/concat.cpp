// CPU concatenation along dimension 1 (torch.cat(inputs, 1): DenseNet's growing feature maps)
// and its backward, which hands each input its own channels of the gradient. Every (n, input)
// block is one contiguous run, copied by one thread.
#include <algorithm>

#include "kernels/cpu/cpu_common.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

using namespace detail;

namespace {

// Checks that each part is (N, Ci, rest...) with whole's N and rest, and that the Ci add up to
// whole's dimension 1; returns the elements per channel (the product of the rest).
int64_t check_parts(const char* op, const char* whole_name, const Tensor& whole, const char* part_name,
                    const std::vector<const Tensor*>& parts) {
  require_f32(op, whole_name, whole);
  if (whole.dim() < 2) fail(op, ": ", whole_name, " ", shape_str(whole.shape()), " must be (N, C, ...)");
  if (parts.empty()) fail(op, ": there must be at least one ", part_name);
  int64_t channels = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Tensor& t = *parts[i];
    require_f32(op, part_name, t);
    bool ok = t.dim() == whole.dim() && t.size(0) == whole.size(0);
    for (int d = 2; ok && d < t.dim(); ++d) ok = t.size(d) == whole.size(d);
    if (!ok)
      fail(op, ": ", part_name, " ", i, " has shape ", shape_str(t.shape()), ", which does not fit ",
           whole_name, " ", shape_str(whole.shape()), ": all but dimension 1 must agree");
    channels += t.size(1);
  }
  if (channels != whole.size(1))
    fail(op, ": the ", part_name, "s have ", channels, " channels in all, ", whole_name, " ",
         shape_str(whole.shape()), " has ", whole.size(1));
  return whole.size(1) > 0 ? whole.numel() / (whole.size(0) * whole.size(1)) : 0;
}

}  // namespace

void concat_channels(Context& ctx, Tensor& out, const std::vector<Tensor>& inputs) {
  const char* op = "concat_channels";
  std::vector<const Tensor*> parts;
  for (const Tensor& t : inputs) parts.push_back(&t);
  const int64_t S = check_parts(op, "out", out, "input", parts);
  const int64_t N = out.size(0), C = out.size(1), P = static_cast<int64_t>(parts.size());
  std::vector<int64_t> first(parts.size());  // first channel of each input in out
  for (int64_t i = 0, c = 0; i < P; c += parts[i]->size(1), ++i) first[i] = c;
  float* o = out.data<float>();
  int nt = threads_for(ctx, out.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1) collapse(2)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < P; ++i) {
      const int64_t run = parts[i]->size(1) * S;
      const float* src = parts[i]->data<float>() + n * run;
      std::copy(src, src + run, o + (n * C + first[i]) * S);
    }
}

void split_channels_backward(Context& ctx, const std::vector<Tensor*>& dinputs, const Tensor& dout) {
  const char* op = "split_channels_backward";
  std::vector<const Tensor*> parts;
  for (const Tensor* t : dinputs) {
    // Each gradient's shape says which channels are its, so none may be missing.
    if (!t) fail(op, ": dinput ", parts.size(), " is null; pass every input's gradient");
    parts.push_back(t);
  }
  const int64_t S = check_parts(op, "dout", dout, "dinput", parts);
  const int64_t N = dout.size(0), C = dout.size(1), P = static_cast<int64_t>(parts.size());
  std::vector<int64_t> first(parts.size());
  for (int64_t i = 0, c = 0; i < P; c += parts[i]->size(1), ++i) first[i] = c;
  const float* d = dout.data<float>();
  int nt = threads_for(ctx, dout.numel());
#pragma omp parallel for num_threads(nt) if (nt > 1) collapse(2)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < P; ++i) {
      const int64_t run = parts[i]->size(1) * S;
      const float* src = d + (n * C + first[i]) * S;
      float* dst = dinputs[i]->data<float>() + n * run;
      for (int64_t k = 0; k < run; ++k) dst[k] += src[k];
    }
}

}  // namespace dpx::cpu
