// The launch counter behind --profile-ops's kernel column: a launch counts once however the API
// callbacks nest (a runtime launch made through a driver launch, an internal entry point calling
// the public one), and each thread counts its own.
#include <doctest/doctest.h>

#include <thread>

#include "core/launch_count.hpp"

TEST_CASE("a launch counts once at its outermost callback; an unmatched exit is ignored") {
  dpx::LaunchCounter c;
  c.enter();  // cudaLaunchKernel ...
  c.enter();  // ... made through cuLaunchKernel
  c.exit();
  c.exit();
  CHECK(c.launches() == 1);
  c.enter();
  c.exit();
  CHECK(c.launches() == 2);
  c.exit();  // a callback subscribed after an enter: no underflow
  c.enter();
  c.exit();
  CHECK(c.launches() == 3);
}

TEST_CASE("each thread counts its own launches") {
  dpx::this_thread_launches().enter();
  dpx::this_thread_launches().exit();
  const int64_t mine = dpx::this_thread_launches().launches();
  int64_t other = -1;
  std::thread t([&] {
    for (int i = 0; i < 5; ++i) {
      dpx::this_thread_launches().enter();
      dpx::this_thread_launches().exit();
    }
    other = dpx::this_thread_launches().launches();
  });
  t.join();
  CHECK(other == 5);
  CHECK(dpx::this_thread_launches().launches() == mine);
}
