// Per-step phase times. The phases and their boundaries are documented once, in docs/measuring.md
// ("Phases"); trainers time them with parallel::PhaseScope (parallel/train/device_env.hpp), which puts
// a PhaseTimer::Scope around the code of each phase and marks its begin and end on the device.
#pragma once
#include <array>
#include <string_view>

#include "core/clock.hpp"

namespace dpx {

// The phases of a step (docs/measuring.md, "Phases"). All but two are intervals a scope times on the
// rank's clock. comm_total is the sum of the step's gradient all-reduces (they overlap backward);
// wait is computed after the run from every rank's end of backward, by one function,
// parallel::fill_wait_times (parallel/bench/metrics.hpp):
//   wait = the slowest rank's end of backward in the step − this rank's end of backward,
// on every step at which the ranks' gradients are reduced (DDP: the last micro-step of each
// accumulation group; DataParallel: every step, when the master sums the replicas' gradients);
// 0 on the others. It is the time a rank idles at the gradient synchronisation, waiting for the
// slowest rank to finish its compute.
enum class Phase { load, h2d, forward, backward, comm_total, comm_exposed, optimizer, wait, step };
inline constexpr int kPhaseCount = 9;
inline constexpr std::array<std::string_view, kPhaseCount> kPhaseNames = {
    "load", "h2d", "forward", "backward", "comm_total", "comm_exposed", "optimizer", "wait", "step"};
inline std::string_view phase_name(Phase p) { return kPhaseNames[static_cast<int>(p)]; }

struct StepTimes {
  std::array<double, kPhaseCount> s{};  // seconds per phase
  double& operator[](Phase p) { return s[static_cast<int>(p)]; }
  double operator[](Phase p) const { return s[static_cast<int>(p)]; }
};

class PhaseTimer {
 public:
  // Adds the time from construction to destruction to one phase of the current step. A scope
  // opened inside another takes its time out of the outer one (DataParallel's scatter and
  // gather are communication inside its forward phase): every second counts once.
  class Scope {
   public:
    Scope(PhaseTimer& t, Phase p) : t_(t), p_(p), outer_(t.open_), start_(now_s()) { t.open_ = this; }
    ~Scope() {
      const double took = now_s() - start_;
      t_.add(p_, took - inner_);
      if (outer_) outer_->inner_ += took;
      t_.open_ = outer_;
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
   private:
    PhaseTimer& t_;
    Phase p_;
    Scope* outer_;
    double start_;
    double inner_ = 0;  // time of the scopes opened inside this one
  };

  Scope scope(Phase p) { return Scope(*this, p); }
  void add(Phase p, double seconds) { cur_[p] += seconds; }
  const StepTimes& current() const { return cur_; }
  // Returns the finished step's times and starts a new step.
  StepTimes take() { StepTimes out = cur_; cur_ = {}; return out; }

 private:
  StepTimes cur_;
  Scope* open_ = nullptr;  // the innermost open scope
};

}  // namespace dpx
