// Dynamic loss scaling (see loss_scaler.hpp).
#include "parallel/train/loss_scaler.hpp"

#include <cmath>

#include "core/error.hpp"

namespace dpx::parallel {

LossScaler::LossScaler(const LossScaleOptions& options) : options_(options), scale_(options.init_scale) {
  DPX_CHECK(std::isfinite(scale_) && scale_ > 0, "loss scale must be a positive number, got ", scale_);
  DPX_CHECK(options.growth_interval >= 1, "loss scale growth interval must be >= 1, got ", options.growth_interval);
}

bool LossScaler::update(bool found_inf) {
  if (!options_.dynamic) return true;
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    ++skipped_;
    return false;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    // As GradScaler: the scale grows only while it stays finite.
    const float grown = scale_ * options_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
  return true;
}

void LossScaler::restore(float scale, int64_t good_updates) {
  DPX_CHECK(std::isfinite(scale) && scale > 0 && good_updates >= 0 && good_updates < options_.growth_interval,
            "a loss scaler's state must be a positive scale and fewer good updates than its interval, got ", scale,
            " and ", good_updates);
  scale_ = scale;
  growth_tracker_ = good_updates;
}

}  // namespace dpx::parallel
