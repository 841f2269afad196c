// A tampered checkpoint is refused, never trusted (issue "Safe with anyone's files", class 3): every
// number the reader takes from it is range-checked, and the error names the field. The files are
// the fuzz target's seeds (tests/fuzz/corpus/checkpoint, made by tests/fuzz/make_seeds.py). Seen
// failing before: a step record naming rank 5 of a 1-rank run was accepted (and later wrote past a
// vector's end), as were a negative global step and NaN records.
#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "parallel/train/checkpoint.hpp"

namespace {

dpx::parallel::Checkpoint read_seed(const std::string& name) {
  const std::string path = std::string(DPX_SOURCE_DIR) + "/tests/fuzz/corpus/checkpoint/" + name;
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return dpx::parallel::checkpoint_from(dpx::decode_safetensors(bytes, name), name);
}

}  // namespace

TEST_CASE("a well-formed checkpoint is read whole") {
  const dpx::parallel::Checkpoint c = read_seed("good");
  CHECK(c.ranks == 2);
  CHECK(c.progress.global_step == 2);
  REQUIRE(c.steps.size() == 4);
  CHECK(c.steps[3].rank == 1);
  CHECK(c.order == std::vector<int64_t>{2, 0, 1});
  CHECK(read_seed("one_rank_epochs").epochs.size() == 1);
}

TEST_CASE("a checkpoint with a field out of its range is refused, naming the field") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bad_record_rank", "step record 0's rank is 5, not a whole number in [0, 0]"},
      {"bad_record_rank_negative", "step record 0's rank is -1"},
      {"bad_record_step_nan", "step record 0's global step is nan"},
      {"bad_record_time_inf", "step record 0's step time is inf, not a finite number >= 0"},
      {"bad_progress_negative", "progress's global step is -3"},
      {"bad_ranks_zero", "it says it was made by 0 ranks"},
  };
  for (const auto& [seed, needle] : cases) {
    CAPTURE(seed);
    std::string message;
    try {
      read_seed(seed);
    } catch (const dpx::Error& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(message.find(needle) != std::string::npos);
    CHECK(message.find("it is not a checkpoint this dpx can resume from") != std::string::npos);
  }
}
