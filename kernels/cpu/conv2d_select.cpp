// cpu::conv2d_forward / conv2d_backward: which algorithm runs a shape (kernels/cpu/conv2d_algos.hpp
// says what each is and what --conv-algo means). A shape's choice is made on its first call and
// kept for the process, per pass and thread count; conv_choices() lists them for --verbose and
// config.json.
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "kernels/cpu/conv2d_algos.hpp"
#include "kernels/cpu/cpu_ops.hpp"

namespace dpx::cpu {

namespace {

std::atomic<ConvAlgo> g_algo{ConvAlgo::automatic};

struct Choice {
  bool onednn = false;
  size_t index = 0;  // in g_list
};

std::mutex g_mutex;
std::map<std::string, Choice> g_choices;  // key: shape, pass, threads; guarded by g_mutex
std::vector<ConvChoice> g_list;           // guarded by g_mutex

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

// Returns the choice for (shape, pass, threads), making it with `decide` the first time.
// decide() -> {onednn, why}; it runs outside the lock (a search runs the kernels).
template <class Decide>
bool choose(const std::string& shape, const char* pass, int threads, Decide&& decide) {
  const bool in_region = omp_in_parallel();
  const std::string key =
      shape + '|' + pass + '|' + std::to_string(threads) + (in_region ? "|nested" : "");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (auto it = g_choices.find(key); it != g_choices.end()) return it->second.onednn;
  }
  auto [onednn, why] = decide();
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto it = g_choices.find(key); it != g_choices.end()) return it->second.onednn;  // raced
  g_choices[key] = {onednn, g_list.size()};
  g_list.push_back({shape, pass, onednn ? "onednn" : "dpx", why, threads, in_region});
  return onednn;
}

}  // namespace

const char* conv_algo_name(ConvAlgo algo) {
  switch (algo) {
    case ConvAlgo::automatic: return "auto";
    case ConvAlgo::search: return "search";
    case ConvAlgo::onednn: return "onednn";
    case ConvAlgo::dpx: return "dpx";
  }
  return "?";
}

bool parse_conv_algo(const std::string& name, ConvAlgo& out) {
  for (ConvAlgo a : {ConvAlgo::automatic, ConvAlgo::search, ConvAlgo::onednn, ConvAlgo::dpx})
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
  if ((algo == ConvAlgo::onednn || algo == ConvAlgo::search) && !onednn_available())
    throw std::runtime_error(std::string("--conv-algo ") + conv_algo_name(algo) +
                             ": this dpx was built without oneDNN (install libdnnl-dev and "
                             "rebuild, or use --conv-algo dpx)");
  g_algo = algo;
}

ConvAlgo conv_algo() { return g_algo; }

std::vector<ConvChoice> conv_choices() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_list;
}

void clear_conv_choices() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_choices.clear();
  g_list.clear();
}

void conv2d_forward(Context& ctx, Tensor& y, const Tensor& x, const Tensor& w, const Tensor* b,
                    const Conv2dParams& p) {
  const ConvAlgo algo = g_algo;
  if (algo == ConvAlgo::dpx || !onednn_available()) return conv2d_forward_dpx(ctx, y, x, w, b, p);
  const bool bias = b && b->defined();
  const bool onednn = choose(shape_text(x, w, p, bias), "forward", ctx.threads, [&] {
    std::string refused;
    if (algo == ConvAlgo::automatic && depthwise(w, p))
      return std::pair{false, std::string("rule: depthwise")};
    if (algo == ConvAlgo::automatic && nested(ctx))
      return std::pair{false, std::string("rule: inside a parallel region oneDNN takes 1 thread")};
    if (algo != ConvAlgo::search) {
      // Try it once here, so that a refusal is known before the real call.
      if (!conv2d_forward_onednn(ctx, y, x, w, b, p, &refused)) return std::pair{false, refused};
      return std::pair{true, std::string(algo == ConvAlgo::automatic ? "rule" : "forced")};
    }
    double t_onednn = 0;
    bool ok = true;
    t_onednn = time_ms([&] { ok = ok && conv2d_forward_onednn(ctx, y, x, w, b, p, &refused); });
    if (!ok) return std::pair{false, refused};
    const double t_dpx = time_ms([&] { conv2d_forward_dpx(ctx, y, x, w, b, p); });
    return std::pair{t_onednn < t_dpx, "search: onednn " + fixed2(t_onednn) + " ms, dpx " +
                                            fixed2(t_dpx) + " ms"};
  });
  std::string why;
  if (onednn && conv2d_forward_onednn(ctx, y, x, w, b, p, &why)) return;
  conv2d_forward_dpx(ctx, y, x, w, b, p);
}

void conv2d_backward(Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                     const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  const ConvAlgo algo = g_algo;
  if (algo == ConvAlgo::dpx || !onednn_available() || (!dx && !dw))
    return conv2d_backward_dpx(ctx, dx, dw, db, dy, x, w, p);
  const bool onednn = choose(shape_text(x, w, p, false), "backward", ctx.threads, [&] {
    std::string refused;
    if (algo == ConvAlgo::automatic && depthwise(w, p))
      return std::pair{false, std::string("rule: depthwise")};
    if (algo == ConvAlgo::automatic && nested(ctx))
      return std::pair{false, std::string("rule: inside a parallel region oneDNN takes 1 thread")};
    // The gradients are added to dx and dW: trial runs write into copies.
    Tensor tdx = dx ? Tensor::zeros(dx->shape()) : Tensor(), tdw = dw ? Tensor::zeros(dw->shape()) : Tensor();
    Tensor* pdx = dx ? &tdx : nullptr;
    Tensor* pdw = dw ? &tdw : nullptr;
    if (algo != ConvAlgo::search) {
      if (!conv2d_backward_onednn(ctx, pdx, pdw, dy, x, w, p, &refused))
        return std::pair{false, refused};
      return std::pair{true, std::string(algo == ConvAlgo::automatic ? "rule" : "forced")};
    }
    bool ok = true;
    const double t_onednn =
        time_ms([&] { ok = ok && conv2d_backward_onednn(ctx, pdx, pdw, dy, x, w, p, &refused); });
    if (!ok) return std::pair{false, refused};
    const double t_dpx = time_ms([&] { conv2d_backward_dpx(ctx, pdx, pdw, nullptr, dy, x, w, p); });
    return std::pair{t_onednn < t_dpx, "search: onednn " + fixed2(t_onednn) + " ms, dpx " +
                                            fixed2(t_dpx) + " ms"};
  });
  std::string why;
  if (onednn && conv2d_backward_onednn(ctx, dx, dw, dy, x, w, p, &why)) {
    if (db) conv2d_backward_dpx(ctx, nullptr, nullptr, db, dy, x, w, p);
    return;
  }
  conv2d_backward_dpx(ctx, dx, dw, db, dy, x, w, p);
}

}  // namespace dpx::cpu
