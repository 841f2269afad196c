// save_state and load_state: every parameter and buffer round-trips through safetensors bit
// for bit under its state_dict name; strict loading names what does not fit and changes nothing;
// non-strict loading reports; other float dtypes are converted; a new head is left out.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <unistd.h>

#include "core/safetensors.hpp"
#include "layers/layers.hpp"
#include "tests/common/tensors.hpp"
#include "zoo/cnn.hpp"
#include "zoo/heads.hpp"
#include "zoo/weights.hpp"

using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::randn;
namespace fs = std::filesystem;

namespace {

// A ResNet-50-shaped network (bottlenecks, downsamples, batch norms) two channels wide.
nn::Model tiny(uint64_t seed, int classes = 5, const std::string& head = "default") {
  zoo::ModelOptions o;
  o.num_classes = classes;
  o.image_size = 16;
  o.seed = seed;
  o.head = head;
  auto root = zoo::build_resnet({true, {1, 1, 1, 1}, 2}, o);
  zoo::apply_head(*root, zoo::find_model("resnet50"), o);
  return nn::Model(std::move(root));
}

// Every parameter and buffer of a and b, byte for byte.
bool same_state(nn::Model& a, nn::Model& b) {
  auto sa = a.state_dict(), sb = b.state_dict();
  if (sa.size() != sb.size()) return false;
  for (auto& [name, t] : sa)
    if (!sb.count(name) || !bitwise_equal(t, sb.at(name))) return false;
  return true;
}

// The state of `m` as an in-memory file (copies), to edit before loading.
SafeTensors as_file(nn::Model& m) {
  SafeTensors f;
  f.path = "state.safetensors";
  for (auto& [name, t] : m.state_dict()) f.tensors.emplace_back(name, t.clone());
  return f;
}

void erase(SafeTensors& f, const std::string& name) {
  std::erase_if(f.tensors, [&](const auto& e) { return e.first == name; });
}

// A few training forwards so running statistics and num_batches_tracked are not the defaults.
void run_a_little(nn::Model& m) {
  Context ctx = Context::cpu(1);
  Tensor x = randn({2, 3, 16, 16}, 99);
  m.train();
  m.forward(ctx, x);
  m.forward(ctx, x);
}

}  // namespace

TEST_CASE("save_state writes the state_dict as the reference writer orders it; load_state reads it back bit for bit") {
  nn::Model a = tiny(1);
  run_a_little(a);
  const fs::path path = fs::temp_directory_path() / ("dpx_weights_" + std::to_string(::getpid()) + ".safetensors");
  zoo::save_state(path.string(), a, {{"dpx_model", "tiny"}});
  SafeTensors file = read_safetensors(path.string());
  fs::remove(path);

  auto state = a.state_dict();
  REQUIRE(file.tensors.size() == state.size());
  std::set<std::string> names;
  for (const auto& [name, t] : file.tensors) {
    CAPTURE(name);
    names.insert(name);
    REQUIRE(state.count(name) == 1);
    CHECK(bitwise_equal(t, state.at(name)));
    CHECK(t.dtype() == (name.ends_with("num_batches_tracked") ? DType::i64 : DType::f32));
  }
  CHECK(names.size() == state.size());
  CHECK(state.at("bn1.num_batches_tracked").data<int64_t>()[0] == 2);
  // generator = dpx: a later --save may replace it without --force (core/output_files.hpp).
  CHECK(file.metadata ==
        std::map<std::string, std::string>{{"dpx_model", "tiny"}, {"format", "pt"}, {"generator", "dpx"}});
  auto order = file.tensors;
  sort_like_reference(order);
  for (size_t i = 0; i < order.size(); ++i) CHECK(order[i].first == file.tensors[i].first);

  nn::Model b = tiny(2);
  CHECK_FALSE(same_state(a, b));
  zoo::LoadReport r = zoo::load_state(b, file, /*strict=*/true);
  CHECK(r.loaded == static_cast<int64_t>(state.size()));
  CHECK(r.missing.empty());
  CHECK(r.unexpected.empty());
  CHECK(same_state(a, b));
  Context ctx = Context::cpu(1);
  a.eval();
  b.eval();
  Tensor x = Tensor::zeros({1, 3, 16, 16});
  CHECK(a.forward(ctx, x).to_vector() == b.forward(ctx, x).to_vector());
}

TEST_CASE("strict loading names what is missing, unexpected or mis-shaped, and leaves the model as it was") {
  nn::Model a = tiny(1), b = tiny(2);
  const auto before = b.flat_params().to_vector();
  auto fails = [&](const SafeTensors& f, const std::string& needle) {
    CAPTURE(needle);
    CHECK_THROWS_WITH_AS(zoo::load_state(b, f, true), doctest::Contains(needle.c_str()), Error);
    CHECK(b.flat_params().to_vector() == before);
  };
  SafeTensors missing = as_file(a);
  erase(missing, "fc.bias");
  fails(missing, "1 missing (fc.bias), 0 unexpected ()");
  SafeTensors extra = as_file(a);
  extra.tensors.emplace_back("head.weight", Tensor::zeros({2, 2}));
  fails(extra, "0 missing (), 1 unexpected (head.weight)");
  SafeTensors shape = as_file(a);
  erase(shape, "fc.weight");
  shape.tensors.emplace_back("fc.weight", Tensor::zeros({3, 64}));
  fails(shape, "fc.weight: file has F32 (3, 64), model expects F32 (5, 64)");
  SafeTensors counter = as_file(a);
  erase(counter, "bn1.num_batches_tracked");
  counter.tensors.emplace_back("bn1.num_batches_tracked", Tensor::zeros({}, DType::i32));
  fails(counter, "bn1.num_batches_tracked: file has I32");
}

TEST_CASE("non-strict loading loads what fits and returns the missing and unexpected names") {
  nn::Model a = tiny(1), b = tiny(2);
  run_a_little(a);
  SafeTensors f = as_file(a);
  erase(f, "fc.bias");
  erase(f, "layer1.0.bn3.running_var");
  f.tensors.emplace_back("extra.weight", Tensor::zeros({1}));
  const auto kept_bias = b.state_dict().at("fc.bias").to_vector();
  zoo::LoadReport r = zoo::load_state(b, f, /*strict=*/false);
  CHECK(r.missing == std::vector<std::string>{"fc.bias", "layer1.0.bn3.running_var"});
  CHECK(r.unexpected == std::vector<std::string>{"extra.weight"});
  CHECK(r.loaded == static_cast<int64_t>(f.tensors.size()) - 1);
  auto sb = b.state_dict();
  CHECK(sb.at("fc.bias").to_vector() == kept_bias);
  CHECK(bitwise_equal(sb.at("fc.weight"), a.state_dict().at("fc.weight")));
  CHECK(bitwise_equal(sb.at("layer1.0.bn3.running_mean"), a.state_dict().at("layer1.0.bn3.running_mean")));
  CHECK(zoo::describe_load(r) == std::to_string(r.loaded) +
                                     " tensors loaded, 2 missing (fc.bias, layer1.0.bn3.running_var), 1 "
                                     "unexpected (extra.weight)");
}

TEST_CASE("F64, F16 and BF16 tensors are converted to the model's f32") {
  nn::Model a = tiny(1);
  for (DType dtype : {DType::f64, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    SafeTensors f = as_file(a);
    for (auto& [name, t] : f.tensors)
      if (t.dtype() == DType::f32) t = t.cast(dtype);
    nn::Model b = tiny(2);
    zoo::load_state(b, f, true);
    for (auto& [name, t] : b.state_dict()) {
      CAPTURE(name);
      if (t.dtype() != DType::f32) continue;
      // What the file holds, widened back: exact for f64, the rounded value for f16 and bf16.
      CHECK(t.to_vector() == a.state_dict().at(name).cast(dtype).cast(DType::f32).to_vector());
    }
  }
}

TEST_CASE("with a skip prefix a new head keeps its weights and the file's old one is not reported") {
  nn::Model pretrained = tiny(1, 5);
  SafeTensors f = as_file(pretrained);
  nn::Model b = tiny(2, 3, "linear");
  CHECK_THROWS_WITH_AS(zoo::load_state(b, f, true), doctest::Contains("fc.bias: file has F32 (5), model expects F32 (3)"), Error);
  const auto head = b.state_dict().at("fc.weight").to_vector();
  zoo::LoadReport r = zoo::load_state(b, f, /*strict=*/true, "fc.");
  CHECK(r.missing.empty());
  CHECK(r.unexpected.empty());
  CHECK(b.state_dict().at("fc.weight").to_vector() == head);
  CHECK(bitwise_equal(b.state_dict().at("conv1.weight"), pretrained.state_dict().at("conv1.weight")));
}
