// cpu::conv2d_forward / conv2d_backward: which algorithm runs a shape (kernels/cpu/conv2d_algos.hpp
// says what each is and what --conv-algo means). A shape's choice is made on its first call and
// kept for the process, per pass and thread count; conv_choices() lists them for --verbose and
// config.json.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "kernels/channels_last_host.hpp"
#include "kernels/host_half.hpp"
#include "kernels/cpu/conv2d_algos.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

namespace {

std::atomic<ConvAlgo> g_algo{ConvAlgo::automatic};

// The implementations a shape can run on.
enum class Impl { dpx, direct, winograd };
const char* impl_name(Impl i) {
  return i == Impl::dpx ? "dpx" : i == Impl::direct ? "onednn" : "winograd";
}

// A choice's key: the shape, then the pass, thread count and whether inside a parallel region.
using Key = std::pair<ConvShapeKey, std::array<int64_t, 3>>;

Key key_of(const Tensor& x, const Tensor& w, const Conv2dParams& p, bool bias, bool backward,
           int threads, bool in_region) {
  return {conv_shape_key(x, w, p, bias), {backward ? 1 : 0, threads, in_region ? 1 : 0}};
}

std::mutex g_mutex;
std::map<Key, Impl> g_choices;   // guarded by g_mutex
std::vector<ConvChoice> g_list;  // guarded by g_mutex

std::string shape_text(const Tensor& x, const Tensor& w, const Conv2dParams& p, bool bias) {
  std::ostringstream s;
  s << x.size(0) << 'x' << x.size(1) << 'x' << x.size(2) << 'x' << x.size(3) << " -> " << w.size(0)
    << ' ' << w.size(2) << 'x' << w.size(3) << " s" << p.stride_h;
  if (p.stride_w != p.stride_h) s << ',' << p.stride_w;
  s << " p" << p.pad_h;
  if (p.pad_w != p.pad_h) s << ',' << p.pad_w;
  s << " d" << p.dilation_h;
  if (p.dilation_w != p.dilation_h) s << ',' << p.dilation_w;
  s << " g" << p.groups;
  if (bias) s << " +bias";
  return s.str();
}

bool depthwise(const Tensor& w, const Conv2dParams& p) { return w.size(1) == 1 && p.groups > 1; }

// dpx's thread ranks are OpenMP threads; a kernel given several threads inside one runs them
// nested, which oneDNN's OpenMP build does not (it runs on one thread there).
bool nested(const Context& ctx) { return ctx.threads > 1 && omp_in_parallel(); }

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The better of two timed runs of f (the first may pay for making primitives).
template <class F>
double time_ms(F&& f) {
  double best = 1e300;
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, ms_since(t0));
  }
  return best;
}

std::string fixed2(double v) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(2);
  s << v;
  return s.str();
}

// Returns the choice for the shape of x and w in this pass and thread count, making it with
// `decide` the first time. decide() -> {impl, why}; it runs outside the lock (a search runs the
// kernels).
template <class Decide>
Impl choose(const Tensor& x, const Tensor& w, const Conv2dParams& p, bool bias, bool backward,
            int threads, Decide&& decide) {
  const bool in_region = omp_in_parallel();
  const Key key = key_of(x, w, p, bias, backward, threads, in_region);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = g_choices.find(key); it != g_choices.end()) return it->second;
  }
  auto [impl, why] = decide();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto it = g_choices.find(key); it != g_choices.end()) return it->second;  // raced
  g_choices[key] = impl;
  g_list.push_back({shape_text(x, w, p, bias), backward ? "backward" : "forward", impl_name(impl),
                    why, threads, in_region});
  return impl;
}

}  // namespace

const char* conv_algo_name(ConvAlgo algo) {
  switch (algo) {
    case ConvAlgo::automatic: return "auto";
    case ConvAlgo::search: return "search";
    case ConvAlgo::onednn: return "onednn";
    case ConvAlgo::winograd: return "winograd";
    case ConvAlgo::dpx: return "dpx";
  }
  return "?";
}

bool parse_conv_algo(const std::string& name, ConvAlgo& out) {
  for (ConvAlgo a : {ConvAlgo::automatic, ConvAlgo::search, ConvAlgo::onednn, ConvAlgo::winograd,
                     ConvAlgo::dpx})
    if (name == conv_algo_name(a)) {
      out = a;
      return true;
    }
  return false;
}

bool onednn_available() {
#ifdef DPX_WITH_ONEDNN
  return true;
#else
  return false;
#endif
}

void set_conv_algo(ConvAlgo algo) {
  if (algo != ConvAlgo::automatic && algo != ConvAlgo::dpx && !onednn_available())
    throw std::runtime_error(std::string("--conv-algo ") + conv_algo_name(algo) +
                             ": this dpx was built without oneDNN (install libdnnl-dev and "
                             "rebuild, or use --conv-algo dpx)");
  g_algo = algo;
}

ConvAlgo conv_algo() { return g_algo; }

namespace {
std::atomic<size_t> g_workspace_limit{0};
}  // namespace
void set_conv_workspace_limit(size_t bytes) { g_workspace_limit = bytes; }
size_t conv_workspace_limit() { return g_workspace_limit; }

ConvShapeKey conv_shape_key(const Tensor& x, const Tensor& w, const Conv2dParams& p, bool bias) {
  return {x.size(0),  x.size(1), x.size(2), x.size(3),    w.size(0),    w.size(2), w.size(3),   p.stride_h,
          p.stride_w, p.pad_h,   p.pad_w,   p.dilation_h, p.dilation_w, p.groups,  bias ? 1 : 0};
}

std::vector<ConvChoice> conv_choices() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_list;
}

void clear_conv_choices() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_choices.clear();
  g_list.clear();
}

namespace {

// The implementations to try for a shape under `algo`, in order of preference, and whether the
// first that runs is taken (a rule) or all are timed (search). Empty: dpx's kernels by rule.
constexpr int64_t kWinogradMinPlane = 7, kPointwiseMinPlane = 14;  // output rows and columns
constexpr int64_t kSmallPlane = 16, kManyChannels = 1024;            // output pixels; channels
constexpr int64_t kStemChannels = 8;  // fewer input channels: a network's first convolution

// oneDNN's Winograd F(4x4, 3x3): 3x3 kernels, stride 1, no dilation, no groups.
bool winograd_shape(const Tensor& w, const Conv2dParams& p) {
  return w.size(2) == 3 && w.size(3) == 3 && p.stride_h == 1 && p.stride_w == 1 &&
         p.dilation_h == 1 && p.dilation_w == 1 && p.groups == 1;
}

std::vector<Impl> candidates(ConvAlgo algo, bool backward, const Context& ctx, const Tensor& x,
                             const Tensor& w, const Conv2dParams& p, std::string& why) {
  const int64_t OH = ops::conv_out_size(x.size(2), static_cast<int>(w.size(2)), p.stride_h, p.pad_h,
                                        p.dilation_h);
  const int64_t OW = ops::conv_out_size(x.size(3), static_cast<int>(w.size(3)), p.stride_w, p.pad_w,
                                        p.dilation_w);
  const int64_t out_plane = std::min(OH, OW), out_pixels = OH * OW;
  switch (algo) {
    case ConvAlgo::onednn: return {Impl::direct, Impl::dpx};
    case ConvAlgo::winograd: return {Impl::winograd, Impl::direct, Impl::dpx};
    case ConvAlgo::search:
      if (winograd_shape(w, p)) return {Impl::winograd, Impl::direct, Impl::dpx};
      return {Impl::direct, Impl::dpx};
    case ConvAlgo::dpx: break;
    case ConvAlgo::automatic:
      if (depthwise(w, p)) {
        why = "rule: depthwise";
        return {};
      }
      if (nested(ctx)) {
        why = "rule: inside a parallel region oneDNN takes 1 thread";
        return {};
      }
      // 1x1 convolutions on output planes of 14x14 and more: dpx's kernels, whose products read
      // x and dy in NCHW as they are (or gather the strided pixels), where oneDNN reorders x, y,
      // dy and dx to and from its blocked layouts around the same product (--conv-algo search on
      // ResNet-50 at 224x224: dpx 1.1-2.3x faster forward on those planes, 1.1-1.4x backward on
      // 28x28 and 56x56, 3-5 % slower backward on 14x14; oneDNN 1.1-1.3x faster on 7x7).
      if (w.size(2) == 1 && w.size(3) == 1 && p.groups == 1 && out_plane >= kPointwiseMinPlane) {
        why = "rule: 1x1 on a plane of 14x14 or more";
        return {};
      }
      // 1024 or more input channels on planes of at most 16 output pixels, backward: ResNet-50's
      // last stages at 64x64, where dpx puts the images side by side in one product (--conv-algo
      // search at 64x64; 1.4-2.4x).
      if (backward && x.size(1) >= kManyChannels && out_pixels <= kSmallPlane) {
        why = "rule: backward of many channels on a small plane";
        return {};
      }
      // A 3x3 stride-1 stem (VGG's, 3 input channels): dpx's kernels, whose product has 27 rows,
      // where Winograd transforms tiles of 3 channels (--conv-algo search on VGG-16 at 224x224:
      // forward 10.6 ms against 15.4 direct and 28.6 Winograd, backward 11.5 against 43.8 and 64.8).
      if (winograd_shape(w, p) && x.size(1) < kStemChannels) {
        why = "rule: 3x3 stem (under 8 input channels)";
        return {};
      }
      // Winograd pays on planes of 7x7 and more (bench_kernels: 1.8-2.4x the direct
      // convolution's speed on 14x14 and more; --conv-algo search on ResNet-18 and -50 at 224:
      // 1.1-1.5x on 7x7; 3-4x slower at 4x4 and 2x2).
      if (winograd_shape(w, p) && out_plane >= kWinogradMinPlane)
        return {Impl::winograd, Impl::direct, Impl::dpx};
      return {Impl::direct, Impl::dpx};
  }
  return {};
}

// Decides among the candidates: by rule, the first that runs, or by search, the fastest of those
// that run. run(impl, &refused) runs the implementation; a refusal is known before anything is
// written. Under a rule that run is the call itself, into its outputs (the caller does not run
// it again: dW is added to); a search runs each candidate into the outputs (forward, which
// overwrites them) or into copies (backward), and the caller runs the fastest.
template <class Run>
std::pair<Impl, std::string> decide(ConvAlgo algo, const std::vector<Impl>& impls,
                                    std::string rule_why, Run&& run) {
  if (impls.empty()) return {Impl::dpx, rule_why};
  std::string refusals;
  auto note = [&](Impl i, const std::string& refused) {
    refusals += std::string(refusals.empty() ? "" : "; ") + impl_name(i) + ": " + refused;
  };
  if (algo != ConvAlgo::search) {
    for (Impl i : impls) {
      std::string refused;
      if (i == Impl::dpx || run(i, &refused)) {
        const std::string how = algo == ConvAlgo::automatic ? "rule" : "forced";
        return {i, refusals.empty() ? how : how + " (" + refusals + ")"};
      }
      note(i, refused);
    }
  }
  Impl best = Impl::dpx;
  double best_ms = 1e300;
  std::string times;
  for (Impl i : impls) {
    std::string refused;
    bool ok = true;
    const double ms = time_ms([&] { ok = ok && run(i, &refused); });
    if (!ok) {
      note(i, refused);
      continue;
    }
    times += std::string(times.empty() ? "" : ", ") + impl_name(i) + " " + fixed2(ms) + " ms";
    if (ms < best_ms) best = i, best_ms = ms;
  }
  return {best, "search: " + times + (refusals.empty() ? "" : " (" + refusals + ")")};
}

}  // namespace

void conv2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b,
                    const Conv2dParams& p) {
  if (kernels::is_half(y) || kernels::is_half(x))
    return kernels::conv2d_forward_widened(conv2d_forward, ctx, y, x, w, b, p);
  if (p.format == MemoryFormat::channels_last)
    return kernels::conv2d_forward_via_nchw(conv2d_forward, ctx, y, x, w, b, p);
  const ConvAlgo algo = g_algo;
  if (algo == ConvAlgo::dpx || !onednn_available()) return conv2d_forward_dpx(ctx, y, x, w, b, p);
  const bool bias = b && b->defined();
  auto run = [&](Impl i, std::string* why) {
    if (i == Impl::dpx) {
      conv2d_forward_dpx(ctx, y, x, w, b, p);
      return true;
    }
    return conv2d_forward_onednn(ctx, y, x, w, b, p, i == Impl::winograd, why);
  };
  bool done = false;  // a rule's first choice ran as this call
  const Impl impl = choose(x, w, p, bias, /*backward=*/false, ctx.threads, [&] {
    std::string why;
    const std::vector<Impl> impls = candidates(algo, false, ctx, x, w, p, why);
    return decide(algo, impls, why, [&](Impl i, std::string* refused) {
      return done = run(i, refused) && algo != ConvAlgo::search;
    });
  });
  std::string why;
  if (!done && !run(impl, &why)) conv2d_forward_dpx(ctx, y, x, w, b, p);
}

void conv2d_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                     const Tensor& x, const Tensor& w, const Conv2dParams& p, DxMode dx_mode) {
  if (kernels::is_half(dy) || kernels::is_half(x) || kernels::is_half(dx))
    return kernels::conv2d_backward_widened(conv2d_backward, ctx, dx, dw, db, dy, x, w, p, dx_mode);
  if (p.format == MemoryFormat::channels_last)
    return kernels::conv2d_backward_via_nchw(conv2d_backward, ctx, dx, dw, db, dy, x, w, p, dx_mode);
  const ConvAlgo algo = g_algo;
  if (algo == ConvAlgo::dpx || !onednn_available() || (!dx && !dw))
    return conv2d_backward_dpx(ctx, dx, dw, db, dy, x, w, p, dx_mode);
  bool done = false;  // a rule's first choice ran as this call, into dx and dW
  const Impl impl = choose(x, w, p, /*bias=*/false, /*backward=*/true, ctx.threads, [&] {
    std::string why;
    const std::vector<Impl> impls = candidates(algo, true, ctx, x, w, p, why);
    if (algo != ConvAlgo::search)  // dpx's kernels are never tried: they always run
      return decide(algo, impls, why, [&](Impl i, std::string* refused) {
        return done = conv2d_backward_onednn(ctx, dx, dw, dy, x, w, p, i == Impl::winograd, dx_mode, refused);
      });
    // The gradients are added to dx and dW: a search times each candidate into copies.
    Tensor tdx = dx ? Tensor::zeros(dx->shape()) : Tensor();
    Tensor tdw = dw ? Tensor::zeros(dw->shape()) : Tensor();
    Tensor* pdx = dx ? &tdx : nullptr;
    Tensor* pdw = dw ? &tdw : nullptr;
    return decide(algo, impls, why, [&](Impl i, std::string* refused) {
      if (i == Impl::dpx) {
        conv2d_backward_dpx(ctx, pdx, pdw, nullptr, dy, x, w, p, dx_mode);
        return true;
      }
      return conv2d_backward_onednn(ctx, pdx, pdw, dy, x, w, p, i == Impl::winograd, dx_mode, refused);
    });
  });
  std::string why;
  if (done || (impl != Impl::dpx &&
               conv2d_backward_onednn(ctx, dx, dw, dy, x, w, p, impl == Impl::winograd, dx_mode, &why))) {
    if (db) conv2d_backward_dpx(ctx, nullptr, nullptr, db, dy, x, w, p, dx_mode);
    return;
  }
  conv2d_backward_dpx(ctx, dx, dw, db, dy, x, w, p, dx_mode);
}

}  // namespace dpx::cpu
