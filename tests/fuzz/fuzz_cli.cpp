// libFuzzer target: the command line's parsers of sizes, numbers, dtypes and devices. The first
// byte picks a parser, the rest is its text; `dpx train` arguments go through the real CLI11
// flags (tools/train_flags.hpp) and TrainOptions::validate(), without running anything.
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "parallel/bench/collective_bench.hpp"
#include "parallel/train/train_options.hpp"
#include "tools/train_flags.hpp"

namespace {

using namespace dpx;

// Text split at newlines: the arguments of a command line, or the fields of a record.
std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out(1);
  for (char c : text) {
    if (c == '\n') out.emplace_back();
    else out.back() += c;
  }
  return out;
}

// `dpx train ARGS...`: the flags, then the checks run_train does before any work.
void train_args(const std::string& text) {
  std::vector<std::string> args = split(text);
  std::vector<char*> argv = {const_cast<char*>("dpx-train")};
  for (auto& a : args) argv.push_back(a.data());
  parallel::TrainOptions o;
  tools::TrainFlags f;
  CLI::App app{"fuzz"};
  tools::add_train_flags(app, o, f, /*for_bench=*/false);
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::Error&) {
    return;  // CLI11's own rejection (unknown flag, not a number, ...): exit code 2 in dpx
  }
  o.process_ranks = args.size() % 3 == 0 ? 0 : static_cast<int>(args.size() % 5);  // an MPI launch, sometimes
  tools::apply_train_flags(o, f);
  o.validate();
  (void)o.flag_values();
  const int ranks = o.ranks();
  if (ranks < 1) __builtin_trap();  // validate() accepted a configuration without ranks
  (void)o.lr_at(static_cast<int64_t>(text.size()) % 7, 5);
}

// `dpx collective`'s sizes and names, as its run() checks them: collective, algo, dtype, op,
// -b, -e, -i, then -f and --ranks as numbers.
void collective_fields(const std::string& text) {
  std::vector<std::string> field = split(text);
  field.resize(9);
  parallel::CollectiveOptions o;
  o.collective = field[0];
  o.algo = field[1];
  o.datatype = field[2];
  o.op = field[3];
  o.min_bytes = parallel::parse_bytes(field[4], "-b");
  o.max_bytes = parallel::parse_bytes(field[5], "-e");
  o.step_bytes = parallel::parse_bytes(field[6], "-i");
  std::from_chars(field[7].data(), field[7].data() + field[7].size(), o.step_factor);
  std::from_chars(field[8].data(), field[8].data() + field[8].size(), o.ranks);
  parallel::validate(o);
  const std::vector<size_t> sizes = parallel::size_steps(o);
  for (size_t i = 0; i < sizes.size(); ++i)  // nccl-tests' sizes: from -b up to -e, growing
    if (sizes[i] < o.min_bytes || sizes[i] > o.max_bytes || (i > 0 && sizes[i] <= sizes[i - 1])) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 7) {
      case 0: {
        const size_t bytes = parallel::parse_bytes(text, "-b");
        if (bytes > size_t{1'000'000'000'000'000}) __builtin_trap();  // parse_bytes' own limit: 1e15
        break;
      }
      case 1: (void)parse_dtype(text); break;
      case 2: (void)parse_device(text); break;
      case 3: (void)parallel::parse_bench_dtype(text); break;
      case 4: {  // --devices alone, as TrainOptions reads it
        parallel::TrainOptions o;
        o.devices = text;
        (void)o.device();
        if (o.ranks() < 1) __builtin_trap();
        break;
      }
      case 5: train_args(text); break;
      case 6: collective_fields(text); break;
    }
  } catch (const Error&) {
    // the expected answer to bad input: a message and exit code 1 or 2
  }
  return 0;
}
