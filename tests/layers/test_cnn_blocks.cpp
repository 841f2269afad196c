// The composite blocks of the CNN families (BasicBlock, Bottleneck with its downsample, the dense
// layer, dense block and transition, Fire): gradient checks in training and eval mode, shapes,
// torchvision's child names, and the backward that skips dx when no caller needs it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "layers/layers.hpp"
#include "tests/common/compare.hpp"
#include "tests/layers/layer_test_util.hpp"

using namespace dpx;
using namespace dpx::testing;

namespace {

// Inside these blocks ReLUs follow batch norms, so kinks can fall anywhere: they are skipped
// where the differences see them. In training mode one input element moves every output of
// its channel (through the batch statistics), so many ReLU inputs move at once and more points
// sit near a kink, while the statistics' curvature also trips the detector: a batch of 4 at 6x6
// keeps the skipped points under a third (measured: 15-30 %); in eval mode under a fifth.
GradCheckResult check_block(Context& ctx, const nn::Module& block, const Tensor& x, bool train = true) {
  std::unique_ptr<nn::Module> m = block.clone();
  m->train(train);
  GradCheckOptions opt;
  opt.skip_kinks = true;
  opt.eps = 3e-3f;  // batch statistics curve: the truncation error falls as eps^2 (see MBConv's test)
  GradCheckResult r = gradcheck(ctx, *m, x, opt);
  CHECK_MESSAGE(r.ok(), block.describe() << ": " << r.summary());
  CHECK_MESSAGE(r.skipped * (train ? 2 : 4) < r.checked, block.describe() << ": " << r.summary());
  if (std::getenv("DPX_GRADCHECK_VERBOSE")) MESSAGE(block.describe() << ": " << r.summary());
  return r;
}

std::vector<std::string> names(nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(name);
  for (auto& [name, t] : m.named_buffers()) out.push_back(name);
  return out;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

TEST_CASE("BasicBlock: identity and downsample paths, gradients in training and eval mode") {
  Context ctx = Context::cpu(1);
  Rng rng(11);
  nn::BasicBlock same(4, 4, 1, rng);
  CHECK_FALSE(same.has_downsample());
  CHECK(same.describe() == "BasicBlock(4 -> 4, stride 1)");
  check_block(ctx, same, uniform({4, 4, 6, 6}, 1));
  check_block(ctx, same, uniform({2, 4, 5, 5}, 1), /*train=*/false);

  nn::BasicBlock down(3, 4, 2, rng);
  CHECK(down.has_downsample());
  auto keys = names(down);
  for (const char* k : {"conv1.weight", "bn1.running_mean", "conv2.weight", "bn2.num_batches_tracked",
                        "downsample.0.weight", "downsample.1.weight", "downsample.1.running_var"})
    CHECK_MESSAGE(has(keys, k), k);
  CHECK(keys.size() == 2 + 5 + 5 + 1 + 5);  // 3 convs, 3 batch norms (2 parameters, 3 buffers)
  Context c2 = Context::cpu(1);
  CHECK(down.clone()->forward(c2, uniform({1, 3, 5, 5}, 2)).shape() == Shape{1, 4, 3, 3});
  check_block(ctx, down, uniform({4, 3, 6, 6}, 3));
}

TEST_CASE("Bottleneck: 4x expansion, stride on the 3x3, downsample; gradients") {
  Context ctx = Context::cpu(1);
  Rng rng(12);
  nn::Bottleneck down(4, 2, 2, rng);  // 4 -> 8 channels, stride 2
  CHECK(down.out_channels() == 8);
  auto p = down.named_parameters();
  std::map<std::string, Shape> shapes;
  for (auto& [name, q] : p) shapes[name] = q->value.shape();
  CHECK(shapes["conv1.weight"] == Shape{2, 4, 1, 1});
  CHECK(shapes["conv2.weight"] == Shape{2, 2, 3, 3});
  CHECK(shapes["conv3.weight"] == Shape{8, 2, 1, 1});
  CHECK(shapes["downsample.0.weight"] == Shape{8, 4, 1, 1});
  CHECK(shapes["bn3.weight"] == Shape{8});
  check_block(ctx, down, uniform({4, 4, 6, 6}, 4));

  nn::Bottleneck same(8, 2, 1, rng);
  CHECK_FALSE(same.has_downsample());
  check_block(ctx, same, uniform({4, 8, 4, 4}, 5));
  check_block(ctx, same, uniform({2, 8, 3, 3}, 5), /*train=*/false);
  Context c1 = Context::cpu(1);
  CHECK_THROWS_WITH_AS(same.clone()->forward(c1, uniform({1, 4, 3, 3}, 6)),
                       "Bottleneck(8 -> 8, stride 1) given input (1, 4, 3, 3): expected (N, 8, H, W)", Error);
}

TEST_CASE("ResNet blocks: conv1 adds its dx into the identity path's gradient, no join pass of its own") {
  // The join's backward is conv2d_backward's DxMode::add (Module::backward_add): no axpy. The
  // values are the gradient checks' above; here, that the same gradients come out as the blocks
  // run child by child with the two paths' gradients summed apart.
  Context ctx = Context::cpu(2);
  Rng rng(17);
  nn::BasicBlock same(4, 4, 1, rng), down(3, 4, 2, rng);
  nn::Bottleneck deep(4, 2, 2, rng);
  for (nn::Module* block : std::initializer_list<nn::Module*>{&same, &down, &deep}) {
    CAPTURE(block->describe());
    const Tensor x = uniform({2, block == &same || block == &deep ? 4 : 3, 6, 6}, 18);
    auto m = block->clone();
    const Tensor y = m->forward(ctx, x), dy = uniform(y.shape(), 19);
    Tensor dx;
    const auto calls = op_calls([&] { dx = m->backward(ctx, dy); });
    CHECK(calls.count("axpy") == 0);
    CHECK(calls.at("conv2d_backward") == (block == &deep ? 4 : block == &down ? 3 : 2));
    CHECK(dx.shape() == x.shape());
    // The same block's children one by one (no pair run as one), the join apart: each path's
    // gradient on its own, then summed.
    auto apart = block->clone();
    const size_t n = apart->num_children(), branch = block == &same ? n - 1 : n - 2;
    Tensor h = x;
    for (size_t i = 0; i < branch; ++i) h = apart->child(i).forward(ctx, h);
    const Tensor identity = branch == n - 1 ? x : apart->child(branch).forward(ctx, x);
    Tensor sum = Tensor::empty(h.shape());
    ops::add(ctx, sum, h, identity);
    check_close(apart->child(n - 1).forward(ctx, sum).to_vector(), y.to_vector(), 1e-6);
    Tensor g = apart->child(n - 1).backward(ctx, dy);  // the final ReLU
    Tensor d_identity = branch == n - 1 ? g : apart->child(branch).backward(ctx, g);
    Tensor d_branch = g;
    for (size_t i = branch; i-- > 0;) d_branch = apart->child(i).backward(ctx, d_branch);
    Tensor want = Tensor::empty(x.shape());
    ops::add(ctx, want, d_branch, d_identity);
    dpx::testing::check_close(dx.to_vector(), want.to_vector(), 1e-5);
    auto pa = m->named_parameters(), pb = apart->named_parameters();
    for (size_t i = 0; i < pa.size(); ++i) {
      CAPTURE(pa[i].first);
      dpx::testing::check_close(pa[i].second->grad.to_vector(), pb[i].second->grad.to_vector(), 1e-5);
    }
  }
}

TEST_CASE("ResNet blocks under --precision bf16: a block read by the next hands it a bf16 output") {
  // The join and the final ReLU are one add_relu; with set_output_read_by_block (zoo/resnet.cpp
  // sets it on every block but the last) its output is bf16 under --precision bf16, the next
  // block's input and identity. The values and gradients are those of the same blocks with that
  // output rounded by hand, bit for bit, in training and eval; one map's 2 bytes a value less is
  // kept than without the setting (the host computes in fp32 otherwise: kernels/host_half.hpp).
  Rng rng(13);
  nn::Sequential chain;
  chain.emplace<nn::BasicBlock>(4, 4, 1, rng);
  chain.emplace<nn::Bottleneck>(4, 1, 1, rng);  // 4 -> 4 channels: the identity path
  const Tensor x = uniform({3, 4, 5, 5}, 14), dy = uniform({3, 4, 5, 5}, 15);
  const auto rounded = [](const Tensor& t) { return t.cast(DType::bf16).cast(DType::f32); };
  for (bool training : {true, false}) {
    CAPTURE(training);
    auto model = [&](bool read_by_block) {
      nn::Model m(chain.clone());
      m.root().train(training);
      m.root().set_input_grad_needed(true);
      dynamic_cast<nn::BasicBlock&>(m.root().child(0)).set_output_read_by_block(read_by_block);
      return m;
    };
    nn::Model half = model(true), unset = model(false), plain = model(false);
    Context ctx = Context::cpu(2);
    ctx.compute = DType::bf16;
    const KeptForward with = forward_keeping(ctx, half, x), without = forward_keeping(ctx, unset, x);
    const Tensor& y_half = with.y;
    CHECK(without.bytes - with.bytes == 3 * 4 * 5 * 5 * 2);
    CHECK(bitwise_equal(with.y, without.y) == false);  // rounded inside
    nn::Model probe = model(true), probe_unset = model(false);
    CHECK(probe.root().child(0).forward(ctx, x).dtype() == DType::bf16);
    CHECK(probe_unset.root().child(0).forward(ctx, x).dtype() == DType::f32);

    const Tensor h = rounded(plain.root().child(0).forward(ctx, x));
    CHECK(bitwise_equal(y_half, plain.root().child(1).forward(ctx, h)));
    half.zero_grad(ctx);
    plain.zero_grad(ctx);
    const Tensor dx_half = half.backward(ctx, dy);
    const Tensor dx_plain = plain.root().child(0).backward(ctx, plain.root().child(1).backward(ctx, dy));
    CHECK(bitwise_equal(dx_half, dx_plain));
    auto pa = half.root().named_parameters(), pb = plain.root().named_parameters();
    REQUIRE(pa.size() == pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      CAPTURE(pa[i].first);
      CHECK(bitwise_equal(pa[i].second->grad, pb[i].second->grad));
    }
  }
}

TEST_CASE("dense layer, dense block + transition: torchvision's names, concatenation, gradients") {
  Context ctx = Context::cpu(1);
  Rng rng(13);
  auto layer = nn::dense_layer(3, 2, 2, 0.f, rng);
  auto keys = names(*layer);
  for (const char* k : {"norm1.weight", "conv1.weight", "norm2.running_var", "conv2.weight"})
    CHECK_MESSAGE(has(keys, k), k);
  check_block(ctx, *layer, uniform({4, 3, 6, 6}, 7));

  nn::DenseBlock block(2, 3, 2, 2, 0.f, rng);
  CHECK(block.out_channels() == 7);
  keys = names(block);
  CHECK(has(keys, "denselayer1.conv1.weight"));
  CHECK(has(keys, "denselayer2.norm1.running_mean"));
  // The block's output starts with its input, unchanged: torch.cat([x, f1, f2], 1).
  Tensor x = uniform({1, 3, 4, 4}, 8);
  auto fresh = block.clone();
  fresh->eval();
  Tensor y = fresh->forward(ctx, x);
  REQUIRE(y.shape() == Shape{1, 7, 4, 4});
  auto xv = x.to_vector(), yv = y.to_vector();
  CHECK(std::vector<float>(yv.begin(), yv.begin() + 48) == xv);

  nn::Sequential with_transition;
  with_transition.add("denseblock1", block.clone());
  with_transition.add("transition1", nn::dense_transition(7, 3, rng));
  check_block(ctx, with_transition, uniform({4, 3, 6, 6}, 9));
  check_block(ctx, with_transition, uniform({2, 3, 4, 4}, 9), /*train=*/false);
}

namespace {
// torchvision's dense block, written out as its loop: torch.cat of every feature map for every
// layer, and the gradient split back the same way. Returns the output and dx for dy.
std::pair<Tensor, Tensor> dense_block_by_concatenation(Context& ctx, nn::DenseBlock& block, const Tensor& x,
                                                       const Tensor& dy) {
  auto concat = [&](const std::vector<Tensor>& parts) {
    Shape s = parts.front().shape();
    s[1] = 0;
    for (const Tensor& p : parts) s[1] += p.size(1);
    Tensor out = Tensor::empty(s);
    ops::concat_channels(ctx, out, parts);
    return out;
  };
  std::vector<Tensor> features{x};
  for (size_t l = 0; l < block.num_children(); ++l) features.push_back(block.child(l).forward(ctx, concat(features)));
  Tensor y = concat(features);
  std::vector<Tensor> d;
  for (const Tensor& f : features) d.push_back(Tensor::zeros(f.shape()));
  auto split_into = [&](size_t count, const Tensor& g) {
    std::vector<Tensor*> parts;
    for (size_t i = 0; i < count; ++i) parts.push_back(&d[i]);
    ops::split_channels_backward(ctx, parts, g);
  };
  split_into(d.size(), dy);
  for (size_t l = block.num_children(); l-- > 0;) {
    block.child(l).set_input_grad_needed(true);
    split_into(l + 1, block.child(l).backward(ctx, d[l + 1]));
  }
  return {y, d[0]};
}

std::vector<float> parameter_gradients(nn::Module& m) {
  std::vector<float> out;
  for (auto& [name, p] : m.named_parameters())
    for (float v : p->grad.to_vector()) out.push_back(v);
  return out;
}
}  // namespace

// The block keeps one buffer where torchvision concatenates for every layer: the same output,
// input gradient and parameter gradients bit for bit (the same sums in the same order), in
// training and eval mode, also when a layer is not BN-ReLU-first (it then gets a copy of its
// channels); and no concatenation runs, only one copy into the buffer per layer and one out of
// the gradient.
TEST_CASE("dense block: torchvision's concatenating loop bit for bit, without a concatenation") {
  Context ctx = Context::cpu(2);
  Rng rng(16);
  nn::DenseBlock plain(4, 3, 2, 2, 0.f, rng);
  nn::DenseBlock replaced = plain;
  static_cast<nn::Sequential&>(replaced.child(2)).replace("relu1", std::make_unique<nn::GELU>());
  const Tensor x = uniform({2, 3, 5, 5}, 12), dy = uniform({2, 11, 5, 5}, 13);
  for (nn::DenseBlock* block : {&plain, &replaced}) {
    for (bool train : {true, false}) {
      CAPTURE(block == &plain);
      CAPTURE(train);
      auto mine = block->clone(), theirs = block->clone();
      mine->train(train), theirs->train(train);
      Tensor y, dx;
      auto calls = op_calls([&] {
        y = mine->forward(ctx, x);
        dx = mine->backward(ctx, dy);
      });
      const auto [y_want, dx_want] = dense_block_by_concatenation(ctx, static_cast<nn::DenseBlock&>(*theirs), x, dy);
      CHECK(dpx::testing::bitwise_equal(y, y_want));
      if (train) {  // the batch norm adds dx into the buffer in its own pass: a multiply-add may fuse
        dpx::testing::check_close(dx.to_vector(), dx_want.to_vector(), 1e-5);
        dpx::testing::check_close(parameter_gradients(*mine), parameter_gradients(*theirs), 1e-5);
      } else {
        CHECK(dpx::testing::bitwise_equal(dx, dx_want));
        CHECK(parameter_gradients(*mine) == parameter_gradients(*theirs));
      }
      CHECK(calls["concat_channels"] == 0);
      CHECK(calls["split_channels_backward"] == 0);
      // In: x, then each layer's output (and the replaced layer's input copied out); back: each
      // layer's output gradient, the replaced layer's input gradient added, dx; in eval mode each
      // BN-first layer's batch norm also copies its input out and its gradient back (the
      // composed eval backward).
      const int64_t bn_first = block == &plain ? 4 : 3;
      CHECK(calls["copy_channels"] == 1 + 4 + (4 - bn_first) + 4 + (4 - bn_first) + 1 + (train ? 0 : 2 * bn_first));
    }
  }
  check_block(ctx, replaced, uniform({2, 3, 4, 4}, 14), /*train=*/false);
}

// Under --precision bf16 each layer's first batch norm and ReLU, run by the block over its buffer,
// hand conv1 a bf16 map (the one the ReLU keeps) and take conv1's gradient in bf16, as a Sequential
// runs the same layer (ops.def, "half-precision maps"; on the host the maps rounded): the block
// equals torchvision's concatenating loop, whose layers run as Sequentials, as in fp32 above.
TEST_CASE(
    "dense block under --precision bf16: each layer's first batch norm hands and takes bf16 maps, as a Sequential") {
  Context ctx = Context::cpu(2);
  ctx.compute = DType::bf16;
  Rng rng(17);
  nn::DenseBlock block(3, 3, 2, 2, 0.f, rng);
  const Tensor x = uniform({2, 3, 5, 5}, 18), dy = uniform({2, 9, 5, 5}, 19);
  for (bool train : {true, false}) {
    CAPTURE(train);
    auto mine = block.clone(), theirs = block.clone();
    mine->train(train), theirs->train(train);
    const Tensor y = mine->forward(ctx, x);
    for (size_t l = 0; l < mine->num_children(); ++l) {
      CAPTURE(l);
      CHECK(static_cast<nn::ReLU&>(mine->child(l).child(1)).output().dtype() == DType::bf16);
    }
    const Tensor dx = mine->backward(ctx, dy);
    const auto [y_want, dx_want] = dense_block_by_concatenation(ctx, static_cast<nn::DenseBlock&>(*theirs), x, dy);
    CHECK(dpx::testing::bitwise_equal(y, y_want));
    if (train) {  // as in fp32: the batch norm adds dx into the buffer in its own pass
      dpx::testing::check_close(dx.to_vector(), dx_want.to_vector(), 1e-5);
      dpx::testing::check_close(parameter_gradients(*mine), parameter_gradients(*theirs), 1e-5);
    } else {
      CHECK(dpx::testing::bitwise_equal(dx, dx_want));
      CHECK(parameter_gradients(*mine) == parameter_gradients(*theirs));
    }
  }
}

TEST_CASE("Fire: squeeze, both expand branches concatenated; gradients") {
  Context ctx = Context::cpu(1);
  Rng rng(14);
  nn::Fire fire(3, 2, 2, 3, rng);
  CHECK(fire.out_channels() == 5);
  auto keys = names(fire);
  CHECK(keys == std::vector<std::string>{"squeeze.weight", "squeeze.bias", "expand1x1.weight", "expand1x1.bias",
                                         "expand3x3.weight", "expand3x3.bias"});
  check_block(ctx, fire, uniform({2, 3, 4, 4}, 10), /*train=*/false);
  // Backward hands each branch its channels of dy without zero-filling them first, and joins the
  // branches' gradients in expand1x1's backward (DxMode::add), not in an axpy.
  Tensor y = fire.forward(ctx, uniform({2, 3, 4, 4}, 11));
  auto calls = op_calls([&] { fire.backward(ctx, uniform(y.shape(), 12)); });
  CHECK(calls["copy_channels"] == 2);
  CHECK(calls["fill"] == 0);
  CHECK(calls["axpy"] == 0);
  CHECK(calls["split_channels_backward"] == 0);
}

TEST_CASE("without a caller for dx, blocks compute the same parameter gradients and no dx") {
  Context ctx = Context::cpu(1);
  Rng rng(15);
  nn::Bottleneck block(4, 2, 2, rng);
  Tensor x = uniform({2, 4, 5, 5}, 11);
  auto grads = [&](bool need_dx, Tensor* dx) {
    auto m = block.clone();
    Tensor y = m->forward(ctx, x);
    m->set_input_grad_needed(need_dx);
    *dx = m->backward(ctx, uniform(y.shape(), 12));
    std::vector<float> g;
    for (auto& [name, p] : m->named_parameters()) {
      auto v = p->grad.to_vector();
      g.insert(g.end(), v.begin(), v.end());
    }
    return g;
  };
  Tensor with_dx, without_dx;
  auto a = grads(true, &with_dx), b = grads(false, &without_dx);
  CHECK(with_dx.shape() == x.shape());
  CHECK_FALSE(without_dx.defined());
  CHECK(a == b);
}
