// Exits and messages (issue "Safe with anyone's files", class 6): what was accepted and should
// not be, refused with a usage error naming the flag; and failures that printed a library's words,
// or none, say what failed and what to do. Seen failing before: dpx infer ran NaN weights,
// predict printed inf/nan for --compute-scale 1e308 and took an unknown --backend, duplicate batch
// sizes and rank counts and zero --compare times, infer took --classes 0 and -1, and a gnuplot that
// printed nothing left "gnuplot failed ...: " with nothing after it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/gnuplot.hpp"
#include "core/safetensors.hpp"
#include "run_dpx.hpp"
#include "tests/common/files.hpp"

namespace fs = std::filesystem;
using dpx::testing::TempDir;

namespace {

void refused(const std::string& args, int code, const std::string& needle) {
  CAPTURE(args);
  const DpxResult r = run_dpx(args);
  CAPTURE(r.output);
  CHECK(r.code == code);
  CHECK(r.output.find(needle) != std::string::npos);
}

const std::string kTrain = "train --model mlp --dataset synthetic --image-size 8 --channels 1 --synthetic-size 64 "
                           "--batch-size 16 --steps 1 --warmup 0 --no-eval --threads 1 --workers 0 ";

}  // namespace

TEST_CASE("dpx infer refuses weights that hold a NaN, naming the tensor, as dpx train does") {
  TempDir dir("msg_infer_nan");
  const std::string w = dir.file("w.safetensors"), x = dir.file("x.safetensors");
  REQUIRE(run_dpx(kTrain + "--save " + w).code == 0);
  dpx::SafeTensors st = dpx::read_safetensors(w);
  std::vector<std::pair<std::string, dpx::Tensor>> tensors(st.tensors.begin(), st.tensors.end());
  for (auto& [name, t] : tensors)
    if (name == "1.weight") t.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
  dpx::write_safetensors(w, tensors, st.metadata);
  dpx::write_safetensors(x, {{"images", dpx::Tensor::zeros({2, 1, 8, 8})}});
  refused("infer --model mlp --weights " + w + " --input " + x + " --output " + dir.file("y.safetensors"), 1,
          "--weights " + w + ": '1.weight' holds 1 NaN or infinite value");
  CHECK(!fs::exists(dir.file("y.safetensors")));
}

TEST_CASE("infer --classes and predict's flags out of range are usage errors naming the flag") {
  refused("infer --model mlp --weights w --input x --output y --classes 0", 2,
          "--classes: 0 is not a number of classes: give 1 or more");
  refused("infer --model mlp --weights w --input x --output y --classes -1", 2, "--classes: -1 is not a number");
  const std::string predict = "predict --model mlp --link 10gbit,5us ";
  refused(predict + "--compute-scale 1e308", 2, "--compute-scale: 1e+308 is not a factor in (0, 1e6]");
  refused(predict + "--backend foo", 2, "--backend 'foo': use threads, mpi, nccl or p2p");
  refused(predict + "--batch-sizes 8,16,8", 2, "--batch-sizes: 8 is given twice");
  refused(predict + "--ranks 1,2,2", 2, "--ranks: 2 is given twice in '1,2,2'");
}

TEST_CASE("predict --compare refuses a results.csv with measured times of zero or less") {
  TempDir dir("msg_compare");
  REQUIRE(run_dpx("bench --models mlp --batch-sizes 8 --devices cpu:1 --dataset synthetic --image-size 8 --channels 1 "
                  "--steps 2 --warmup 1 --threads 1 --workers 0 --out " + dir.file("b")).code == 0);
  // The same file with its step time edited to 0 (its fields hold no commas: --devices cpu:1).
  std::istringstream lines(dpx::testing::file_text(dir.file("b/results.csv")));
  std::string header, row;
  std::getline(lines, header);
  std::getline(lines, row);
  auto split = [](const std::string& line) {
    std::vector<std::string> out;
    std::stringstream ss(line + ",");  // getline drops a last empty field; the comma keeps it
    for (std::string cell; std::getline(ss, cell, ',');) out.push_back(cell);
    return out;
  };
  const std::vector<std::string> h = split(header);
  std::vector<std::string> v = split(row);
  REQUIRE(h.size() == v.size());
  std::string edited = header + "\n";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) edited += ',';
    edited += h[i] == "mean_step_s" ? std::string("0") : v[i];
  }
  std::ofstream(dir.file("edited.csv")) << edited << "\n";
  refused("predict --model mlp --link 10gbit,5us --compare " + dir.file("edited.csv"), 2,
          "are not a measured step's (positive times)");
}

TEST_CASE("a gnuplot that fails without a word is named, with what to check") {
  TempDir dir("msg_gnuplot");
  REQUIRE(run_dpx("bench --models mlp --batch-sizes 8 --devices cpu:1 --dataset synthetic --image-size 8 --channels 1 "
                  "--steps 2 --warmup 1 --threads 1 --workers 0 --out " + dir.file("b")).code == 0);
  refused("plot " + dir.file("b") + " --out " + dir.file("f") + " --gnuplot /bin/false", 1,
          "gnuplot (/bin/false) failed drawing throughput (exit status 1): it printed nothing: is '/bin/false' gnuplot?");
  refused("plot " + dir.file("b") + " --out " + dir.file("f") + " --gnuplot /bin/true", 1,
          "it exited 0 but wrote no PNG and SVG");
}

TEST_CASE("dpx report without a usable TMPDIR says which variable to set") {
  if (dpx::analysis::find_executable("gnuplot").empty()) {
    MESSAGE("gnuplot is not installed: dpx report stops before its scratch folder");
    return;
  }
  TempDir dir("msg_tmpdir");
  REQUIRE(run_dpx("bench --models mlp --batch-sizes 8 --devices cpu:1 --dataset synthetic --image-size 8 --channels 1 "
                  "--steps 2 --warmup 1 --threads 1 --workers 0 --out " + dir.file("b")).code == 0);
  const DpxResult r = run_command("TMPDIR=" + dir.file("missing") + " " + std::string(DPX_BINARY) + " report " +
                                  dir.file("b") + " --out " + dir.file("r.html"));
  CAPTURE(r.output);
  CHECK(r.code == 1);
  CHECK(r.output.find("set TMPDIR to a writable folder") != std::string::npos);
  CHECK(!fs::exists(dir.file("r.html")));
}
