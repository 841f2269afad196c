// A finite-difference gradient checker for any dpx::nn::Module (standalone, or the root of a
// Model): loss = sum(y * r) with r fixed and random, centred differences for every input
// element and every trainable parameter element, compared with the module's own backward.
// Header-only so every suite (layers, zoo) can use it; for a Model pass model.root(). Meant
// for tiny shapes: every element costs two forwards (four with skip_kinks).
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/context.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "layers/module.hpp"
#include "tests/common/compare.hpp"

namespace dpx::testing {

struct GradCheckOptions {
  // Kernels compute in f32 (unit roundoff u = 6e-8). A centred difference has truncation error
  // ~ eps^2 |f'''| / 6 (zero for layers linear in what is perturbed; ~1e-4 for BN-like
  // curvature at eps = 1e-2) and roundoff error ~ u * sum|y r| / eps (~1e-5 on tiny shapes
  // with tens of outputs of order 1). Measured: <= 6e-5 for single layers, <= 5e-4 for a small
  // CNN through the loss at eps = 3e-3. A wrong formula (a missing term, a wrong divisor, an
  // overwritten gradient) errs by 1e-2 to 1: a tolerance of 5e-3 keeps a 10x margin both ways.
  float eps = 1e-2f;
  float tolerance = 5e-3f;
  uint64_t seed = 20240601;  // draws r (and nothing else: the module's own state is cloned)
  // Skips input element i when true; for kinks the caller can see (a ReLU input within
  // +-2 eps of 0, a max-pool element within 2 eps of a rival in its window).
  std::function<bool(int64_t)> skip_input;
  // Skips any point (input or parameter) where a kink lies within +-eps, as inside a network
  // where the caller cannot say where: the two one-sided differences disagree, or the centred
  // difference changes when the step is halved, by more than tolerance / 2 (scaled). A lone
  // kink at distance d < eps moves one of the two by at least half its jump in slope, and
  // two kinks whose effects cancel in one test rarely cancel in the other. Strong curvature
  // (|f''| eps > tolerance / 2) also trips the first test, so a test using this should
  // bound `skipped`.
  bool skip_kinks = false;
};

struct GradCheckResult {
  double max_input_error = 0;  // max |a - n| / max(|a|, |n|, 1) over input elements
  double max_param_error = 0;  // the same over every trainable parameter element
  std::string worst;           // where the largest error was, with both values
  int64_t checked = 0, skipped = 0;
  std::vector<std::string> problems;  // contract breaches found on the way (see gradcheck)
  double tolerance = 0;

  double max_error() const { return std::max(max_input_error, max_param_error); }
  bool ok() const { return problems.empty() && max_error() <= tolerance && checked > 0; }
  std::string summary() const {
    std::ostringstream os;
    os << "max error " << max_error() << " (input " << max_input_error << ", params "
       << max_param_error << ") at " << worst << "; " << checked << " checked, " << skipped
       << " skipped";
    for (const auto& p : problems) os << "\n  problem: " << p;
    return os.str();
  }
};

namespace detail {

inline Tensor host_copy(const Tensor& t) { return t.to(Device::cpu()); }

// t[i] = v, whether t is on the host or a device.
inline void set_element(Tensor& t, int64_t i, float v) {
  if (t.device().is_cpu()) {
    t.data<float>()[i] = v;
    return;
  }
  Tensor h = host_copy(t);
  h.data<float>()[i] = v;
  t.copy_from(h);
}

inline double dot(const Tensor& y, const std::vector<float>& r) {
  std::vector<float> yv = y.to_vector();
  double s = 0;
  for (size_t i = 0; i < yv.size(); ++i) s += static_cast<double>(yv[i]) * r[i];
  return s;
}

struct Perturbed {
  double numeric = 0;
  bool kink = false;
};

}  // namespace detail

// Checks module's backward against centred differences of loss = sum(forward(x) * r).
// Every evaluation runs on a fresh clone of the module as given, so stateful layers
// (Dropout's stream, BN's running statistics) behave identically in all of them, and the
// caller's module is left untouched. Also reports as problems: a backward that overwrites
// rather than accumulates parameter gradients (they are pre-filled with 0.25), a gradient
// allocated for a frozen parameter, a dx that is not fresh or has the wrong shape, and a
// forward that writes into its input.
inline GradCheckResult gradcheck(Context& ctx, const nn::Module& module, const Tensor& x,
                                 const GradCheckOptions& opt = {}) {
  constexpr float kPrefill = 0.25f;
  GradCheckResult res;
  res.tolerance = opt.tolerance;
  const std::unique_ptr<nn::Module> base = module.clone();
  const Tensor x_host = detail::host_copy(x);

  // ---- analytic gradients -------------------------------------------------------------------
  std::unique_ptr<nn::Module> a = base->clone();
  auto params = a->named_parameters();
  for (auto& [name, p] : params) {
    p->grad = Tensor();
    if (!p->requires_grad) continue;
    Tensor g = Tensor::empty(p->value.shape());
    for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = kPrefill;
    p->grad = g.to(p->value.device());
  }
  Tensor y = a->forward(ctx, x);
  Tensor r_host = Tensor::empty(y.shape());
  Rng rng(opt.seed);
  fill_uniform(r_host, rng, -1.f, 1.f);
  const std::vector<float> r = r_host.to_vector();
  Tensor dy = r_host.to(ctx.device);
  Tensor dx = a->backward(ctx, dy);

  if (dx.shape() != x.shape())
    res.problems.push_back("dx has shape " + shape_str(dx.shape()) + ", x " + shape_str(x.shape()));
  if (dx.storage() == dy.storage() || dx.storage() == x.storage())
    res.problems.push_back("backward returned a view of dy or x, not a fresh dx");
  if (x.to_vector() != x_host.to_vector()) res.problems.push_back("forward or backward wrote into x");
  for (auto& [name, p] : params)
    if (!p->requires_grad && p->grad.defined())
      res.problems.push_back("a gradient was allocated for frozen parameter " + name);
  if (!res.problems.empty()) return res;

  auto loss_at = [&](const Tensor& xin, const std::function<void(nn::Module&)>& perturb) {
    std::unique_ptr<nn::Module> m = base->clone();
    if (perturb) perturb(*m);
    return detail::dot(m->forward(ctx, xin), r);
  };
  const double loss0 = opt.skip_kinks ? loss_at(x, nullptr) : 0.0;

  // The steps are taken between the f32 values v -+ h actually stored, so they are exact.
  auto difference = [&](float v, const std::function<double(float)>& f) {
    auto centred = [&](float h) {
      float lo = v - h, hi = v + h;
      double lm = f(lo), lp = f(hi);
      return std::array<double, 3>{(lp - lm) / (static_cast<double>(hi) - lo),
                                   (lp - loss0) / (static_cast<double>(hi) - v),
                                   (loss0 - lm) / (static_cast<double>(v) - lo)};
    };
    auto [numeric, fwd, bwd] = centred(opt.eps);
    detail::Perturbed out;
    out.numeric = numeric;
    if (opt.skip_kinks) {
      double half = centred(opt.eps / 2)[0];
      double limit = 0.5 * opt.tolerance * std::max({std::abs(fwd), std::abs(bwd), std::abs(half), 1.0});
      out.kink = std::abs(fwd - bwd) > limit || std::abs(numeric - half) > limit;
    }
    return out;
  };
  auto compare = [&](double analytic, double numeric, double& max_err, const std::string& where) {
    const double err = dpx::testing::rel_diff(analytic, numeric);  // a NaN against a number: +infinity
    ++res.checked;
    if (!(err <= max_err)) max_err = err;
    if (err >= res.max_error()) {
      std::ostringstream os;
      os << where << ": analytic " << analytic << ", numeric " << numeric;
      res.worst = os.str();
    }
  };

  // ---- the input ----------------------------------------------------------------------------
  const std::vector<float> dxv = dx.to_vector();
  const std::vector<float> xv = x_host.to_vector();
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (opt.skip_input && opt.skip_input(i)) {
      ++res.skipped;
      continue;
    }
    auto d = difference(xv[i], [&](float v) {
      Tensor xp = x_host.clone();
      xp.data<float>()[i] = v;
      return loss_at(xp.to(ctx.device), nullptr);
    });
    if (d.kink) {
      ++res.skipped;
      continue;
    }
    compare(dxv[i], d.numeric, res.max_input_error, "x[" + std::to_string(i) + "]");
  }

  // ---- every trainable parameter ------------------------------------------------------------
  for (size_t k = 0; k < params.size(); ++k) {
    auto& [name, p] = params[k];
    if (!p->requires_grad) continue;
    const std::vector<float> value = p->value.to_vector();
    const std::vector<float> grad = p->grad.to_vector();
    for (int64_t i = 0; i < p->value.numel(); ++i) {
      auto d = difference(value[i], [&, k](float v) {
        return loss_at(x, [&](nn::Module& m) {
          nn::Parameter* q = m.named_parameters()[k].second;
          detail::set_element(q->value, i, v);
        });
      });
      if (d.kink) {
        ++res.skipped;
        continue;
      }
      compare(grad[i] - kPrefill, d.numeric, res.max_param_error, name + "[" + std::to_string(i) + "]");
    }
  }
  return res;
}

}  // namespace dpx::testing
