// Transforms and TransformedDataset. The resize follows PyTorch's CPU upsample_bilinear2d
// (aten/src/ATen/native/UpSample.h: area_pixel_compute_source_index and the linear weights) so
// a model fed by dpx sees the same pixels as the PyTorch peer it is compared with.
#include "core/data/transforms.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace dpx::data {

namespace {

void check_chw(const Shape& s, const std::string& who) {
  if (s.size() != 3 || s[0] < 1 || s[1] < 1 || s[2] < 1)
    fail(who, ": samples must have shape (C, H, W) with every size >= 1, got ", shape_str(s));
}

std::string join(const std::vector<float>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}

class Normalize : public Transform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std) : mean_(std::move(mean)), std_(std::move(std)) {
    if (mean_.empty() || mean_.size() != std_.size())
      fail("normalize: needs as many means as standard deviations (one, or one per channel); got ", mean_.size(),
           " and ", std_.size());
    for (float s : std_)
      if (!(s > 0)) fail("normalize: standard deviations must be positive, got [", join(std_), "]");
  }
  Shape output_shape(const Shape& in) const override {
    check_chw(in, "normalize");
    if (mean_.size() != 1 && static_cast<int64_t>(mean_.size()) != in[0])
      fail("normalize: ", mean_.size(), " means for ", in[0], "-channel samples; give one or ", in[0]);
    return in;
  }
  void apply(float* out, const float* in, const Shape& s) const override {
    const int64_t plane = s[1] * s[2];
    for (int64_t c = 0; c < s[0]; ++c) {
      size_t k = mean_.size() == 1 ? 0 : static_cast<size_t>(c);
      // Divide, as torchvision's Normalize does (sub_ then div_), for bit-equal results.
      const float m = mean_[k], sd = std_[k];
      for (int64_t j = 0; j < plane; ++j) out[c * plane + j] = (in[c * plane + j] - m) / sd;
    }
  }
  std::string describe() const override { return "normalize(mean [" + join(mean_) + "], std [" + join(std_) + "])"; }

 private:
  std::vector<float> mean_, std_;
};

class Resize : public Transform {
 public:
  Resize(int64_t h, int64_t w) : h_(h), w_(w) {
    if (h < 1 || w < 1) fail("resize: the size must be positive, got ", h, "x", w);
  }
  Shape output_shape(const Shape& in) const override {
    check_chw(in, "resize");
    return {in[0], h_, w_};
  }
  void apply(float* out, const float* in, const Shape& s) const override {
    resize_bilinear(out, in, s[0], s[1], s[2], h_, w_);
  }
  std::string describe() const override { return "resize(" + std::to_string(h_) + "x" + std::to_string(w_) + ", bilinear)"; }

 private:
  int64_t h_, w_;
};

class GreyToRgb : public Transform {
 public:
  explicit GreyToRgb(int64_t channels) : channels_(channels) {
    if (channels < 1) fail("grey_to_rgb: channels must be positive, got ", channels);
  }
  Shape output_shape(const Shape& in) const override {
    check_chw(in, "grey_to_rgb");
    if (in[0] != 1) fail("grey_to_rgb: needs 1-channel (grey) samples, got ", in[0], " channels in ", shape_str(in));
    return {channels_, in[1], in[2]};
  }
  void apply(float* out, const float* in, const Shape& s) const override {
    const int64_t plane = s[1] * s[2];
    for (int64_t c = 0; c < channels_; ++c) std::copy(in, in + plane, out + c * plane);
  }
  std::string describe() const override { return "grey_to_rgb(" + std::to_string(channels_) + ")"; }

 private:
  int64_t channels_;
};

// One axis of the bilinear map: for each output index, two input indices and their weights.
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;
};

Taps linear_taps(int64_t in, int64_t out) {
  Taps t;
  t.i0.resize(out); t.i1.resize(out); t.w0.resize(out); t.w1.resize(out);
  // PyTorch computes in float for float tensors: scale = in / out (no scale_factor given),
  // src = scale * (dst + 0.5) - 0.5 clamped at 0 (align_corners=False).
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int64_t d = 0; d < out; ++d) {
    if (in == out) {
      t.i0[d] = t.i1[d] = d;
      t.w0[d] = 1.f;
      t.w1[d] = 0.f;
      continue;
    }
    float src = scale * (static_cast<float>(d) + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    int64_t i0 = static_cast<int64_t>(src);
    t.i0[d] = i0;
    t.i1[d] = i0 + (i0 < in - 1 ? 1 : 0);
    float lambda = std::min(std::max(src - static_cast<float>(i0), 0.f), 1.f);
    t.w1[d] = lambda;
    t.w0[d] = 1.f - lambda;
  }
  return t;
}

}  // namespace

TransformPtr normalize(std::vector<float> mean, std::vector<float> std) {
  return std::make_shared<Normalize>(std::move(mean), std::move(std));
}
TransformPtr resize(int64_t height, int64_t width) { return std::make_shared<Resize>(height, width); }
TransformPtr grey_to_rgb(int64_t channels) { return std::make_shared<GreyToRgb>(channels); }

void resize_bilinear(float* out, const float* in, int64_t C, int64_t in_h, int64_t in_w, int64_t out_h,
                     int64_t out_w) {
  const Taps ty = linear_taps(in_h, out_h), tx = linear_taps(in_w, out_w);
  for (int64_t c = 0; c < C; ++c) {
    const float* src = in + c * in_h * in_w;
    float* dst = out + c * out_h * out_w;
    for (int64_t y = 0; y < out_h; ++y) {
      const float* r0 = src + ty.i0[y] * in_w;
      const float* r1 = src + ty.i1[y] * in_w;
      const float h0 = ty.w0[y], h1 = ty.w1[y];
      for (int64_t x = 0; x < out_w; ++x) {
        // Same grouping as PyTorch: each row interpolated along x, then the rows along y.
        float top = r0[tx.i0[x]] * tx.w0[x] + r0[tx.i1[x]] * tx.w1[x];
        float bottom = r1[tx.i0[x]] * tx.w0[x] + r1[tx.i1[x]] * tx.w1[x];
        dst[y * out_w + x] = top * h0 + bottom * h1;
      }
    }
  }
}

TransformedDataset::TransformedDataset(std::shared_ptr<const Dataset> base, std::vector<TransformPtr> transforms)
    : base_(std::move(base)), transforms_(std::move(transforms)) {
  DPX_CHECK(base_ != nullptr, "TransformedDataset: no base data set");
  shapes_.push_back(base_->sample_shape());
  for (const auto& t : transforms_) {
    DPX_CHECK(t != nullptr, "TransformedDataset: null transform");
    shapes_.push_back(t->output_shape(shapes_.back()));
  }
}

void TransformedDataset::get(int64_t i, float* image_chw, int64_t* label) const {
  if (transforms_.empty()) return base_->get(i, image_chw, label);
  // Per-call buffers keep get() thread-safe and re-entrant (a TransformedDataset may wrap another).
  std::vector<float> cur(static_cast<size_t>(shape_numel(shapes_[0])));
  base_->get(i, cur.data(), label);
  for (size_t k = 0; k < transforms_.size(); ++k) {
    if (k + 1 == transforms_.size()) {
      transforms_[k]->apply(image_chw, cur.data(), shapes_[k]);
    } else {
      std::vector<float> next(static_cast<size_t>(shape_numel(shapes_[k + 1])));
      transforms_[k]->apply(next.data(), cur.data(), shapes_[k]);
      cur.swap(next);
    }
  }
}

std::string TransformedDataset::describe() const {
  std::string s = base_->describe();
  for (const auto& t : transforms_) s += " -> " + t->describe();
  return s;
}

std::shared_ptr<const Dataset> with_transforms(std::shared_ptr<const Dataset> base, std::vector<TransformPtr> transforms) {
  if (transforms.empty()) return base;
  return std::make_shared<TransformedDataset>(std::move(base), std::move(transforms));
}

std::vector<TransformPtr> model_input_transforms(const Shape& sample_chw, int64_t channels, int64_t height,
                                                 int64_t width, float mean, float std) {
  check_chw(sample_chw, "model input");
  std::vector<TransformPtr> out;
  if (std > 0) out.push_back(normalize({mean}, {std}));
  if (height != sample_chw[1] || width != sample_chw[2]) out.push_back(resize(height, width));
  if (channels != sample_chw[0]) {
    if (sample_chw[0] != 1)
      fail("cannot turn ", sample_chw[0], "-channel samples into ", channels,
           " channels: only grey (1-channel) images are replicated; pass --channels ", sample_chw[0]);
    out.push_back(grey_to_rgb(channels));
  }
  return out;
}

}  // namespace dpx::data
