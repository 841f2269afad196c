// Monotonic clock and a stopwatch. Host phases are timed with std::chrono::steady_clock.
#pragma once
#include <chrono>

namespace dpx {

inline double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

class Stopwatch {
 public:
  Stopwatch() : start_(now_s()) {}
  void reset() { start_ = now_s(); }
  double elapsed_s() const { return now_s() - start_; }
  // Time since the last lap (or start), and starts a new lap.
  double lap_s() { double t = now_s(), d = t - start_; start_ = t; return d; }

 private:
  double start_;
};

}  // namespace dpx
