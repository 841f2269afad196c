// How a rank's gradients are reduced over the replicas, around backward (parallel/train/train_step.cpp):
//   grad_sync.begin_step(sync);   // before backward
//   model.backward(...);          // DDP: buckets all-reduce as their gradients become ready
//   grad_sync.finish(...);        // waits for every bucket
// A step recorded for --cuda-graph (graph_step.hpp) calls record_finish inside the recorded
// work instead of finish, and finish_replayed after each replay.
// The single-replica run uses NoSync; DistributedDataParallel (reducer.hpp) fuses gradients into
// buckets and all-reduces them while backward goes on; DataParallel (data_parallel.cpp) sums
// its replicas' gradients into the master after their backward.
#pragma once
#include <cstdint>
#include <vector>

#include "core/context.hpp"
#include "layers/model.hpp"
#include "parallel/comm/work.hpp"
#include "parallel/train/device_env.hpp"
#include "parallel/train/trace_span.hpp"

namespace dpx::parallel {

class GradSync {
 public:
  virtual ~GradSync() = default;
  // Before backward. `sync` is false on the non-final micro-steps of gradient accumulation.
  virtual void begin_step(bool /*sync*/) {}
  // After backward, every step: waits until every gradient is reduced (nothing to do on a
  // step that does not sync), timing comm_total and comm_exposed.
  virtual void finish(Context& /*ctx*/, StepPhases& /*phases*/) {}
  // Inside a recorded step, after backward: what finish() does, with the device, not the host,
  // waiting for the collectives; returns the step's calls, which every replay runs again.
  virtual std::vector<Work> record_finish(Context& /*ctx*/, StepPhases& /*phases*/) { return {}; }
  // After a replay of a step that recorded `calls`: waits for them on the host (so the watchdog
  // times them), and counts and times them as finish() does.
  virtual void finish_replayed(const std::vector<Work>& /*calls*/, StepPhases& /*phases*/) {}
  // Bytes this rank sent for its gradients since the last call (counted by the communicator).
  virtual uint64_t take_sent_bytes() { return 0; }
  // The all-reduces of the last finish(), one bucket span each (DDP; none for the others), for the
  // trace: on this rank's steady clock, rank and step left for the caller; start 0 where they were
  // timed on a device (nccl, p2p).
  virtual std::vector<TraceSpan> take_bucket_spans() { return {}; }
};

class NoSync final : public GradSync {};

}  // namespace dpx::parallel
