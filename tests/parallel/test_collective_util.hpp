// Shared by the collective test suites: a watchdog that ends the test binary when a test hangs
// (a deadlock cannot be failed from inside), and closed-form data whose reductions are exact.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace dpx::testing {

// Exits the process with a message if not destroyed within `seconds`.
class Watchdog {
 public:
  Watchdog(double seconds, std::string what)
      : thread_([this, seconds, what = std::move(what)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) {
            std::fprintf(stderr, "TIMEOUT: '%s' took longer than %.0f s (deadlock?)\n", what.c_str(), seconds);
            std::fflush(stderr);
            std::_Exit(124);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

// Rank r's element i: its rank shows in (i + r) mod k, its position in i mod m. Sums over k
// ranks are k(k+1)/2 + k*k*(i mod m): exact in f32 for the sizes the tests use.
inline double value(int r, size_t i, int k, size_t m = 61) {
  return 1.0 + static_cast<double>((i + static_cast<size_t>(r)) % static_cast<size_t>(k)) +
         static_cast<double>(k) * static_cast<double>(i % m);
}
inline double expected_sum(size_t i, int k, size_t m = 61) {
  return k * (k + 1) / 2.0 + static_cast<double>(k) * k * static_cast<double>(i % m);
}
inline double expected_max(size_t i, int k, size_t m = 61) { return k + static_cast<double>(k) * (i % m); }
inline double expected_min(size_t i, int k, size_t m = 61) { return 1 + static_cast<double>(k) * (i % m); }

}  // namespace dpx::testing
