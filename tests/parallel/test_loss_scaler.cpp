// The loss scaler against GradScaler's rules (torch/amp/grad_scaler.py): the exact sequence of
// scales and skips for a given pattern of overflowing updates.
#include <doctest/doctest.h>

#include <cstddef>
#include <limits>
#include <vector>

#include "parallel/train/loss_scaler.hpp"

using namespace dpx::parallel;

TEST_CASE("a dynamic loss scaler halves and skips on overflow, doubles after growth_interval good updates") {
  LossScaler s({.dynamic = true, .init_scale = 65536.f, .growth_factor = 2.f, .backoff_factor = 0.5f,
                .growth_interval = 3});
  // Two overflows, then three good updates (growth), one overflow, two good, one overflow.
  const std::vector<bool> inf = {true, true, false, false, false, false, true, false, false, true};
  const std::vector<bool> want_step = {false, false, true, true, true, true, false, true, true, false};
  const std::vector<float> want_scale_after = {32768, 16384, 16384, 16384, 32768, 32768, 16384, 16384, 16384, 8192};
  for (size_t i = 0; i < inf.size(); ++i) {
    CAPTURE(i);
    CHECK(s.update(inf[i]) == want_step[i]);
    CHECK(s.scale() == want_scale_after[i]);
  }
  CHECK(s.skipped_updates() == 4);
  CHECK(s.good_updates() == 0);  // reset by the last overflow
}

TEST_CASE("the defaults are GradScaler's: 2^16, x2 after 2000 good updates, x0.5 on overflow") {
  LossScaler s(LossScaleOptions{});
  CHECK(s.scale() == 65536.f);
  for (int i = 0; i < 1999; ++i) REQUIRE(s.update(false));
  CHECK(s.scale() == 65536.f);
  CHECK(s.good_updates() == 1999);
  CHECK(s.update(false));
  CHECK(s.scale() == 131072.f);
  CHECK(s.good_updates() == 0);
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 65536.f);
}

TEST_CASE("the scale stops growing where it would overflow float, and a constant scale never moves") {
  LossScaler big({.dynamic = true, .init_scale = std::numeric_limits<float>::max() / 1.5f, .growth_factor = 2.f,
                  .backoff_factor = 0.5f, .growth_interval = 1});
  const float before = big.scale();
  CHECK(big.update(false));
  CHECK(big.scale() == before);
  LossScaler constant({.dynamic = false, .init_scale = 128.f});
  CHECK(constant.update(true));  // the divergence guard (--on-nonfinite) decides, not the scaler
  CHECK(constant.update(false));
  CHECK(constant.scale() == 128.f);
  CHECK(constant.skipped_updates() == 0);
}
