// The op profiler's totals: one table per thread (behind its own, uncontended mutex), kept in a
// registry so snapshot() and reset() reach every thread's, also after a thread has ended. A GPU
// op's events wait in its thread's table until the Counting scope ends, then are read.
#include "kernels/op_profile.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/tensor.hpp"
#include "core/launch_count.hpp"
#ifdef DPX_WITH_CUDA
#include <cuda_runtime.h>

#include "core/cuda/context.hpp"
#include "core/cuda/device_guard.hpp"
#include "core/cuda/launch_counter.hpp"
#endif

namespace dpx::ops::profile {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

std::atomic<bool> g_by_shape{false};  // set_by_shape

struct Totals {
  int64_t calls = 0;
  double total_s = 0, host_s = 0, flops = 0;
  int64_t kernels = 0;
  bool kernels_known = true, has_flops = false, on_gpu = false;
};

// An op's totals are kept per (name, shape); the shape is "" unless by_shape().
using OpKey = std::pair<std::string_view, std::string>;

// A GPU op whose events have not been read yet.
struct Pending {
  const char* name;
  std::string shape;
  double flops;
  double host_s;
  int64_t kernels;  // -1: unknown
  void* start;      // cudaEvent_t
  void* end;
  int device;
};

// One thread's totals, keyed by the op's name (a string literal of ops.cpp) and shape.
struct ThreadTotals {
  std::mutex mu;
  std::map<OpKey, Totals> by_op;
  std::vector<Pending> pending;
};

struct Registry {
  std::mutex mu;
  std::vector<std::shared_ptr<ThreadTotals>> threads;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may count while the process exits
  return *r;
}

ThreadTotals& this_thread_totals() {
  thread_local std::shared_ptr<ThreadTotals> mine = [] {
    auto t = std::make_shared<ThreadTotals>();
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.threads.push_back(t);
    return t;
  }();
  return *mine;
}

thread_local bool t_counting = false;
thread_local bool t_tracing = false;
thread_local std::vector<OpSpan> t_spans;

// Every op's name, in kernels/ops.def's order: the number a span travels with (the same in every
// process of an MPI job, as the string literals' addresses are not).
constexpr const char* kOpNames[] = {
#define DPX_OP(ret, name, params, args) #name,
#include "kernels/ops.def"
#undef DPX_OP
};
constexpr int kOpCount = static_cast<int>(sizeof(kOpNames) / sizeof(kOpNames[0]));

// The op that last raised the memory high-water mark, and the mark.
std::mutex g_peak_mu;
PeakOp g_peak;
std::atomic<bool> g_window_pending{true};  // the next Counting scope resets the memory windows

void note_peak(const Context& ctx, const char* name, size_t before) {
  const size_t after = window_peak_bytes(ctx.device);
  if (after <= before) return;
  std::lock_guard<std::mutex> lock(g_peak_mu);
  if (after <= g_peak.bytes) return;
  g_peak = {name, after, ctx.device.is_cuda()};
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void add(Totals& t, double seconds, double host_s, int64_t kernels, double flops, bool on_gpu) {
  ++t.calls;
  t.total_s += seconds;
  t.host_s += host_s;
  if (kernels >= 0) t.kernels += kernels;
  else t.kernels_known = false;
  if (flops >= 0) {
    t.flops += flops;
    t.has_flops = true;
  }
  t.on_gpu = t.on_gpu || on_gpu;
}

#ifdef DPX_WITH_CUDA
// Timing events, kept per device for reuse (created once, never destroyed: destroying them after
// main() returns races the CUDA runtime's teardown). Only the thread that owns the pool uses it.
struct EventPool {
  std::map<int, std::vector<cudaEvent_t>> free;
  void* take(int device) {
    auto& f = free[device];
    if (!f.empty()) {
      cudaEvent_t e = f.back();
      f.pop_back();
      return e;
    }
    int previous = 0;
    cudaGetDevice(&previous);
    cudaSetDevice(device);
    cudaEvent_t e = nullptr;
    const cudaError_t err = cudaEventCreate(&e);
    cuda::restore_device(previous);
    return err == cudaSuccess ? e : nullptr;
  }
  void give(int device, void* e) {
    if (e) free[device].push_back(static_cast<cudaEvent_t>(e));
  }
};
EventPool& event_pool() {
  thread_local EventPool* pool = new EventPool;
  return *pool;
}

// Reads the GPU times of `t`'s pending ops into its totals; an event that cannot be read drops
// its op (a device error surfaces at the next call that checks). Called with t.mu held.
void resolve(ThreadTotals& t) {
  for (const Pending& p : t.pending) {
    float ms = 0;
    const bool ok = p.start && p.end && cudaEventSynchronize(static_cast<cudaEvent_t>(p.end)) == cudaSuccess &&
                    cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(p.start), static_cast<cudaEvent_t>(p.end)) ==
                        cudaSuccess;
    if (ok) add(t.by_op[OpKey(p.name, p.shape)], ms * 1e-3, p.host_s, p.kernels, p.flops, true);
    else (void)cudaGetLastError();
    event_pool().give(p.device, p.start);
    event_pool().give(p.device, p.end);
  }
  t.pending.clear();
}
#else
void resolve(ThreadTotals& t) { t.pending.clear(); }
#endif

}  // namespace

void set_enabled(bool on) {
  detail::g_enabled.store(on, std::memory_order_relaxed);
#ifdef DPX_WITH_CUDA
  if (on && cuda::available()) (void)cuda::count_launches();  // once: GPU ops then report their kernels
#endif
}

bool counting() { return t_counting; }

void set_by_shape(bool on) { g_by_shape.store(on, std::memory_order_relaxed); }
bool by_shape() { return g_by_shape.load(std::memory_order_relaxed); }

bool counts_now() { return enabled() && t_counting; }

Counting::Counting(bool on) : previous_(t_counting) {
  t_counting = on;
  // The first counted step after a reset starts the memory window: the warm-up's high-water
  // mark, reached before, would otherwise hide the op that reaches it again.
  if (on && enabled() && g_window_pending.exchange(false)) reset_window_peaks();
}
Counting::~Counting() {
  t_counting = previous_;
  if (t_counting) return;  // an enclosing scope reads them
  try {
    ThreadTotals& t = this_thread_totals();
    std::lock_guard<std::mutex> lock(t.mu);
    resolve(t);
  } catch (...) {  // a destructor: never throws
  }
}

void reset() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  // A table only the registry still holds belongs to a thread that has ended: dropped.
  std::erase_if(r.threads, [](const std::shared_ptr<ThreadTotals>& t) { return t.use_count() == 1; });
  {
    std::lock_guard<std::mutex> peak_lock(g_peak_mu);
    g_peak = {};
    g_window_pending = true;
  }
  for (auto& t : r.threads) {
    std::lock_guard<std::mutex> thread_lock(t->mu);
    t->by_op.clear();
    t->pending.clear();  // their events stay with their threads' pools only when read; a reset drops them
  }
}

std::vector<OpStats> snapshot() {
  {  // this thread's ops still waiting to be read (a caller outside any Counting scope)
    ThreadTotals& mine = this_thread_totals();
    std::lock_guard<std::mutex> lock(mine.mu);
    resolve(mine);
  }
  std::map<OpKey, OpStats> merged;
  std::map<OpKey, bool> kernels_known;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto& t : r.threads) {
      std::lock_guard<std::mutex> thread_lock(t->mu);
      for (const auto& [key, totals] : t->by_op) {
        OpStats& s = merged[key];
        s.name = key.first;
        s.shape = key.second;
        s.calls += totals.calls;
        s.total_s += totals.total_s;
        s.host_s += totals.host_s;
        if (s.kernels < 0) s.kernels = 0;
        s.kernels += totals.kernels;
        auto [known, fresh] = kernels_known.try_emplace(key, true);
        known->second = known->second && totals.kernels_known;
        s.flops += totals.flops;
        s.has_flops = s.has_flops || totals.has_flops;
        s.on_gpu = s.on_gpu || totals.on_gpu;
      }
    }
  }
  std::vector<OpStats> out;
  for (auto& [key, s] : merged) {
    if (!kernels_known[key]) s.kernels = -1;
    out.push_back(std::move(s));
  }
  std::stable_sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) { return a.total_s > b.total_s; });
  return out;
}

Tracing::Tracing(bool on) : previous_(t_tracing) { t_tracing = on; }
Tracing::~Tracing() { t_tracing = previous_; }

bool tracing() { return t_tracing; }

std::vector<OpSpan> take_spans() { return std::exchange(t_spans, {}); }

void add_spans(const std::vector<OpSpan>& spans) { t_spans.insert(t_spans.end(), spans.begin(), spans.end()); }

const char* op_name(int op) { return op >= 0 && op < kOpCount ? kOpNames[op] : "?"; }

int op_index(const char* name) {
  static const std::unordered_map<std::string_view, int> rows = [] {
    std::unordered_map<std::string_view, int> out;
    for (int i = 0; i < kOpCount; ++i) out.emplace(kOpNames[i], i);
    return out;
  }();
  const auto it = rows.find(name);
  return it == rows.end() ? -1 : it->second;
}

PeakOp peak_op() {
  std::lock_guard<std::mutex> lock(g_peak_mu);
  return g_peak;
}

Call::Call(const Context& ctx, const char* name, double flops, std::string shape) {
  if (!enabled() || !(t_counting || t_tracing)) return;
  ctx_ = &ctx;
  name_ = name;
  shape_ = std::move(shape);
  counted_ = t_counting;
  if (!counted_) {  // traced only: its span is its host time
    start_ns_ = now_ns();
    return;
  }
  flops_ = flops;
  peak_before_ = window_peak_bytes(ctx.device);
#ifdef DPX_WITH_CUDA
  if (ctx.device.is_cuda()) {
    cuda::CudaState& st = cuda::state_of(ctx);  // makes the op's device current
    start_event_ = event_pool().take(st.device);
    if (start_event_) (void)cudaEventRecord(static_cast<cudaEvent_t>(start_event_), st.stream);
    if (cuda::counting_launches()) launches_ = this_thread_launches().launches();
  }
#endif
  start_ns_ = now_ns();
}

Call::~Call() {
  if (!ctx_) return;
  const double host_s = static_cast<double>(now_ns() - start_ns_) * 1e-9;
  if (t_tracing && std::uncaught_exceptions() == 0)
    t_spans.push_back({op_index(name_), static_cast<double>(start_ns_) * 1e-9, host_s, 0});
  if (!counted_) return;
  note_peak(*ctx_, name_, peak_before_);
  ThreadTotals& t = this_thread_totals();
#ifdef DPX_WITH_CUDA
  if (ctx_->device.is_cuda()) {
    const int device = ctx_->device.index;
    if (std::uncaught_exceptions() > 0) {  // an op that threw is not a measurement
      event_pool().give(device, start_event_);
      return;
    }
    void* end = event_pool().take(device);
    cudaStream_t stream = nullptr;
    try {
      stream = cuda::state_of(*ctx_).stream;
    } catch (...) {
    }
    if (end) (void)cudaEventRecord(static_cast<cudaEvent_t>(end), stream);
    const int64_t kernels = launches_ >= 0 ? this_thread_launches().launches() - launches_ : -1;
    std::lock_guard<std::mutex> lock(t.mu);
    t.pending.push_back({name_, std::move(shape_), flops_, host_s, kernels, start_event_, end, device});
    return;
  }
#endif
  if (std::uncaught_exceptions() > 0) return;
  std::lock_guard<std::mutex> lock(t.mu);
  add(t.by_op[OpKey(name_, std::move(shape_))], host_s, host_s, -1, flops_, false);
}

}  // namespace dpx::ops::profile
