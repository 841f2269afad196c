// The host block cache behind allocate_storage (core/tensor.hpp): a freed block is reused by the
// next allocation of its rounded size without asking the system, zeros() still zeroes a reused
// block, and empty_host_cache gives the blocks back.
#include <doctest/doctest.h>

#include <cstring>

#include "core/tensor.hpp"

using namespace dpx;

TEST_CASE("a freed host block is reused for the same rounded size, and zeros() zeroes it") {
  if (host_cache_cap_bytes() == 0) {
    MESSAGE("the host block cache is off here (DPX_HOST_CACHE_MB=0, or AddressSanitizer): nothing to test");
    return;
  }
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000});
    first = t.raw();
    std::memset(t.raw(), 0xff, t.nbytes());  // garbage that zeros() must not hand out
  }
  const uint64_t system = host_system_allocations();
  const size_t cached = host_bytes_cached();
  CHECK(cached >= 4000);
  {
    Tensor z = Tensor::zeros({999});  // 3996 bytes: the same 64-byte size class as 4000
    CHECK(z.raw() == first);
    CHECK(host_system_allocations() == system);
    CHECK(host_bytes_cached() == cached - 4032);
    for (float v : z.to_vector()) REQUIRE(v == 0.f);
  }
  const size_t in_use = host_bytes_in_use();
  {
    Tensor other = Tensor::empty({5000});  // another size class: from the system
    CHECK(host_system_allocations() == system + 1);
    CHECK(host_bytes_in_use() == in_use + 20000);
  }
  CHECK(host_bytes_in_use() == in_use);  // a cached block is not in use
  CHECK(host_bytes_cached() >= 20032);
  empty_host_cache();
  CHECK(host_bytes_cached() == 0);
  Tensor again = Tensor::empty({1000});
  CHECK(host_system_allocations() == system + 2);
}
