// Sequential: naming as torchvision's nn.Sequential, and a small CNN checked end to end —
// conv, batch norm, ReLU, max-pool, adaptive pool, flatten, dropout, linear — through
// CrossEntropyLoss, with the gradient checker skipping ReLU and max-pool kinks.
#include <doctest/doctest.h>

#include <set>

#include "kernels/op_profile.hpp"
#include "layers/layers.hpp"
#include "tests/common/compare.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {
// A module whose output is the loss (times kScale, so that gradients are of order 1 and the
// checker's scale max(|a|, |n|, 1) is a relative one): puts CrossEntropyLoss under the checker.
class WithCrossEntropy : public nn::Cloneable<WithCrossEntropy> {
 public:
  static constexpr float kScale = 20.f;
  WithCrossEntropy(std::unique_ptr<nn::Module> net, Tensor labels) : labels_(std::move(labels)) {
    add_module("net", std::move(net));
  }
  Tensor forward(Context& ctx, const Tensor& x) override {
    Tensor loss = loss_.forward_tensor(ctx, child(0).forward(ctx, x), labels_);
    ops::scale(ctx, loss, kScale);
    return loss;
  }
  Tensor backward(Context& ctx, const Tensor& dy) override {
    return child(0).backward(ctx, loss_.backward(ctx, kScale * dy.item()));
  }
  std::string type_name() const override { return "WithCrossEntropy"; }

 private:
  Tensor labels_;  // (N) i64
  nn::CrossEntropyLoss loss_;
};

std::unique_ptr<nn::Sequential> small_cnn(Rng& rng) {
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(1, 3, 3, rng, 1, 1);
  net->emplace<nn::BatchNorm2d>(3);
  net->emplace<nn::ReLU>();
  net->emplace<nn::MaxPool2d>(2);
  net->emplace<nn::Conv2d>(3, 4, 3, rng, 1, 1);
  net->emplace<nn::ReLU>();
  net->emplace<nn::AdaptiveAvgPool2d>(2, 2);
  net->emplace<nn::Flatten>();
  net->emplace<nn::Dropout>(0.25f, rng);
  net->emplace<nn::Linear>(16, 3, rng);
  return net;
}

// Perturbing one weight of the first conv moves every unit of its channel, and some of those
// hundreds of ReLU inputs lie within eps of 0: kinks are dense. eps = 3e-3 keeps the share of
// skipped points near 13% while roundoff (~1e-5 in the loss / 2 eps) stays well below
// the 5e-3 tolerance; at 1e-2 a third of the points would be skipped.
GradCheckOptions cnn_options() {
  GradCheckOptions opt;
  opt.eps = 3e-3f;
  opt.skip_kinks = true;
  return opt;
}
// A copy of net in the given mode, computing dx too.
nn::Model prepared(const nn::Module& net, bool training) {
  nn::Model m(net.clone());
  m.root().train(training);
  m.root().set_input_grad_needed(true);
  return m;
}

// Forward and backward through m's children one by one, none folded into another.
Tensor forward_alone(Context& ctx, nn::Model& m, Tensor x) {
  for (size_t i = 0; i < m.root().num_children(); ++i) x = m.root().child(i).forward(ctx, x);
  return x;
}
Tensor backward_alone(Context& ctx, nn::Model& m, Tensor dy) {
  for (size_t i = m.root().num_children(); i-- > 0;) dy = m.root().child(i).backward(ctx, dy);
  return dy;
}

// Every parameter gradient and buffer of a and b, bit for bit.
void check_same_grads_and_buffers(nn::Model& a, nn::Model& b) {
  auto pa = a.root().named_parameters(), pb = b.root().named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    CAPTURE(pa[i].first);
    CHECK(bitwise_equal(pa[i].second->grad, pb[i].second->grad));
  }
  auto ba = a.root().named_buffers(), bb = b.root().named_buffers();
  REQUIRE(ba.size() == bb.size());
  for (size_t i = 0; i < ba.size(); ++i) CHECK(bitwise_equal(*ba[i].second, *bb[i].second));
}

// A network three times over for the half-precision maps' tests: run with bf16 maps (`half`, under
// `ctx`), with fp32 ones (`f32`, under `ctx32`), and child by child (`plain`), in one mode.
struct HalfMapsRun {
  nn::Model half, f32, plain;
  Context ctx = Context::cpu(2), ctx32 = Context::cpu(2);
  HalfMapsRun(const nn::Module& net, bool training)
      : half(prepared(net, training)), f32(prepared(net, training)), plain(prepared(net, training)) {
    ctx.compute = DType::bf16;
  }
};
// t rounded to bf16, in fp32: a half map's values.
Tensor bf16_rounded(const Tensor& t) { return t.cast(DType::bf16).cast(DType::f32); }

// The gradient dtypes nn::backward_dx_dtype names for m's children: bf16 for those in `half_dx`.
void check_half_dx(const Context& ctx, nn::Model& m, const std::set<size_t>& half_dx) {
  for (size_t i = 0; i < m.root().num_children(); ++i) {
    CAPTURE(i);
    CHECK(nn::backward_dx_dtype(ctx, m.root(), 0, i) == (half_dx.count(i) ? DType::bf16 : DType::f32));
  }
}

// The children of `plain` backward one by one from dy down to child 1 (child i in ctx_of(i)), the
// gradients of those in `rounded` rounded to bf16: the reference for a half-precision run.
template <class CtxOf>
Tensor backward_rounded(nn::Model& plain, Tensor g, const std::set<size_t>& rounded, CtxOf ctx_of) {
  auto& kids = plain.root();
  for (size_t i = kids.num_children(); i-- > 1;) {
    g = kids.child(i).backward(ctx_of(i), g);
    if (rounded.count(i)) g = bf16_rounded(g);
  }
  return g;
}
}  // namespace

TEST_CASE("Sequential: children named by position or by name, as torchvision") {
  Rng rng(1);
  nn::Sequential seq(std::make_unique<nn::Linear>(4, 8, rng), std::make_unique<nn::ReLU>());
  seq.add("fc", std::make_unique<nn::Linear>(8, 2, rng, false));
  seq.add(std::make_unique<nn::Dropout>(0.5f, rng));
  CHECK(seq.size() == 4);
  std::vector<std::string> names;
  for (auto& [name, p] : seq.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "fc.weight"});
  CHECK(seq.describe() == "Sequential(0: Linear, 1: ReLU, fc: Linear, 3: Dropout)");
  CHECK_THROWS_WITH_AS(seq.add("fc", std::make_unique<nn::ReLU>()), doctest::Contains("already exists"), dpx::Error);
  CHECK_THROWS_WITH_AS(seq.add("a.b", std::make_unique<nn::ReLU>()), doctest::Contains("no '.'"), dpx::Error);
  // A child added to a sequential in eval mode joins it in eval mode.
  seq.eval();
  auto& late = seq.emplace<nn::Dropout>(0.5f, rng);
  CHECK_FALSE(late.training());
}

TEST_CASE("Sequential: an MLP's gradients, and an empty one is the identity") {
  Context ctx = Context::cpu();
  Rng rng(2);
  nn::Sequential mlp(std::make_unique<nn::Linear>(3, 5, rng), std::make_unique<nn::ReLU>(),
                     std::make_unique<nn::Linear>(5, 2, rng));
  GradCheckOptions opt;
  opt.skip_kinks = true;
  auto r = gradcheck(ctx, mlp, uniform({4, 3}, 3), opt);
  CHECK_MESSAGE(r.ok(), r.summary());
  CHECK(r.skipped * 20 <= r.checked);
  nn::Sequential empty;
  Tensor x = uniform({2, 2}, 4);
  CHECK(empty.forward(ctx, x).raw() == x.raw());
  CHECK_GRADIENTS(ctx, empty, x);
}

TEST_CASE("Sequential: a small CNN end to end through CrossEntropyLoss (training mode)") {
  Context ctx = Context::cpu();
  Rng rng(3);
  WithCrossEntropy head(small_cnn(rng), labels_from({0, 2, 1, 2}));
  auto r = gradcheck(ctx, head, uniform({4, 1, 6, 6}, 4), cnn_options());
  CHECK_MESSAGE(r.ok(), r.summary());
  // Every input and parameter element: 144 + 30 + 6 + 112 + 51, at most a fifth skipped.
  CHECK(r.checked + r.skipped == 343);
  CHECK(r.skipped * 5 <= r.checked + r.skipped);
  if (std::getenv("DPX_GRADCHECK_VERBOSE")) MESSAGE("small CNN + CrossEntropyLoss: " << r.summary());
}

TEST_CASE("Sequential: the same CNN in eval mode (running statistics, no dropout)") {
  Context ctx = Context::cpu();
  Rng rng(5);
  WithCrossEntropy head(small_cnn(rng), labels_from({1, 0, 2}));
  Tensor x = uniform({3, 1, 6, 6}, 6);
  head.forward(ctx, x);  // one training step gives BN non-trivial running statistics
  head.eval();
  auto r = gradcheck(ctx, head, x, cnn_options());
  CHECK_MESSAGE(r.ok(), r.summary());
  CHECK(r.skipped * 5 <= r.checked + r.skipped);
  if (std::getenv("DPX_GRADCHECK_VERBOSE")) MESSAGE("small CNN + CrossEntropyLoss, eval: " << r.summary());
}

TEST_CASE("Sequential: a conv + ReLU pair is one conv2d_forward with the ReLU folded in, no relu_forward") {
  namespace profile = dpx::ops::profile;
  Rng rng(3);
  nn::Sequential net;
  net.emplace<nn::Conv2d>(2, 4, 3, rng, 1, 1);
  net.emplace<nn::ReLU>();
  net.emplace<nn::Conv2d>(4, 4, 3, rng, 1, 1);  // alone: no ReLU after it
  Context ctx = Context::cpu(1);
  profile::Counting counting(true);
  profile::reset();
  profile::set_enabled(true);
  profile::set_by_shape(true);
  net.forward(ctx, uniform({2, 2, 5, 5}, 4));
  const std::vector<profile::OpStats> stats = profile::snapshot();
  profile::set_by_shape(false);
  profile::set_enabled(false);
  profile::reset();
  int convs = 0, fused = 0, relus = 0;
  for (const auto& s : stats) {
    convs += s.name == "conv2d_forward" ? static_cast<int>(s.calls) : 0;
    fused += s.name == "conv2d_forward" && s.shape.ends_with(" relu") ? static_cast<int>(s.calls) : 0;
    relus += s.name == "relu_forward" ? static_cast<int>(s.calls) : 0;
  }
  CHECK(convs == 2);
  CHECK(fused == 1);
  CHECK(relus == 0);
}

TEST_CASE("Sequential: batch norm or conv + ReLU run as one pass give the layers' own values and gradients") {
  // The same network run by Sequential's forward and backward (which fuse each BatchNorm2d/1d ->
  // ReLU and Conv2d -> ReLU pair) and child by child, in training and in eval mode: outputs,
  // every parameter gradient and dx bitwise equal, so the fusion changes only how many passes
  // are made. The convolutions before a ReLU: with a bias, without, and depthwise.
  Rng rng(7);
  auto fused_net = std::make_unique<nn::Sequential>();
  fused_net->emplace<nn::Conv2d>(2, 4, 3, rng, 1, 1);
  fused_net->emplace<nn::BatchNorm2d>(4);
  fused_net->emplace<nn::ReLU>();
  fused_net->emplace<nn::Conv2d>(4, 4, 3, rng, 1, 1);
  fused_net->emplace<nn::BatchNorm2d>(4);
  fused_net->emplace<nn::ReLU>();
  fused_net->emplace<nn::Conv2d>(4, 4, 3, rng, 1, 1);
  fused_net->emplace<nn::ReLU>();
  fused_net->emplace<nn::Conv2d>(4, 4, nn::Conv2dOptions{.kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1,
                                                         .bias = false}, rng);
  fused_net->emplace<nn::ReLU>();
  fused_net->emplace<nn::Conv2d>(4, 4, 3, rng, 1, 1, 1, /*groups=*/4);
  fused_net->emplace<nn::ReLU>();
  fused_net->emplace<nn::Flatten>();
  fused_net->emplace<nn::BatchNorm1d>(64);
  fused_net->emplace<nn::ReLU>();
  fused_net->emplace<nn::Linear>(64, 3, rng);
  for (bool training : {true, false}) {
    CAPTURE(training);
    nn::Model fused = prepared(*fused_net, training), plain = prepared(*fused_net, training);
    Context ctx = Context::cpu(2);
    Tensor x = uniform({5, 2, 4, 4}, 8, -1.f, 1.f), dy = uniform({5, 3}, 9);
    CHECK(bitwise_equal(fused.forward(ctx, x), forward_alone(ctx, plain, x)));
    fused.zero_grad(ctx);
    plain.zero_grad(ctx);
    CHECK(bitwise_equal(fused.backward(ctx, dy), backward_alone(ctx, plain, dy)));
    check_same_grads_and_buffers(fused, plain);
  }
}

TEST_CASE("Sequential: batch norm + SiLU run as one pass: the layers' values and gradients, one map fewer kept") {
  // Each BatchNorm2d/1d -> SiLU pair is one batch_norm_forward_train marked silu (no silu_forward)
  // and one batch_norm_backward (no silu_backward), and no tensor keeps the values before the
  // SiLU: Sequential's forward holds one map per pair less than the children run one by one. The
  // values and gradients are theirs bit for bit (the backward recomputes the SiLU's input as the
  // forward formed it), in training and in eval mode.
  namespace profile = dpx::ops::profile;
  Rng rng(11);
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(2, 4, 3, rng, 1, 1);
  net->emplace<nn::BatchNorm2d>(4);
  net->emplace<nn::SiLU>();
  net->emplace<nn::Conv2d>(4, 4, 1, rng);
  net->emplace<nn::BatchNorm2d>(4);
  net->emplace<nn::SiLU>();
  net->emplace<nn::Flatten>();
  net->emplace<nn::BatchNorm1d>(64);
  net->emplace<nn::SiLU>();
  net->emplace<nn::Linear>(64, 3, rng);
  const int64_t kept_less = 3 * 5 * 64 * int64_t(sizeof(float));  // three (5, 64)-value maps
  for (bool training : {true, false}) {
    CAPTURE(training);
    nn::Model fused = prepared(*net, training), plain = prepared(*net, training);
    Context ctx = Context::cpu(2);
    Tensor x = uniform({5, 2, 4, 4}, 12, -1.f, 1.f), dy = uniform({5, 3}, 13);

    profile::Counting counting(true);
    profile::reset();
    profile::set_enabled(true);
    profile::set_by_shape(true);
    const KeptForward kept_fused = forward_keeping(ctx, fused, x);
    const Tensor& y_fused = kept_fused.y;
    fused.zero_grad(ctx);
    Tensor dx_fused = fused.backward(ctx, dy);
    const std::vector<profile::OpStats> stats = profile::snapshot();
    profile::set_by_shape(false);
    profile::set_enabled(false);
    profile::reset();
    int silu_ops = 0, bn_silu = 0;
    for (const auto& s : stats) {
      silu_ops += s.name == "silu_forward" || s.name == "silu_backward" ? static_cast<int>(s.calls) : 0;
      bn_silu += s.name.starts_with("batch_norm_forward") && s.shape.ends_with(" silu") ? static_cast<int>(s.calls) : 0;
    }
    CHECK(silu_ops == (training ? 0 : 3));  // eval's backward is composed: silu_backward, then the affine map's
    CHECK(bn_silu == 3);

    const size_t before_plain = host_bytes_in_use();
    const Tensor y_plain = forward_alone(ctx, plain, x);
    const auto plain_bytes = static_cast<int64_t>(host_bytes_in_use() - before_plain);
    CHECK(plain_bytes - kept_fused.bytes == kept_less);
    CHECK(bitwise_equal(y_fused, y_plain));
    plain.zero_grad(ctx);
    CHECK(bitwise_equal(dx_fused, backward_alone(ctx, plain, dy)));
    check_same_grads_and_buffers(fused, plain);
  }
}

TEST_CASE("Sequential: under --precision bf16 convolutions, batch norms and ReLUs hand each other bf16 maps") {
  // Conv2d without bias -> BatchNorm2d: the convolution's output is bf16 (ops.def, "half-precision
  // maps"), which the batch norm keeps (half the bytes of an fp32 map), and in training its
  // gradient comes back to the convolution in bf16. BatchNorm2d + ReLU -> Conv2d: the ReLU's
  // output is bf16, kept once for the ReLU's backward and the convolution's; so is the output of
  // a Conv2d + ReLU (one pass) -> Conv2d, its bias and ReLU applied in place, and that ReLU's
  // gradient for the convolution before it (whose bias gradient then sums the rounded values), and
  // a convolution's gradient for the batch norm + ReLU before it (read widened by their backward).
  // The values and gradients are the layers' run one by one with those maps rounded to bf16 and,
  // in training, the batch norms' gradients too, bit for bit (the host computes in fp32 otherwise).
  // A convolution with a bias before a batch norm adds it to the bf16 output (rounded once on the
  // host); one before something else keeps an fp32 output.
  Rng rng(21);
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(2, 4, 3, rng, 1, 1, 1, 1, /*bias=*/false);  // 0: bf16 output
  net->emplace<nn::BatchNorm2d>(4);
  net->emplace<nn::ReLU>();                                            // 2: bf16 output
  net->emplace<nn::Conv2d>(4, 4, 1, rng);                              // 3: biased, bf16 output
  net->emplace<nn::BatchNorm2d>(4);
  net->emplace<nn::ReLU>();                                            // 5: bf16 output
  net->emplace<nn::Conv2d>(4, 4, 3, rng, 1, 1);                        // 6 + 7, one pass:
  net->emplace<nn::ReLU>();                                            // 7: bf16 output
  net->emplace<nn::Conv2d>(4, 3, 1, rng, 1, 0, 1, 1, /*bias=*/false);  // before a pool: fp32
  net->emplace<nn::AdaptiveAvgPool2d>(1, 1);
  net->emplace<nn::Flatten>();
  for (bool training : {true, false}) {
    CAPTURE(training);
    HalfMapsRun run(*net, training);
    auto& [half, f32, plain, ctx, ctx32] = run;
    const Tensor x = uniform({5, 2, 4, 4}, 22, -1.f, 1.f), dy = uniform({5, 3}, 23);

    const KeptForward with_half = forward_keeping(ctx, half, x), with_f32 = forward_keeping(ctx32, f32, x);
    const Tensor& y_half = with_half.y;
    CHECK(with_f32.bytes - with_half.bytes == 5 * 5 * 4 * 4 * 4 * 2);  // five (5, 4, 4, 4) maps in 2 bytes, not 4
    // Context::half_maps off (DPX_HALF_MAPS=0): every map fp32 again, the host's values fp32's.
    nn::Model off = prepared(*net, training);
    Context ctx_off = ctx;
    ctx_off.half_maps = false;
    const KeptForward with_off = forward_keeping(ctx_off, off, x);
    CHECK(with_off.bytes == with_f32.bytes);
    CHECK(bitwise_equal(with_off.y, with_f32.y));

    // The children one by one, the bf16 maps rounded (and in training the first one's gradient).
    auto& kids = plain.root();
    Tensor h = x;
    for (size_t i = 0; i < kids.num_children(); ++i) {
      h = kids.child(i).forward(ctx32, h);
      if (i == 0 || i == 2 || i == 3 || i == 5 || i == 7) h = bf16_rounded(h);
    }
    CHECK(bitwise_equal(y_half, h));
    // Handed back in bf16 (nn::backward_dx_dtype): the gradients of the convolutions after a batch
    // norm + ReLU (3, 6) or a ReLU (8), and of the ReLU after a convolution (7).
    const std::set<size_t> half_dx = {3, 6, 7, 8};
    check_half_dx(ctx, half, half_dx);
    half.zero_grad(ctx);
    plain.zero_grad(ctx32);
    const Tensor dx_half = half.backward(ctx, dy);
    // Those gradients rounded, and in training the batch norm's (its x's dtype) too.
    std::set<size_t> rounded = half_dx;
    if (training) rounded.insert(4);
    Tensor g = backward_rounded(plain, dy, rounded, [&](size_t) -> Context& { return ctx32; });
    CHECK(g.dtype() == DType::f32);
    if (training) g = bf16_rounded(g);  // eval's composed backward hands back fp32
    CHECK(bitwise_equal(dx_half, kids.child(0).backward(ctx32, g)));
    check_same_grads_and_buffers(half, plain);
  }
}

namespace {
// A module of class Base that notes the dtype of the dy its backward(ctx, dy) is given
// (nn::backward_children calls it for a ReLU or pool first in its range, or one that is not the
// class itself: nn::backward_dx_dtype).
template <class Base>
class DyProbe : public Base {
 public:
  template <class... A>
  explicit DyProbe(DType* seen, A&&... args) : Base(std::forward<A>(args)...), seen_(seen) {}
  using Base::backward;
  Tensor backward(Context& ctx, const Tensor& dy) override {
    *seen_ = dy.dtype();
    return Base::backward(ctx, dy);
  }
  std::unique_ptr<nn::Module> clone() const override { return std::make_unique<DyProbe>(*this); }

 private:
  DType* seen_;
};

// `net`, a probe (child 0) and then a Conv2d, under bf16 half maps: the convolution's dx, the
// probe's dy, is bf16 (cuDNN's result as it is, which the fp32 path widened: ops.def,
// "half-precision maps"), and the values are the layers' one by one with that gradient rounded
// (and the probe's output too where it is the convolution's bf16 operand: `output_half`); with
// Context::half_maps off, or in fp32, the probe sees fp32.
void check_probe_sees_half_dy(nn::Module& net, DType& seen, const Tensor& x, const Tensor& dy, bool output_half) {
  for (bool training : {true, false}) {
    CAPTURE(training);
    HalfMapsRun run(net, training);
    auto& [half, f32, plain, ctx, ctx32] = run;
    half.forward(ctx, x);
    CHECK(nn::backward_dx_dtype(ctx, half.root(), 0, 1) == DType::bf16);
    const Tensor dx_half = half.backward(ctx, dy);
    CHECK(seen == DType::bf16);
    CHECK(dx_half.dtype() == DType::f32);
    const Tensor h = plain.root().child(0).forward(ctx32, x);
    plain.root().child(1).forward(ctx32, output_half ? bf16_rounded(h) : h);
    Tensor g = bf16_rounded(plain.root().child(1).backward(ctx32, dy));
    CHECK(bitwise_equal(dx_half, plain.root().child(0).backward(ctx32, g)));
    check_same_grads_and_buffers(half, plain);

    Context off = ctx;
    off.half_maps = false;
    for (Context* c : {&off, &ctx32}) {
      seen = DType::i32;
      nn::Model m = prepared(net, training);
      m.forward(*c, x);
      CHECK(nn::backward_dx_dtype(*c, m.root(), 0, 1) == DType::f32);
      m.backward(*c, dy);
      CHECK(seen == DType::f32);
    }
  }
}
}  // namespace

TEST_CASE("Sequential: under --precision bf16 a convolution hands the ReLU before it a bf16 gradient") {
  // ReLU -> Conv2d. (In a chain conv -> ReLU -> conv the ReLU's dx was rounded already, and
  // rounding commutes with its mask: the values there are the same as before, only the map is half
  // the bytes.)
  Rng rng(41);
  DType seen = DType::i32;
  auto net = std::make_unique<nn::Sequential>();
  net->add(std::make_unique<DyProbe<nn::ReLU>>(&seen));
  net->emplace<nn::Conv2d>(3, 4, 3, rng, 1, 1);
  check_probe_sees_half_dy(*net, seen, uniform({2, 3, 5, 5}, 42, -1.f, 1.f), uniform({2, 4, 5, 5}, 43), false);
}

TEST_CASE("Sequential: under --precision bf16 a convolution hands the max pool before it a bf16 gradient") {
  // MaxPool2d -> Conv2d: the pool's overlapping windows (3x3, stride 2) sum two or four of the
  // rounded values at some elements, which fails where the pool summed the fp32 gradient; its
  // output, the convolution's operand, is bf16 too (forward_children).
  Rng rng(51);
  DType seen = DType::i32;
  auto net = std::make_unique<nn::Sequential>();
  net->add(std::make_unique<DyProbe<nn::MaxPool2d>>(&seen, 3, 2, 1));
  net->emplace<nn::Conv2d>(3, 4, 3, rng, 1, 1);
  const Tensor x = uniform({2, 3, 9, 9}, 52, -1.f, 1.f), dy = uniform({2, 4, 5, 5}, 53);
  check_probe_sees_half_dy(*net, seen, x, dy, true);
  // After a convolution and its ReLU a pool's dx would be bf16 too, but not a subclass's: its
  // backward(ctx, dy) override still runs (given the next convolution's bf16 dy), and its dx is fp32.
  auto chain = std::make_unique<nn::Sequential>();
  chain->emplace<nn::Conv2d>(3, 3, 3, rng, 1, 1);
  chain->emplace<nn::ReLU>();
  chain->add(std::make_unique<DyProbe<nn::MaxPool2d>>(&seen, 3, 2, 1));
  chain->emplace<nn::Conv2d>(3, 4, 3, rng, 1, 1);
  HalfMapsRun run(*chain, true);
  auto& [half, f32, plain, ctx, ctx32] = run;
  half.forward(ctx, x);
  CHECK(nn::backward_dx_dtype(ctx, half.root(), 0, 2) == DType::f32);
  CHECK(nn::backward_dx_dtype(ctx, half.root(), 0, 3) == DType::bf16);
  seen = DType::i32;
  half.backward(ctx, dy);
  CHECK(seen == DType::bf16);
}

TEST_CASE("Sequential: under --precision bf16 a convolution hands a batch norm before it, alone or with its SiLU, a bf16 gradient") {
  // Conv2d -> BatchNorm2d -> Conv2d -> BatchNorm2d + SiLU (one pass) -> Conv2d: the gradients of
  // the convolutions after a batch norm (2) and after the pair (5) are bf16 (cuDNN's result as it
  // is), read widened by the batch norm's backward. The values are the layers' one by one with
  // the maps and gradients rounded where the half-precision maps are (the batch norms' outputs
  // alone stay fp32; their dx has their x's dtype, bf16 after a convolution, in training).
  Rng rng(61);
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(2, 4, 3, rng, 1, 1, 1, 1, /*bias=*/false);  // 0: bf16 output
  net->emplace<nn::BatchNorm2d>(4);                                    // 1: fp32 output
  net->emplace<nn::Conv2d>(4, 4, 3, rng, 1, 1, 1, 1, /*bias=*/false);  // 2: bf16 output, bf16 dx
  net->emplace<nn::BatchNorm2d>(4);                                    // 3 + 4, one pass:
  net->emplace<nn::SiLU>();                                            // 4: bf16 output
  net->emplace<nn::Conv2d>(4, 3, 1, rng);                              // 5: fp32 output, bf16 dx
  net->emplace<nn::AdaptiveAvgPool2d>(1, 1);
  net->emplace<nn::Flatten>();
  for (bool training : {true, false}) {
    CAPTURE(training);
    HalfMapsRun run(*net, training);
    auto& [half, f32, plain, ctx, ctx32] = run;
    const Tensor x = uniform({5, 2, 4, 4}, 62, -1.f, 1.f), dy = uniform({5, 3}, 63);
    const Tensor y_half = half.forward(ctx, x);
    auto& kids = plain.root();
    Tensor h = x;
    for (size_t i = 0; i < kids.num_children(); ++i) {
      h = kids.child(i).forward(ctx32, h);
      if (i == 0 || i == 2 || i == 4) h = bf16_rounded(h);
    }
    CHECK(bitwise_equal(y_half, h));
    const std::set<size_t> half_dx = {2, 5};
    check_half_dx(ctx, half, half_dx);
    half.zero_grad(ctx);
    plain.zero_grad(ctx32);
    const Tensor dx_half = half.backward(ctx, dy);
    // Those gradients rounded, and in training the batch norms' dx (their x's dtype; eval's
    // composed backward hands back fp32).
    std::set<size_t> rounded = half_dx;
    if (training) rounded.insert({1, 3});
    Tensor g = backward_rounded(plain, dy, rounded, [&](size_t) -> Context& { return ctx32; });
    CHECK(bitwise_equal(dx_half, kids.child(0).backward(ctx32, g)));
    check_same_grads_and_buffers(half, plain);
  }
}

TEST_CASE("Sequential: under --precision bf16 a max pool between activated maps and a convolution pools bf16 maps") {
  // Conv2d + ReLU -> MaxPool2d -> Conv2d (VGG, AlexNet), BatchNorm2d + ReLU -> MaxPool2d -> a
  // ResNet block (ResNet's stem): the activated output and the pooled one are bf16 (ops.def,
  // "half-precision maps"), the pool rounding nothing more (rounding is monotone). A pool before
  // something that takes fp32 (here the average pool) leaves its maps fp32. In backward the
  // gradients named by backward_dx_dtype are bf16 (below). The values and gradients are the
  // layers' run one by one with those maps rounded.
  Rng rng(31);
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(2, 4, 3, rng, 1, 1);                        // 0 + 1, one pass:
  net->emplace<nn::ReLU>();                                            // 1: bf16 output
  net->emplace<nn::MaxPool2d>(2, 2);                                   // 2: bf16 output
  net->emplace<nn::Conv2d>(4, 4, 3, rng, 1, 1, 1, 1, /*bias=*/false);  // 3: bf16 output
  net->emplace<nn::BatchNorm2d>(4);
  net->emplace<nn::ReLU>();                                            // 5: bf16 output
  net->emplace<nn::MaxPool2d>(3, 1, 1);                                // 6: bf16 output
  net->emplace<nn::BasicBlock>(4, 4, 1, rng);                          // 7: takes it
  net->emplace<nn::Conv2d>(4, 3, 3, rng, 1, 1);                        // 8 + 9, one pass:
  net->emplace<nn::ReLU>();                                            // 9: fp32 output
  net->emplace<nn::MaxPool2d>(2, 2);                                   // 10: fp32, fp32
  net->emplace<nn::AdaptiveAvgPool2d>(1, 1);
  net->emplace<nn::Flatten>();
  for (bool training : {true, false}) {
    CAPTURE(training);
    HalfMapsRun run(*net, training);
    auto& [half, f32, plain, ctx, ctx32] = run;
    const Tensor x = uniform({5, 2, 8, 8}, 32, -1.f, 1.f), dy = uniform({5, 3}, 33);

    const KeptForward with_half = forward_keeping(ctx, half, x), with_f32 = forward_keeping(ctx32, f32, x);
    // Kept in 2 bytes, not 4: the first ReLU's (5, 4, 8, 8) output; the pooled (5, 4, 4, 4) map
    // the convolution keeps, its output the batch norm keeps, and the second ReLU's output; the
    // second pool's output, the block's input; and the block's own three (its convolutions'
    // outputs and the map between them).
    CHECK(with_f32.bytes - with_half.bytes == 2 * (5 * 4 * 8 * 8 + 4 * 5 * 4 * 4 * 4) + 2 * 3 * 5 * 4 * 4 * 4);

    // The block runs under bf16 both ways: its own maps are rounded alike (what it is given,
    // bf16 or the same values in fp32, makes no difference on the host).
    auto& kids = plain.root();
    const auto ctx_of = [&](size_t i) -> Context& { return i == 7 ? ctx : ctx32; };
    Tensor h = x;
    for (size_t i = 0; i < kids.num_children(); ++i) {
      h = kids.child(i).forward(ctx_of(i), h);
      if (i == 1 || i == 3 || i == 5) h = bf16_rounded(h);
    }
    CHECK(bitwise_equal(with_half.y, h));
    // In backward, bf16: the ReLUs' gradients for the convolution before each (children 9 and 1),
    // the pools' before those ReLUs (10 and 2), and the gradient of the convolution after a pool
    // (3); not the pool after the batch norm's ReLU (6: the batch norm's backward writes that
    // ReLU's dx in fp32, so rounding the pool's sums would change values), nor the convolution
    // after a block (8).
    const std::set<size_t> half_dx = {1, 2, 3, 9, 10};
    check_half_dx(ctx, half, half_dx);
    check_half_dx(ctx32, f32, {});
    half.zero_grad(ctx);
    plain.zero_grad(ctx32);
    const Tensor dx_half = half.backward(ctx, dy);
    // Those gradients rounded, and in training the batch norm's dx (child 4) too.
    std::set<size_t> rounded = half_dx;
    if (training) rounded.insert(4);
    const Tensor g = backward_rounded(plain, dy, rounded, ctx_of);
    CHECK(bitwise_equal(dx_half, kids.child(0).backward(ctx_of(0), g)));
    check_same_grads_and_buffers(half, plain);
  }
}

TEST_CASE("Fire under --precision bf16: the squeeze output its two expand convolutions read is bf16") {
  Rng rng(41);
  auto fire = std::make_unique<nn::Fire>(4, 3, 2, 5, rng);
  const Tensor x = uniform({2, 4, 5, 5}, 42, -1.f, 1.f);
  HalfMapsRun run(*fire, true);
  auto& [half, f32, plain, ctx, ctx32] = run;
  const KeptForward with_half = forward_keeping(ctx, half, x), with_f32 = forward_keeping(ctx32, f32, x);
  CHECK(with_f32.bytes - with_half.bytes == 2 * 2 * 3 * 5 * 5);  // the (2, 3, 5, 5) squeeze map
  // By hand: the squeeze and its ReLU, rounded, then each expand convolution and its ReLU.
  auto& kids = plain.root();
  const Tensor s = bf16_rounded(kids.child(1).forward(ctx32, kids.child(0).forward(ctx32, x)));
  const Tensor a = kids.child(3).forward(ctx32, kids.child(2).forward(ctx32, s));
  const Tensor b = kids.child(5).forward(ctx32, kids.child(4).forward(ctx32, s));
  const Tensor& y = with_half.y;
  REQUIRE(y.shape() == Shape{2, 7, 5, 5});
  int64_t mismatched = 0;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 7; ++c)
      for (int64_t i = 0; i < 25; ++i) {
        const float want = c < 2 ? a.data<float>()[(n * 2 + c) * 25 + i] : b.data<float>()[(n * 5 + c - 2) * 25 + i];
        mismatched += y.data<float>()[(n * 7 + c) * 25 + i] != want;
      }
  CHECK(mismatched == 0);
  // And its gradients, from the bf16 squeeze map and the ReLUs' bf16 gradients (each
  // convolution's operand), near fp32's.
  const Tensor dy = uniform(y.shape(), 43);
  half.zero_grad(ctx);
  f32.zero_grad(ctx32);
  const Tensor dx_half = half.backward(ctx, dy), dx32 = f32.backward(ctx32, dy);
  CHECK(dx_half.dtype() == DType::f32);
  CHECK(norm_rel_diff(dx_half, dx32) > 0);
  CHECK(norm_rel_diff(dx_half, dx32) < 0.01);
  const Tensor dw_half = half.flat_grads().clone(), dw32 = f32.flat_grads().clone();
  CHECK(norm_rel_diff(dw_half, dw32) > 0);
  CHECK(norm_rel_diff(dw_half, dw32) < 0.01);
}

// EfficientNet's blocks are Sequentials of Sequentials (conv, batch norm, SiLU): under --precision
// bf16 the maps between them are chosen as in the one flat chain (a Sequential counts as its first
// child where it is read, as its last where it reads a gradient: nn::backward_dx_dtype), so nesting
// changes nothing: the same values, gradients, buffers and kept bytes, bit for bit, in training
// and in eval; and the map between the two, and its gradient, are bf16.
TEST_CASE("Sequential: nested Sequentials hand each other bf16 maps as the flat chain does") {
  Rng rng(61);
  nn::Sequential flat;
  flat.emplace<nn::Conv2d>(3, 6, 1, rng, 1, 0, 1, 1, /*bias=*/false);
  flat.emplace<nn::BatchNorm2d>(6);
  flat.emplace<nn::SiLU>();
  flat.emplace<nn::Conv2d>(6, 6, 3, rng, 1, 1, 1, /*groups=*/6, /*bias=*/false);  // depthwise
  flat.emplace<nn::BatchNorm2d>(6);
  flat.emplace<nn::SiLU>();
  nn::Sequential nested;
  for (size_t first : {0, 3}) {
    auto inner = std::make_unique<nn::Sequential>();
    for (size_t i = first; i < first + 3; ++i) inner->add(flat.child(i).clone());
    nested.add(std::move(inner));
  }
  const Tensor x = uniform({2, 3, 5, 5}, 62, -1.f, 1.f), dy = uniform({2, 6, 5, 5}, 63);
  for (bool training : {true, false}) {
    CAPTURE(training);
    Context ctx = Context::cpu(2);
    ctx.compute = DType::bf16;
    nn::Model a = prepared(flat, training), b = prepared(nested, training);
    const KeptForward fa = forward_keeping(ctx, a, x), fb = forward_keeping(ctx, b, x);
    // (The rule reads whether each batch norm ran with its SiLU as one: after a forward.)
    CHECK(nn::backward_dx_dtype(ctx, a.root(), 0, 3) == DType::bf16);
    CHECK(nn::backward_dx_dtype(ctx, b.root(), 0, 1) == DType::bf16);
    CHECK(bitwise_equal(fa.y, fb.y));
    CHECK(fa.bytes == fb.bytes);
    a.zero_grad(ctx);
    b.zero_grad(ctx);
    CHECK(bitwise_equal(a.backward(ctx, dy), b.backward(ctx, dy)));
    check_same_grads_and_buffers(a, b);
    // In fp32, or with DPX_HALF_MAPS=0, nothing is half.
    Context off = ctx;
    off.half_maps = false;
    CHECK(nn::backward_dx_dtype(off, b.root(), 0, 1) == DType::f32);
  }
}
