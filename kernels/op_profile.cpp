// The op profiler's totals: one table per thread (behind its own, uncontended mutex), kept in a
// registry so snapshot() and reset() reach every thread's, also after a thread has ended.
#include "kernels/op_profile.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/cuda/memory.hpp"
#ifdef DPX_WITH_CUDA
#include "core/cuda/context.hpp"
#endif

namespace dpx::ops::profile {

namespace detail {
std::atomic<bool> g_enabled{false};
}

namespace {

struct Totals {
  int64_t calls = 0;
  double total_s = 0, flops = 0;
  bool has_flops = false;
};

// One thread's totals, keyed by the op's name (a string literal of ops.cpp: one address per op).
struct ThreadTotals {
  std::mutex mu;
  std::unordered_map<const char*, Totals> by_op;
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

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A GPU op is queued, not run: wait for the context's stream so that the time is the op's.
void wait_for_device(const Context& ctx) {
  if (ctx.device.is_cpu()) return;
#ifdef DPX_WITH_CUDA
  cuda::synchronize(cuda::state_of(ctx).stream, ctx.device.index);
#endif
}

}  // namespace

void set_enabled(bool on) { detail::g_enabled.store(on, std::memory_order_relaxed); }

bool counting() { return t_counting; }

Counting::Counting(bool on) : previous_(t_counting) { t_counting = on; }
Counting::~Counting() { t_counting = previous_; }

void reset() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  // A table only the registry still holds belongs to a thread that has ended: dropped.
  std::erase_if(r.threads, [](const std::shared_ptr<ThreadTotals>& t) { return t.use_count() == 1; });
  for (auto& t : r.threads) {
    std::lock_guard<std::mutex> thread_lock(t->mu);
    t->by_op.clear();
  }
}

std::vector<OpStats> snapshot() {
  std::map<std::string, OpStats> merged;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto& t : r.threads) {
      std::lock_guard<std::mutex> thread_lock(t->mu);
      for (const auto& [name, totals] : t->by_op) {
        OpStats& s = merged[name];
        s.name = name;
        s.calls += totals.calls;
        s.total_s += totals.total_s;
        s.flops += totals.flops;
        s.has_flops = s.has_flops || totals.has_flops;
      }
    }
  }
  std::vector<OpStats> out;
  for (auto& [name, s] : merged) out.push_back(std::move(s));
  std::stable_sort(out.begin(), out.end(), [](const OpStats& a, const OpStats& b) { return a.total_s > b.total_s; });
  return out;
}

Call::Call(const Context& ctx, const char* name, double flops) {
  if (!enabled() || !t_counting) return;
  ctx_ = &ctx;
  name_ = name;
  flops_ = flops;
  wait_for_device(ctx);
  start_ns_ = now_ns();
}

Call::~Call() {
  if (!ctx_ || std::uncaught_exceptions() > 0) return;  // an op that threw is not a measurement
  try {
    wait_for_device(*ctx_);
  } catch (...) {
    return;  // the device's error surfaces at the next call that checks it
  }
  const double seconds = static_cast<double>(now_ns() - start_ns_) * 1e-9;
  ThreadTotals& t = this_thread_totals();
  std::lock_guard<std::mutex> lock(t.mu);
  Totals& totals = t.by_op[name_];
  ++totals.calls;
  totals.total_s += seconds;
  if (flops_ >= 0) {
    totals.flops += flops_;
    totals.has_flops = true;
  }
}

}  // namespace dpx::ops::profile
