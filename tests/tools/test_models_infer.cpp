// End-to-end tests of `dpx models`, `dpx infer` and the weight flags of `dpx train` (--save,
// --weights, --weights-non-strict, --head, --freeze-backbone): exact numbers, files that other
// tools read back, and clear errors for inputs that do not fit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "core/data/idx.hpp"
#include "core/safetensors.hpp"
#include "layers/model.hpp"
#include "run_dpx.hpp"
#include "zoo/registry.hpp"
#include "tests/common/compare.hpp"
#include "tests/common/tensors.hpp"
#include "zoo/weights.hpp"
#include "tests/common/errors.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using namespace dpx;
using dpx::testing::bitwise_equal;
using dpx::testing::norm_rel_diff;
using dpx::testing::randn;

using dpx::testing::contains;

using dpx::testing::file_text;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("dpx_models_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}


// Flags are given once each (CLI11 refuses repeats): the number of classes is added per run.
const std::string kTrainBase =
    "train --model resnet18 --dataset synthetic --image-size 32 --channels 3 --synthetic-size 64 "
    "--batch-size 8 --steps 2 --warmup 0 --epochs 1 --no-eval --threads 2 --workers 0 ";
const std::string kTrain = kTrainBase + "--classes 4 ";

}  // namespace

TEST_CASE("dpx models: torchvision's parameter counts, FLOPs and activation memory, as a table and CSV") {
  fs::path d = temp_dir("table");
  DpxResult r = run_dpx("models resnet18 squeezenet1_1 --threads 2 --csv " + (d / "models.csv").string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(contains(r.output, "2 per multiply-add"));
  CHECK(contains(r.output, "11,689,512"));
  CHECK(contains(r.output, "1,235,496"));
  std::istringstream csv(file_text(d / "models.csv"));
  std::string header, resnet, squeeze;
  std::getline(csv, header);
  std::getline(csv, resnet);
  std::getline(csv, squeeze);
  CHECK(header ==
        "model,family,parameters,trainable_parameters,forward_gflops,in_channels,image_size,activation_bytes_per_image");
  // torchvision at 224: 3,628,146,688 and 698,303,872 FLOPs (2 per multiply-add of Conv2d and Linear).
  CHECK(resnet.starts_with("resnet18,resnet,11689512,11689512,3.628147,3,224,"));
  CHECK(squeeze.starts_with("squeezenet1_1,squeezenet,1235496,1235496,0.698304,3,224,"));
  // Activation memory: more than the output of resnet18's stem alone (64 x 112 x 112 floats).
  CHECK(std::stoll(resnet.substr(resnet.rfind(',') + 1)) > 64 * 112 * 112 * 4);
  fs::remove_all(d);
}

TEST_CASE("dpx models: --list, transfer-learning counts and bad names") {
  DpxResult list = run_dpx("models --list");
  REQUIRE(list.code == 0);
  for (const auto& m : zoo::registry()) CHECK_MESSAGE(contains(list.output, m.name + " "), m.name);
  CHECK(contains(list.output, "need 63 pixels"));
  DpxResult frozen = run_dpx("models squeezenet1_1 --head mlp4096 --freeze-backbone --classes 10 --threads 2");
  CAPTURE(frozen.output);
  CHECK(frozen.code == 0);
  CHECK(contains(frozen.output, "18,923,530"));  // Linear 512->4096, 4096->4096, 4096->10
  DpxResult bad = run_dpx("models resnet19");
  CHECK(bad.code == 2);
  CHECK(contains(bad.output, "unknown model 'resnet19'"));
}

TEST_CASE("dpx infer: the logits of the model in eval mode, for any float input dtype") {
  fs::path d = temp_dir("infer");
  zoo::ModelOptions o;
  o.num_classes = 1000;
  o.seed = 3;
  nn::Model model(zoo::build_model("squeezenet1_1", o));
  zoo::save_state((d / "w.safetensors").string(), model);
  Tensor x = randn({3, 3, 32, 32}, 5);
  write_safetensors((d / "x.safetensors").string(), {{"labels", Tensor::zeros({3}, DType::i64)}, {"images", x}});
  write_safetensors((d / "x16.safetensors").string(), {{"images", x.cast(DType::f16)}});
  Context ctx = Context::cpu(1);
  model.eval();
  const Tensor want = model.forward(ctx, x);
  const Tensor want16 = model.forward(ctx, x.cast(DType::f16).cast(DType::f32));

  const std::string base = "infer --model squeezenet1_1 --threads 1 --weights " + (d / "w.safetensors").string();
  DpxResult r = run_dpx(base + " --input " + (d / "x.safetensors").string() + " --tensor-name images --output " +
                        (d / "y.safetensors").string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  SafeTensors y = read_safetensors((d / "y.safetensors").string());
  REQUIRE(y.find("logits") != nullptr);
  CHECK(bitwise_equal(*y.find("logits"), want));  // the same kernels on one thread: bit for bit

  r = run_dpx(base + " --input " + (d / "x16.safetensors").string() + " --output " + (d / "y16.safetensors").string());
  REQUIRE(r.code == 0);
  CHECK(bitwise_equal(*read_safetensors((d / "y16.safetensors").string()).find("logits"), want16));
  fs::remove_all(d);
}

// The same pixels as an IDX file, as u8 in a safetensors file, and as float images normalised by
// hand: dpx infer normalises pixels itself, with the mean and std the weights' metadata names (dpx
// train --save writes its data set's) or --mean/--std, prints the top-1 and writes it, and scores
// it against --labels.
TEST_CASE("dpx infer: pixels from IDX or u8 tensors normalised as the weights' run did, top-1 and accuracy") {
  fs::path d = temp_dir("infer_pixels");
  zoo::ModelOptions o;
  o.num_classes = 10;
  o.in_channels = 1;
  o.image_size = 28;
  o.seed = 4;
  nn::Model model(zoo::build_model("lenet5", o));
  const float mean = 0.2860f, stdev = 0.3530f;  // Fashion-MNIST's (core/data/mnist.hpp)
  zoo::save_state((d / "w.safetensors").string(), model,
                  {{"num_classes", "10"}, {"in_channels", "1"}, {"image_size", "28"}, {"dataset", "fashion-mnist"},
                   {"mean", "0.286"}, {"std", "0.353"}});
  zoo::save_state((d / "bare.safetensors").string(), model, {{"num_classes", "10"}, {"in_channels", "1"}});
  const int64_t n = 5;
  Tensor px = Tensor::empty({n, 28, 28}, DType::u8);
  for (int64_t i = 0; i < px.numel(); ++i) px.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + i / 28) % 256);
  data::write_idx((d / "images.idx").string(), px, data::IdxType::u8, /*gzip=*/true);
  Tensor px4 = Tensor::empty({n, 1, 28, 28}, DType::u8);
  std::memcpy(px4.data<uint8_t>(), px.data<uint8_t>(), static_cast<size_t>(px.numel()));
  write_safetensors((d / "px.safetensors").string(), {{"images", px4}});
  Tensor x = Tensor::empty({n, 1, 28, 28});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = (px.data<uint8_t>()[i] / 255.f - mean) / stdev;
  Context ctx = Context::cpu(1);
  model.eval();
  const Tensor want = model.forward(ctx, x);
  Tensor labels = Tensor::empty({n}, DType::u8);
  int64_t best0 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = want.data<float>() + i * 10;
    const int64_t best = std::max_element(row, row + 10) - row;
    if (i == 0) best0 = best;
    labels.data<uint8_t>()[i] = static_cast<uint8_t>(i < 3 ? best : (best + 1) % 10);  // 3 of 5 right
  }
  data::write_idx((d / "labels.idx").string(), labels, data::IdxType::u8);

  const std::string base = "infer --model lenet5 --threads 1 --weights " + (d / "w.safetensors").string();
  for (const char* input : {"images.idx", "px.safetensors"}) {
    CAPTURE(input);
    DpxResult r = run_dpx(base + " --input " + (d / input).string() + " --output " + (d / "y.safetensors").string() +
                          " --force --labels " + (d / "labels.idx").string());
    CAPTURE(r.output);
    REQUIRE(r.code == 0);
    SafeTensors y = read_safetensors((d / "y.safetensors").string());
    CHECK(norm_rel_diff(*y.find("logits"), want) < 1e-6);  // the normalisation as a table or a division
    REQUIRE(y.find("top1") != nullptr);
    CHECK(y.find("top1")->data<int64_t>()[0] == best0);
    CHECK(contains(r.output, "normalised with mean 0.286 and std 0.353 (the weights' data set)"));
    const std::string names[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                 "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
    CHECK(contains(r.output, "  image 0: class " + std::to_string(best0) + " " + names[best0] + " (p "));
    CHECK(contains(r.output, "top-1 accuracy against " + (d / "labels.idx").string() + ": 60.00 % (3 of 5)"));
  }
  // Weights without the data set's statistics: a grey input is refused until --mean/--std say them.
  const std::string bare = "infer --model lenet5 --threads 1 --weights " + (d / "bare.safetensors").string() +
                           " --input " + (d / "images.idx").string() + " --force --output " + (d / "z.safetensors").string();
  DpxResult refused = run_dpx(bare);
  CHECK(refused.code == 2);
  CHECK(contains(refused.output, "pass --mean and --std (Fashion-MNIST: 0.2860 and 0.3530"));
  DpxResult given = run_dpx(bare + " --mean 0.286 --std 0.353");
  REQUIRE(given.code == 0);
  CHECK(norm_rel_diff(*read_safetensors((d / "z.safetensors").string()).find("logits"), want) < 1e-6);
  // Float images are taken as normalised already: --normalize no is what they get by default.
  write_safetensors((d / "x.safetensors").string(), {{"images", x}});
  DpxResult floats = run_dpx(base + " --input " + (d / "x.safetensors").string() + " --force --output " +
                             (d / "y.safetensors").string());
  REQUIRE(floats.code == 0);
  CHECK(contains(floats.output, "taken as normalised already"));
  CHECK(bitwise_equal(*read_safetensors((d / "y.safetensors").string()).find("logits"), want));
  // A folder, or a file of no kind infer reads: refused, saying what to pass.
  DpxResult folder = run_dpx(base + " --input " + d.string() + " --output " + (d / "q.safetensors").string());
  CHECK(folder.code == 2);
  CHECK(contains(folder.output, "is a folder: pass its JPEG/PNG files"));
  std::ofstream(d / "notes.txt") << "hello";
  DpxResult text = run_dpx(base + " --input " + (d / "notes.txt").string() + " --output " + (d / "q.safetensors").string());
  CHECK(text.code == 2);
  CHECK(contains(text.output, "neither a safetensors file, an IDX images file"));
  fs::remove_all(d);
}

// JPEG/PNG files: decoded, resized and centre-cropped as torchvision's evaluation transform, and
// normalised with ImageNet's statistics for RGB weights that name none (torchvision's).
TEST_CASE("dpx infer: JPEG and PNG files through the evaluation transform") {
  fs::path d = temp_dir("infer_images");
  DpxResult made = run_dpx("data make-imagefolder " + (d / "imgs").string() + " --classes 2 --per-class 2 --size 80x64");
  REQUIRE(made.code == 0);
  zoo::ModelOptions o;
  o.num_classes = 1000;
  o.seed = 3;
  nn::Model model(zoo::build_model("squeezenet1_1", o));
  zoo::save_state((d / "w.safetensors").string(), model);
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(d / "imgs" / "val"))
    if (e.is_regular_file()) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 2);
  DpxResult r = run_dpx("infer --model squeezenet1_1 --threads 1 --image-size 64 --weights " +
                        (d / "w.safetensors").string() + " --input " + files[0] + "," + files[1] + " --output " +
                        (d / "y.safetensors").string());
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(contains(r.output, "2 image(s) (2, 3, 64, 64) from 2 image file(s) (resized to 73 and centre-cropped to 64x64"));
  CHECK(contains(r.output, "normalised with mean 0.485,0.456,0.406 and std 0.229,0.224,0.225 (ImageNet's"));
  CHECK(contains(r.output, "  image 1: class "));
  SafeTensors y = read_safetensors((d / "y.safetensors").string());
  CHECK(y.find("logits")->size(0) == 2);
  fs::remove_all(d);
}

TEST_CASE("dpx infer: clear errors for inputs and weights that do not fit") {
  fs::path d = temp_dir("infer_errors");
  zoo::ModelOptions o;
  o.num_classes = 1000;
  nn::Model model(zoo::build_model("squeezenet1_1", o));
  const std::string w = (d / "w.safetensors").string();
  zoo::save_state(w, model);
  auto input = [&](const std::string& name, const std::vector<std::pair<std::string, Tensor>>& tensors) {
    write_safetensors((d / name).string(), tensors);
    return (d / name).string();
  };
  const std::string good = input("good.safetensors", {{"a", Tensor::zeros({1, 3, 32, 32})}});
  struct Case {
    std::string args, needle;
    int code;
  };
  const std::string out = " --output " + (d / "y.safetensors").string();
  std::vector<Case> cases = {
      {"--weights " + w + " --input " + input("rank.safetensors", {{"a", Tensor::zeros({3, 32, 32})}}),
       "has shape (3, 32, 32); infer needs a batch of images (N, C, H, W)", 2},
      {"--weights " + w + " --input " + input("grey.safetensors", {{"a", Tensor::zeros({1, 1, 32, 32})}}),
       "has 1 channel(s) (1, 1, 32, 32) but squeezenet1_1 as these weights were made takes 3", 2},
      {"--weights " + w + " --input " + good + " --tensor-name images", "no tensor named 'images' (it holds 1: a)", 2},
      {"--weights " + w + " --input " + input("int.safetensors", {{"a", Tensor::zeros({1, 3, 32, 32}, DType::i64)}}),
       "holds i64; infer needs floating-point images", 2},
      {"--weights " + w + " --input " + good + " --classes 10",
       "classifier.1.bias: file has F32 (1000), model expects F32 (10)", 1},
      {"--weights " + w + " --input " + input("small.safetensors", {{"a", Tensor::zeros({1, 3, 16, 16})}}),
       "needs an input of at least 17x17", 2},
      {"--weights " + (d / "none.safetensors").string() + " --input " + good, "none.safetensors", 1},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args);
    DpxResult r = run_dpx("infer --model squeezenet1_1 " + c.args + out);
    CAPTURE(r.output);
    CHECK(r.code == c.code);
    CHECK(contains(r.output, "dpx: error:"));
    CHECK(contains(r.output, c.needle));
  }
  CHECK_FALSE(fs::exists(d / "y.safetensors"));
  fs::remove_all(d);
}

TEST_CASE("dpx train: --save, then --weights, --head and --freeze-backbone under DDP, and dpx infer reads the file") {
  fs::path d = temp_dir("train");
  const std::string a = (d / "a.safetensors").string(), b = (d / "b.safetensors").string();
  DpxResult r = run_dpx(kTrain + "--save " + a);
  CAPTURE(r.output);
  REQUIRE(r.code == 0);
  CHECK(contains(r.output, "wrote weights " + a));
  SafeTensors saved = read_safetensors(a);
  CHECK(saved.tensors.size() == 122);  // torchvision's resnet18 state_dict has 122 entries
  CHECK(saved.metadata.at("num_classes") == "4");
  CHECK(saved.metadata.at("head") == "default");
  CHECK(saved.find("fc.weight")->shape() == Shape{4, 512});
  CHECK(saved.find("bn1.num_batches_tracked")->data<int64_t>()[0] == 2);

  // The saved metadata says 4 classes: infer needs no --classes.
  write_safetensors((d / "x.safetensors").string(), {{"x", randn({2, 3, 32, 32}, 1)}});
  r = run_dpx("infer --model resnet18 --weights " + a + " --input " + (d / "x.safetensors").string() + " --output " +
              (d / "y.safetensors").string());
  REQUIRE(r.code == 0);
  CHECK(read_safetensors((d / "y.safetensors").string()).find("logits")->shape() == Shape{2, 4});

  // A new linear head on the frozen backbone, trained by two DDP ranks.
  r = run_dpx(kTrain + "--weights " + a + " --head linear --freeze-backbone --devices cpu:2 --parallel ddp --out " +
              (d / "run").string() + " --save " + b);
  REQUIRE(r.code == 0);
  CHECK(contains(r.output, "120 tensors loaded, 0 missing, 0 unexpected"));  // fc.* left to the new head
  auto config = nlohmann::json::parse(file_text(d / "run" / "config.json"));
  CHECK(config["num_trainable"] == 512 * 4 + 4);
  CHECK(config["head"] == "linear");
  SafeTensors after = read_safetensors(b);
  for (const auto& [name, t] : saved.tensors) {
    CAPTURE(name);
    const bool same = bitwise_equal(t, *after.find(name));
    if (name.starts_with("fc.")) CHECK_FALSE(same);
    else if (name.find("running_") == std::string::npos && !name.ends_with("num_batches_tracked")) CHECK(same);
  }
  // DataParallel saves the master's weights.
  r = run_dpx(kTrain + "--devices cpu:2 --parallel dp --save " + b);
  CHECK(r.code == 0);
  CHECK(read_safetensors(b).tensors.size() == 122);
  fs::remove_all(d);
}

TEST_CASE("dpx train --weights: strict by default, --weights-non-strict lists what it skipped") {
  fs::path d = temp_dir("weights");
  const std::string a = (d / "a.safetensors").string(), c = (d / "c.safetensors").string();
  REQUIRE(run_dpx(kTrain + "--save " + a).code == 0);
  SafeTensors f = read_safetensors(a);
  std::erase_if(f.tensors, [](const auto& e) { return e.first == "fc.bias"; });
  f.tensors.emplace_back("extra.weight", Tensor::zeros({2}));
  write_safetensors(c, f.tensors);

  DpxResult strict = run_dpx(kTrain + "--weights " + c);
  CHECK(strict.code == 1);
  CHECK(contains(strict.output, "1 missing (fc.bias), 1 unexpected (extra.weight)"));
  DpxResult loose = run_dpx(kTrain + "--weights " + c + " --weights-non-strict");
  CAPTURE(loose.output);
  CHECK(loose.code == 0);
  CHECK(contains(loose.output, "121 tensors loaded, 1 missing (fc.bias), 1 unexpected (extra.weight)"));
  DpxResult classes = run_dpx(kTrainBase + "--classes 5 --weights " + a);
  CHECK(classes.code == 1);
  CHECK(contains(classes.output, "fc.bias: file has F32 (4), model expects F32 (5)"));
  DpxResult head = run_dpx(kTrain + "--head wide");
  CHECK(head.code == 2);
  CHECK(contains(head.output, "unknown head 'wide'"));
  fs::remove_all(d);
}
