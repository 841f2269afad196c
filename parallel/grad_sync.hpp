// How a rank's gradients are synchronised with the other ranks after (or during) backward.
// The single-replica run uses NoSync; DistributedDataParallel (ddp.hpp) fuses gradients into
// buckets and all-reduces them while backward goes on.
#pragma once
#include <cstdint>

#include "core/context.hpp"
#include "core/phase_timer.hpp"
#include "layers/model.hpp"

namespace dpx::parallel {

class GradSync {
 public:
  virtual ~GradSync() = default;
  // Binds to the rank's replica (sets its gradient-ready hook where needed).
  virtual void attach(nn::Model& model) = 0;
  // Before backward. `sync` is false on the non-final micro-steps of gradient accumulation.
  virtual void begin_backward(bool sync) = 0;
  // After backward: waits until every gradient is reduced and averaged. Adds comm_total and
  // comm_exposed to the timer.
  virtual void finish(Context& ctx, PhaseTimer& timer) = 0;
  // Bytes this rank sent since the last call (counted by the communicator).
  virtual uint64_t take_sent_bytes() = 0;
};

class NoSync final : public GradSync {
 public:
  void attach(nn::Model&) override {}
  void begin_backward(bool) override {}
  void finish(Context&, PhaseTimer&) override {}
  uint64_t take_sent_bytes() override { return 0; }
};

}  // namespace dpx::parallel
