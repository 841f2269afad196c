// The host block cache behind allocate_storage (core/tensor.hpp): a freed block is reused by the
// next allocation of its rounded size without asking the system, zeros() still zeroes a reused
// block, and empty_host_cache gives the blocks back; the peaks of live and held bytes.
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

TEST_CASE("the host's peaks: live tensors at their high-water mark, and what the allocator held") {
  reset_memory_peaks();  // the cache emptied, the marks at what is live and held now
  const size_t live0 = host_bytes_in_use(), held0 = host_bytes_reserved();
  CHECK(host_peak_bytes_in_use() == live0);
  CHECK(host_peak_bytes_reserved() == held0);
  {
    // A (4 MB) and B (8 MB) live together, then A goes and C (2 MB) comes: the live peak is A + B.
    Tensor a = Tensor::empty({1 << 20});
    Tensor b = Tensor::empty({2 << 20});
    a = Tensor();
    Tensor c = Tensor::empty({512 << 10});
    CHECK(host_bytes_in_use() == live0 + (10 << 20));
    CHECK(host_peak_bytes_in_use() == live0 + (12 << 20));
    // Held: A's block went to the cache (when it is on) or back to the system; C is of another
    // size, so a new block. The most ever held: A + B + C with the cache, A + B without it.
    const size_t held_peak = held0 + (host_cache_cap_bytes() > 0 ? (14 << 20) : (12 << 20));
    CHECK(host_peak_bytes_reserved() == held_peak);
    CHECK(host_bytes_reserved() == held0 + (host_cache_cap_bytes() > 0 ? (14 << 20) : (10 << 20)));
    const MemoryPeaks m = memory_peaks(Device::cpu());
    CHECK(m.host_allocated == live0 + (12 << 20));
    CHECK(m.host_reserved == held_peak);
    CHECK(m.device_allocated == 0);
  }
  // A reset brings each peak down to what is live and held now.
  reset_memory_peaks();
  CHECK(host_peak_bytes_in_use() == host_bytes_in_use());
  CHECK(host_peak_bytes_in_use() == live0);
  empty_host_cache();
  CHECK(host_bytes_reserved() == held0);
  CHECK(host_peak_bytes_reserved() >= held0);
}

TEST_CASE("a large request takes a cached block up to a quarter larger, and gives it back at its size") {
  if (host_cache_cap_bytes() == 0) {
    MESSAGE("the host block cache is off here: nothing to test");
    return;
  }
  empty_host_cache();
  void* block = nullptr;
  {
    Tensor t = Tensor::empty({512 << 10});  // 2 MiB
    block = t.raw();
  }
  CHECK(host_bytes_cached() == (2u << 20));
  const uint64_t system = host_system_allocations();
  {
    Tensor smaller = Tensor::empty({480 << 10});  // 1.875 MiB: the 2 MiB block wastes 6 %
    CHECK(smaller.raw() == block);
    CHECK(host_system_allocations() == system);
    CHECK(host_bytes_cached() == 0);
    Tensor too_small = Tensor::empty({384 << 10});  // 1.5 MiB: a 2 MiB block would waste a third
    CHECK(host_system_allocations() == system + 1);
  }
  // Both back in the cache, each at its own size: 2 MiB (not 1.875) and 1.5 MiB.
  CHECK(host_bytes_cached() == (2u << 20) + (3u << 19));
  {
    Tensor again = Tensor::empty({512 << 10});
    CHECK(again.raw() == block);  // the 2 MiB block kept its size
  }
  // A small request takes its exact size only.
  {
    Tensor small = Tensor::empty({1000});
  }
  const uint64_t before_small = host_system_allocations();
  Tensor other = Tensor::empty({999});
  CHECK(host_system_allocations() == before_small);  // 3996 bytes: the same 64-byte class
  Tensor odd = Tensor::empty({900});
  CHECK(host_system_allocations() == before_small + 1);  // 3600 bytes: its own class
  empty_host_cache();
}
