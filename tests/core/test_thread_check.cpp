// A run's threads are asked for before OpenMP starts them: a refusal is a usage error that names
// the flag and the limits, not libgomp's "Thread creation failed" and an exit.
#include <doctest/doctest.h>
#include <pthread.h>

#include <string>

#include "core/error.hpp"
#include "core/thread_check.hpp"

TEST_CASE("the threads a run needs are asked for first; a refusal names the flag and the limits") {
  CHECK_NOTHROW(dpx::check_threads_available(1, "--threads 1"));
  CHECK_NOTHROW(dpx::check_threads_available(16, "--threads 16"));
  // A stack no address space holds (128 TiB) for every new thread: the system refuses the first.
  pthread_attr_t old;
  REQUIRE(pthread_getattr_default_np(&old) == 0);
  pthread_attr_t huge;
  pthread_attr_init(&huge);
  REQUIRE(pthread_attr_setstacksize(&huge, size_t{1} << 47) == 0);
  REQUIRE(pthread_setattr_default_np(&huge) == 0);
  std::string message;
  try {
    dpx::check_threads_available(4, "--threads 4");
  } catch (const dpx::UsageError& e) {
    message = e.what();
  }
  pthread_setattr_default_np(&old);
  pthread_attr_destroy(&huge);
  pthread_attr_destroy(&old);
  CAPTURE(message);
  CHECK(message.find("--threads 4 needs 4 threads at once, but the system refused thread 2 (") != std::string::npos);
  CHECK(message.find("ulimit -u (processes and threads): ") != std::string::npos);
  CHECK(message.find("Ask for fewer threads, or raise the limit that stopped them") != std::string::npos);
  CHECK_NOTHROW(dpx::check_threads_available(4, "--threads 4"));  // the default stack again
}
