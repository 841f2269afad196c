// Loss scaling for half-precision gradients (--loss-scale), with the semantics of PyTorch's
// GradScaler (torch/amp/grad_scaler.py, _amp_update_scale_): the loss gradient is multiplied by
// the scale before backward, so that small gradients survive fp16; the reduced gradients are
// divided by it before the optimizer, which never sees the scale. A dynamic scaler skips the
// update whose gradients hold an inf or NaN and multiplies the scale by backoff_factor; after
// growth_interval updates in a row without one, it multiplies the scale by growth_factor.
#pragma once
#include <cstdint>

namespace dpx::parallel {

struct LossScaleOptions {
  bool dynamic = true;             // false: a constant scale, never skipping by itself
  float init_scale = 65536.f;      // 2^16, GradScaler's init_scale
  float growth_factor = 2.f;       // GradScaler's defaults, as the next two
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;  // finite updates in a row before the scale grows
};

class LossScaler {
 public:
  explicit LossScaler(const LossScaleOptions& options);
  float scale() const { return scale_; }
  bool dynamic() const { return options_.dynamic; }
  // After an update's gradients were unscaled: `found_inf` says whether any was inf or NaN.
  // Returns whether the optimizer may step (a dynamic scaler refuses when found_inf), and moves
  // the scale for the next update.
  bool update(bool found_inf);
  int64_t good_updates() const { return growth_tracker_; }  // in a row, since the last change
  int64_t skipped_updates() const { return skipped_; }
  // Where a checkpoint left a dynamic scaler (--resume).
  void restore(float scale, int64_t good_updates);

 private:
  LossScaleOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace dpx::parallel
