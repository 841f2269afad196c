// The op profiler behind `dpx bench --profile-ops`: when enabled, every op that kernels/ops.cpp
// dispatches adds its time, its host time, the kernels it launched, one call and (for the
// products: convolutions, linear, matmul) its floating-point operations to a per-op total. Off, an
// op pays one relaxed atomic load.
//
// Two switches decide whether a call counts: the process-wide one (set_enabled), and a
// thread-local one (Counting, off by default) that the training loop turns on for the measured
// steps of each rank's thread, so that warmup steps, model set-up and evaluation stay out.
// Each thread adds to its own totals (no contention between replica threads); snapshot() merges
// them. On the CPU an op's time is its wall time. On CUDA nothing waits: a pair of CUDA events is
// recorded on the context's stream around each counted op, and the events are read when the
// Counting scope ends (the training loop's step, which has waited for the device already), so an
// op's time is the GPU time from its first kernel's start to its last one's end; its host time is
// what the host spent issuing it, and its kernels are counted by CUPTI's launch callbacks where
// libcupti can be loaded (core/cuda/launch_counter.hpp; else unknown, -1).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/context.hpp"

namespace dpx::ops::profile {

namespace detail {
extern std::atomic<bool> g_enabled;
}

// The process-wide switch. Turning it on does not clear what was counted: reset() does.
void set_enabled(bool on);
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

// Whether the totals are kept per op (off: the default) or per op and call shape (on:
// `--profile-shapes`, as torch.profiler's record_shapes with key_averages(group_by_input_shape)):
// each call then also carries its tensors' shapes and its convolution or pooling parameters
// (kernels/ops.cpp's op_shape), and calls of one op on different shapes are counted apart.
void set_by_shape(bool on);
bool by_shape();

// Whether the ops this thread runs are counted (when enabled()). Off in every thread until a
// Counting scope turns it on; the scope puts back what was there before.
bool counting();
class Counting {
 public:
  explicit Counting(bool on);
  ~Counting();  // reads the GPU times of this thread's ops (never throws)
  Counting(const Counting&) = delete;
  Counting& operator=(const Counting&) = delete;

 private:
  bool previous_;
};

// Forgets every count, in every thread. Call it when no counted op is running.
void reset();

struct OpStats {
  std::string name;     // the op's name in kernels/ops.def
  std::string shape;    // by_shape(): the calls' tensor shapes and parameters ("64x3x224x224 ... s2x2"); else ""
  int64_t calls = 0;
  double total_s = 0;   // time summed over the calls (and threads): wall time on CPUs, GPU time on GPUs
  double host_s = 0;    // host time spent issuing the calls (on CPUs the same as total_s)
  int64_t kernels = -1;  // GPU kernels the calls launched; -1: unknown (CPU ops, no CUPTI)
  double flops = 0;     // floating-point operations summed over the calls (a multiply-add is 2)
  bool has_flops = false;  // false for ops whose FLOPs are not defined here (print "-")
  bool on_gpu = false;     // total_s is GPU time (CUDA events)
};
// Every op counted since the last reset, merged over threads, by total time (largest first).
std::vector<OpStats> snapshot();

// The op during whose calls the memory in use reached its most since the last reset (counted
// calls only): live host tensors for CPU ops, the GPU allocator's bytes in use for GPU ops. With
// several ranks in one process, the process's host bytes: the op of whichever rank raised them.
struct PeakOp {
  std::string name;  // empty: no counted op raised the mark
  uint64_t bytes = 0;
  bool on_gpu = false;
};
PeakOp peak_op();

// The ops of a traced step (dpx train --trace with --profile-ops): while a Tracing scope is alive
// in a thread and enabled(), every op that thread calls, counted or not, also leaves a span with
// its host wall time (on CUDA: the time the host spent issuing it, its GPU time being in the
// totals). Spans nest as the ops do (an op that calls others holds them).
struct OpSpan {
  int op = -1;          // the op's row in kernels/ops.def (op_name)
  double start_s = 0;   // steady clock (core/clock.hpp's now_s)
  double seconds = 0;
  int replica = 0;      // the DataParallel replica whose thread ran it (parallel_apply); else 0
};
class Tracing {
 public:
  explicit Tracing(bool on);
  ~Tracing();
  Tracing(const Tracing&) = delete;
  Tracing& operator=(const Tracing&) = delete;

 private:
  bool previous_;
};
// Whether this thread traces its ops (a Tracing scope on): threads a traced caller starts trace
// theirs too, and hand their spans back with add_spans.
bool tracing();
// This thread's spans since the last call, in the order the ops ended.
std::vector<OpSpan> take_spans();
// Adds `spans` (another thread's, taken there) to this thread's.
void add_spans(const std::vector<OpSpan>& spans);
// The name of row `op` of kernels/ops.def ("?" outside it), and the row of a name (-1: none).
const char* op_name(int op);
int op_index(const char* name);

// Whether an op called now is counted: enabled() and counting() (the dispatcher describes a
// call's shape only then).
bool counts_now();

// One op call, timed from construction to destruction when enabled() and counting() (or
// tracing); made by the dispatcher with the op's FLOPs (negative: not defined for this op) and,
// when by_shape(), its shape.
class Call {
 public:
  Call(const Context& ctx, const char* name, double flops, std::string shape = {});
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

 private:
  const Context* ctx_ = nullptr;  // null: this call is neither counted nor traced
  bool counted_ = false;
  const char* name_ = nullptr;
  std::string shape_;
  double flops_ = -1;
  int64_t start_ns_ = 0;
  int64_t launches_ = -1;  // this thread's launch count at the start; -1: not counting launches
  size_t peak_before_ = 0;  // the memory high-water mark (host or this device's window) at the start
  void* start_event_ = nullptr;  // CUDA: the event recorded before the op's work (a cudaEvent_t)
};


}  // namespace dpx::ops::profile
