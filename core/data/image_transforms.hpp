// torchvision's ImageNet transforms on decoded 8-bit RGB images, computed as torchvision 0.14
// computes them on PIL images: training RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3))
// + RandomHorizontalFlip(0.5), evaluation Resize(size * 256 / 224) + CenterCrop(size), then
// ToTensor + Normalize(mean, std). Resizing is PIL's antialiased bilinear resampling in 8-bit
// fixed point (Resample.c), so with DCT scaling off the tensors equal torchvision's bit for bit
// (tests/core/test_image_transforms.cpp against tests/fixtures/images/). Random choices come from
// an Rng the caller derives from (seed, epoch, sample index) only.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "core/data/image_decode.hpp"
#include "core/rng.hpp"

namespace dpx::data {

// ImageNet's per-channel statistics, as torchvision's references/classification and every
// torchvision model's weights transforms use them (torchvision/transforms/_presets.py).
inline constexpr std::array<float, 3> kImageNetMean = {0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd = {0.229f, 0.224f, 0.225f};

struct ImageTransformOptions {
  int size = 224;          // the output is (3, size, size)
  bool train = true;       // RandomResizedCrop + RandomHorizontalFlip; false: Resize + CenterCrop
  int resize_size = 0;     // evaluation: the shorter side before the centre crop; 0: size * 256 / 224
  // RandomResizedCrop's defaults (torchvision.transforms.RandomResizedCrop).
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  double flip_p = 0.5;     // RandomHorizontalFlip's p; 0 turns it off
  std::array<float, 3> mean = kImageNetMean, std = kImageNetStd;
  // Decode JPEGs at 1/2, 1/4 or 1/8 scale in the DCT domain when the region to resize is at least
  // kDctScaleMargin times the output (dct_scale_for): faster, no longer bit-equal to torchvision.
  bool dct_scaling = true;

  int effective_resize_size() const { return resize_size > 0 ? resize_size : size * 256 / 224; }
  // Throws UsageError naming the flag (--image-size, --resize-size, --crop-scale, --crop-ratio,
  // --flip, --mean, --std) for a value torchvision would refuse or that makes no sense.
  void validate() const;
};

// Where one sample's output comes from, in the original image's pixels: the region that is
// resized (RandomResizedCrop's box; the whole image for evaluation), the size it is resized to,
// the window of that resized image that is kept (the centre crop; all of it in training), and
// the flip.
struct SamplePlan {
  int left = 0, top = 0, width = 0, height = 0;  // the region
  int resized_w = 0, resized_h = 0;              // equal to width, height: no resize
  int window_x = 0, window_y = 0;                // the kept (size x size) window of the resized region
  bool flip = false;
};

// RandomResizedCrop.get_params of torchvision 0.14 with draws from `rng` (10 tries of an area in
// [scale_min, scale_max] of the image and a log-uniform aspect ratio, then the centre-crop
// fallback; sizes rounded half to even as Python's round), then the flip draw.
SamplePlan plan_train_sample(int image_w, int image_h, const ImageTransformOptions& o, Rng& rng);
// Resize(resize_size) of the shorter side (the longer one int(resize_size * long / short)), then
// CenterCrop(size) at int(round((side - size) / 2)).
SamplePlan plan_eval_sample(int image_w, int image_h, const ImageTransformOptions& o);

// PIL's Image.resize((out_w, out_h), BILINEAR, box) of an 8-bit RGB image whose rows start at
// `src` with `stride` bytes between them and which is `src_w` x `src_h` pixels (coefficient bounds
// are clamped to it, as PIL's to its image), box (x0, y0, x1, y1) in those pixels; only the output
// window (wx, wy, ww, wh) is computed (the same values as computing all and cropping), into `out`
// (wh rows of ww * 3 bytes). No resampling along an axis whose size and box are unchanged, as PIL.
void resize_bilinear_u8(const uint8_t* src, size_t stride, int src_w, int src_h, const std::array<float, 4>& box,
                        int out_w, int out_h, int wx, int wy, int ww, int wh, uint8_t* out);

// ToTensor + Normalize as lookup tables: value v of channel c becomes ((float)v / 255 - mean[c]) /
// std[c], each operation rounded to float as torch's.
class NormalizeTable {
 public:
  NormalizeTable(const std::array<float, 3>& mean, const std::array<float, 3>& std);
  float operator()(int channel, uint8_t v) const { return table_[channel][v]; }
  // (size, size, 3) u8 -> (3, size, size) f32, mirrored left-right when `flip`.
  void to_chw(const uint8_t* hwc, int width, int height, bool flip, float* chw) const;

 private:
  std::array<std::array<float, 256>, 3> table_;
};

// One file's bytes to its (3, size, size) tensor: header, plan (RandomResizedCrop draws from `rng`
// when training), decode (DCT-scaled where allowed), resize, crop, flip, normalise. Throws
// BadImage naming `name` for a file that cannot be decoded. Thread-safe.
void transform_image(std::span<const uint8_t> bytes, const std::string& name, const ImageTransformOptions& o,
                     const NormalizeTable& normalize, Rng& rng, float* chw);
// The same from pixels already decoded, at full size or at 1/`scale_denominator` of it (the plan is
// in the full image's pixels either way).
void transform_decoded(const RgbImage& image, const SamplePlan& plan, int size, const NormalizeTable& normalize,
                       float* chw, int scale_denominator = 1);

}  // namespace dpx::data
