// torchvision's crop, resize, flip and normalisation on 8-bit RGB, computed as PIL computes them
// (Pillow 9.4, libImaging/Resample.c: two passes, horizontal then vertical, coefficients in 22-bit
// fixed point, each pass rounded and clipped to 8 bits), and torchvision 0.14's choice of boxes.
#include "core/data/image_transforms.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dpx::data {

void ImageTransformOptions::validate() const {
  if (size < 1 || size > 8192) usage_fail("--image-size ", size, ": give a side between 1 and 8192 pixels");
  if (resize_size < 0 || (resize_size > 0 && resize_size < size))
    usage_fail("--resize-size ", resize_size, " is smaller than --image-size ", size,
               ": the centre crop must fit in the resized image; give at least ", size, " (or 0 for size x 256 / 224)");
  if (resize_size > 16384) usage_fail("--resize-size ", resize_size, ": give at most 16384 pixels");
  if (!(scale_min > 0 && scale_min <= scale_max && scale_max <= 1))
    usage_fail("--crop-scale ", scale_min, ",", scale_max,
               ": give MIN,MAX with 0 < MIN <= MAX <= 1 (torchvision's default is 0.08,1)");
  if (!(ratio_min > 0 && ratio_min <= ratio_max && std::isfinite(ratio_max)))
    usage_fail("--crop-ratio ", ratio_min, ",", ratio_max,
               ": give MIN,MAX with 0 < MIN <= MAX (torchvision's default is 0.75,1.3333)");
  if (!(flip_p >= 0 && flip_p <= 1)) usage_fail("--flip ", flip_p, ": give a probability in [0, 1]");
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(mean[c])) usage_fail("--mean: channel ", c, " is not a finite number");
    if (!(std[c] > 0) || !std::isfinite(std[c]))
      usage_fail("--std: channel ", c, " is ", std[c], "; every standard deviation must be a positive number");
  }
}

namespace {

// A uniform integer in [0, n) from one 32-bit draw, as torch.randint(0, n) draws one.
int uniform_int(Rng& rng, int n) {
  return static_cast<int>((static_cast<uint64_t>(rng.next_u32()) * static_cast<uint64_t>(n)) >> 32);
}

// Python's round(): half to even, which nearbyint does in the default rounding mode.
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }

}  // namespace

SamplePlan plan_train_sample(int W, int H, const ImageTransformOptions& o, Rng& rng) {
  SamplePlan p;
  const double area = static_cast<double>(H) * W;
  // torch.log(torch.tensor(ratio)) and the draws are float32, read back as Python floats.
  const float log_r0 = std::log(static_cast<float>(o.ratio_min)), log_r1 = std::log(static_cast<float>(o.ratio_max));
  const float s0 = static_cast<float>(o.scale_min), s1 = static_cast<float>(o.scale_max);
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const float scale = s0 + (s1 - s0) * rng.uniform();
    const double target_area = area * static_cast<double>(scale);
    const double aspect = static_cast<double>(std::exp(log_r0 + (log_r1 - log_r0) * rng.uniform()));
    const int w = round_half_even(std::sqrt(target_area * aspect));
    const int h = round_half_even(std::sqrt(target_area / aspect));
    if (0 < w && w <= W && 0 < h && h <= H) {
      p.top = uniform_int(rng, H - h + 1);
      p.left = uniform_int(rng, W - w + 1);
      p.width = w;
      p.height = h;
      found = true;
    }
  }
  if (!found) {  // torchvision's fallback: the largest centred crop within the ratio range
    const double in_ratio = static_cast<double>(W) / static_cast<double>(H);
    int w = W, h = H;
    if (in_ratio < o.ratio_min) {
      h = round_half_even(w / o.ratio_min);
    } else if (in_ratio > o.ratio_max) {
      w = round_half_even(h * o.ratio_max);
    }
    p.width = w;
    p.height = h;
    p.top = (H - h) / 2;
    p.left = (W - w) / 2;
  }
  p.resized_w = p.resized_h = o.size;
  p.flip = o.flip_p > 0 && rng.uniform() < static_cast<float>(o.flip_p);
  return p;
}

SamplePlan plan_eval_sample(int W, int H, const ImageTransformOptions& o) {
  SamplePlan p;
  p.width = W;
  p.height = H;
  const int64_t r = o.effective_resize_size();
  const int64_t shorter = std::min(W, H), longer = std::max(W, H);
  const int64_t new_long = static_cast<int64_t>(static_cast<double>(r * longer) / static_cast<double>(shorter));
  p.resized_w = static_cast<int>(W <= H ? r : new_long);
  p.resized_h = static_cast<int>(W <= H ? new_long : r);
  p.window_y = round_half_even((p.resized_h - o.size) / 2.0);
  p.window_x = round_half_even((p.resized_w - o.size) / 2.0);
  return p;
}

// ---- PIL's bilinear resampling ---------------------------------------------------------------

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Resample.c: PRECISION_BITS

inline uint8_t clip8(int v) {
  const int x = v >> kPrecisionBits;  // arithmetic shift: floor, as PIL's lookup table index
  return static_cast<uint8_t>(x < 0 ? 0 : x > 255 ? 255 : x);
}

inline double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

// Resample.c's precompute_coeffs and normalize_coeffs_8bpc for outputs [first, first + count).
struct Coefficients {
  int ksize = 0;
  std::vector<int> bounds;  // (xmin, count) per output
  std::vector<int32_t> k;   // count * ksize
};

void precompute(int in_size, float in0, float in1, int out_size, int first, int count, Coefficients& c) {
  const double scale = static_cast<double>(in1 - in0) / out_size;  // in1 - in0 in float, as PIL
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 1.0 * filterscale;  // the bilinear filter's support is 1
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.bounds.assign(static_cast<size_t>(2 * count), 0);
  c.k.assign(static_cast<size_t>(count) * c.ksize, 0);
  std::vector<double> kk(static_cast<size_t>(c.ksize));
  for (int j = 0; j < count; ++j) {
    const int xx = first + j;
    const double center = in0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = bilinear_filter((x + xmin - center + 0.5) * ss);
      kk[static_cast<size_t>(x)] = w;
      ww += w;
    }
    int32_t* k = c.k.data() + static_cast<size_t>(j) * c.ksize;
    for (int x = 0; x < xmax; ++x) {
      double w = kk[static_cast<size_t>(x)];
      if (ww != 0.0) w /= ww;
      k[x] = w < 0 ? static_cast<int32_t>(-0.5 + w * (1 << kPrecisionBits))
                   : static_cast<int32_t>(0.5 + w * (1 << kPrecisionBits));
    }
    c.bounds[static_cast<size_t>(2 * j)] = xmin;
    c.bounds[static_cast<size_t>(2 * j + 1)] = xmax;
  }
}

// Scratch buffers a worker thread keeps between images.
struct ResampleScratch {
  Coefficients horizontal, vertical;
  std::vector<uint8_t> temp;
};

}  // namespace

void resize_bilinear_u8(const uint8_t* src, size_t stride, int src_w, int src_h, const std::array<float, 4>& box,
                        int out_w, int out_h, int wx, int wy, int ww, int wh, uint8_t* out) {
  DPX_CHECK(src_w > 0 && src_h > 0 && out_w > 0 && out_h > 0, "resize_bilinear_u8: empty image");
  DPX_CHECK(wx >= 0 && wy >= 0 && ww > 0 && wh > 0 && wx + ww <= out_w && wy + wh <= out_h,
            "resize_bilinear_u8: window outside the output");
  thread_local ResampleScratch s;
  // Resample.c: an axis is resampled when its size or its box changes.
  const bool need_h = out_w != src_w || box[0] != 0.f || box[2] != static_cast<float>(out_w);
  const bool need_v = out_h != src_h || box[1] != 0.f || box[3] != static_cast<float>(out_h);
  precompute(src_h, box[1], box[3], out_h, wy, wh, s.vertical);
  // The source rows the kept output rows read (the vertical pass's window, PIL's ybox).
  int row_first = wy, row_last = wy + wh;
  if (need_v) {
    row_first = s.vertical.bounds[0];
    row_last = s.vertical.bounds[static_cast<size_t>(2 * (wh - 1))] + s.vertical.bounds[static_cast<size_t>(2 * wh - 1)];
    row_last = std::max(row_last, row_first);
  }
  const int rows = row_last - row_first;
  // Horizontal pass: rows [row_first, row_last) of the source, output columns [wx, wx + ww).
  const uint8_t* hsrc = nullptr;
  size_t hstride = 0;
  int hx0 = 0;  // the column of the kept window in hsrc
  if (need_h) {
    precompute(src_w, box[0], box[2], out_w, wx, ww, s.horizontal);
    s.temp.resize(static_cast<size_t>(rows) * ww * 3);
    const int ksize = s.horizontal.ksize;
    for (int r = 0; r < rows; ++r) {
      const uint8_t* in = src + static_cast<size_t>(row_first + r) * stride;
      uint8_t* o = s.temp.data() + static_cast<size_t>(r) * ww * 3;
      for (int x = 0; x < ww; ++x) {
        const int xmin = s.horizontal.bounds[static_cast<size_t>(2 * x)];
        const int n = s.horizontal.bounds[static_cast<size_t>(2 * x + 1)];
        const int32_t* k = s.horizontal.k.data() + static_cast<size_t>(x) * ksize;
        int ss0 = 1 << (kPrecisionBits - 1), ss1 = ss0, ss2 = ss0;
        const uint8_t* p = in + static_cast<size_t>(xmin) * 3;
        for (int i = 0; i < n; ++i) {
          ss0 += p[3 * i] * k[i];
          ss1 += p[3 * i + 1] * k[i];
          ss2 += p[3 * i + 2] * k[i];
        }
        o[3 * x] = clip8(ss0);
        o[3 * x + 1] = clip8(ss1);
        o[3 * x + 2] = clip8(ss2);
      }
    }
    hsrc = s.temp.data();
    hstride = static_cast<size_t>(ww) * 3;
  } else {
    hsrc = src + static_cast<size_t>(row_first) * stride;
    hstride = stride;
    hx0 = wx;
  }
  // Vertical pass (hsrc row 0 is source row row_first).
  for (int y = 0; y < wh; ++y) {
    uint8_t* o = out + static_cast<size_t>(y) * ww * 3;
    if (!need_v) {
      std::copy_n(hsrc + static_cast<size_t>(y) * hstride + static_cast<size_t>(hx0) * 3, static_cast<size_t>(ww) * 3, o);
      continue;
    }
    const int ymin = s.vertical.bounds[static_cast<size_t>(2 * y)] - row_first;
    const int n = s.vertical.bounds[static_cast<size_t>(2 * y + 1)];
    const int32_t* k = s.vertical.k.data() + static_cast<size_t>(y) * s.vertical.ksize;
    for (int x = 0; x < ww * 3; ++x) {
      int ss = 1 << (kPrecisionBits - 1);
      const uint8_t* p = hsrc + static_cast<size_t>(ymin) * hstride + static_cast<size_t>(hx0) * 3 + x;
      for (int i = 0; i < n; ++i) ss += p[static_cast<size_t>(i) * hstride] * k[i];
      o[x] = clip8(ss);
    }
  }
}

// ---- normalisation ---------------------------------------------------------------------------

NormalizeTable::NormalizeTable(const std::array<float, 3>& mean, const std::array<float, 3>& std) {
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(v) / 255.f;  // ToTensor: .div(255) in float32
      table_[c][v] = (x - mean[c]) / std[c];          // Normalize: sub_(mean).div_(std)
    }
}

void NormalizeTable::to_chw(const uint8_t* hwc, int width, int height, bool flip, float* chw) const {
  const size_t plane = static_cast<size_t>(width) * height;
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = hwc + static_cast<size_t>(y) * width * 3;
    float* r = chw + static_cast<size_t>(y) * width;
    float* g = r + plane;
    float* b = g + plane;
    for (int x = 0; x < width; ++x) {
      const uint8_t* p = row + static_cast<size_t>(flip ? width - 1 - x : x) * 3;
      r[x] = table_[0][p[0]];
      g[x] = table_[1][p[1]];
      b[x] = table_[2][p[2]];
    }
  }
}

// ---- one sample ------------------------------------------------------------------------------

namespace {

// The kept window of a plan from an image decoded at 1/`d` of the original's size: the region's
// box in the decoded pixels (fractional when d > 1), clamped to whole pixels around it.
void resize_plan(const RgbImage& image, const SamplePlan& plan, int d, int size, uint8_t* window) {
  const size_t stride = static_cast<size_t>(image.width) * 3;
  if (d == 1) {
    DPX_CHECK(plan.left + plan.width <= image.width && plan.top + plan.height <= image.height,
              "the sample's region lies outside its ", image.width, "x", image.height, " image");
    const uint8_t* src = image.pixels.data() + static_cast<size_t>(plan.top) * stride + static_cast<size_t>(plan.left) * 3;
    // torchvision: crop (PIL's crop: the region becomes the image), then resize the whole of it.
    resize_bilinear_u8(src, stride, plan.width, plan.height,
                       {0.f, 0.f, static_cast<float>(plan.width), static_cast<float>(plan.height)}, plan.resized_w,
                       plan.resized_h, plan.window_x, plan.window_y, size, size, window);
    return;
  }
  const double l = plan.left / static_cast<double>(d), t = plan.top / static_cast<double>(d);
  const double r = std::min<double>((plan.left + plan.width) / static_cast<double>(d), image.width);
  const double b = std::min<double>((plan.top + plan.height) / static_cast<double>(d), image.height);
  const int x0 = static_cast<int>(std::floor(l)), y0 = static_cast<int>(std::floor(t));
  const int x1 = std::min(static_cast<int>(std::ceil(r)), image.width);
  const int y1 = std::min(static_cast<int>(std::ceil(b)), image.height);
  const uint8_t* src = image.pixels.data() + static_cast<size_t>(y0) * stride + static_cast<size_t>(x0) * 3;
  resize_bilinear_u8(src, stride, x1 - x0, y1 - y0,
                     {static_cast<float>(l - x0), static_cast<float>(t - y0), static_cast<float>(r - x0),
                      static_cast<float>(b - y0)},
                     plan.resized_w, plan.resized_h, plan.window_x, plan.window_y, size, size, window);
}

}  // namespace

void transform_decoded(const RgbImage& image, const SamplePlan& plan, int size, const NormalizeTable& normalize,
                       float* chw, int scale_denominator) {
  thread_local std::vector<uint8_t> window;
  window.resize(static_cast<size_t>(size) * size * 3);
  resize_plan(image, plan, scale_denominator, size, window.data());
  normalize.to_chw(window.data(), size, size, plan.flip, chw);
}

void transform_image(std::span<const uint8_t> bytes, const std::string& name, const ImageTransformOptions& o,
                     const NormalizeTable& normalize, Rng& rng, float* chw) {
  const ImageHeader header = read_image_header(bytes, name);
  const SamplePlan plan =
      o.train ? plan_train_sample(header.width, header.height, o, rng) : plan_eval_sample(header.width, header.height, o);
  int d = 1;
  if (o.dct_scaling && header.format == ImageFormat::jpeg)
    d = dct_scale_for(plan.width, plan.height, plan.resized_w, plan.resized_h);
  thread_local RgbImage image;
  decode_rgb(bytes, name, image, d);
  if (d == 1 && (image.width != header.width || image.height != header.height))
    throw BadImage(detail::concat(name, ": decoded ", image.width, "x", image.height, " pixels, its header says ",
                                  header.width, "x", header.height));
  transform_decoded(image, plan, o.size, normalize, chw, d);
}

}  // namespace dpx::data
