// Per-step phase times. The phases and their boundaries are documented once, in README.md
// ("Phases"); trainers mark them with PhaseTimer::Scope around the code of each phase.
#pragma once
#include <array>
#include <string_view>

#include "core/clock.hpp"

namespace dpx {

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
  // Adds the time from construction to destruction to one phase of the current step.
  class Scope {
   public:
    Scope(PhaseTimer& t, Phase p) : t_(t), p_(p), start_(now_s()) {}
    ~Scope() { t_.add(p_, now_s() - start_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
   private:
    PhaseTimer& t_;
    Phase p_;
    double start_;
  };

  Scope scope(Phase p) { return Scope(*this, p); }
  void add(Phase p, double seconds) { cur_[p] += seconds; }
  const StepTimes& current() const { return cur_; }
  // Returns the finished step's times and starts a new step.
  StepTimes take() { StepTimes out = cur_; cur_ = {}; return out; }

 private:
  StepTimes cur_;
};

}  // namespace dpx
