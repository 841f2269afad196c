// The host block cache behind allocate_storage (core/host_cache.hpp): a freed small block is
// reused by the next allocation of its rounded size without asking the system, zeros() still
// zeroes a reused block, and empty_host_cache gives the blocks back; large blocks are carved
// best-fit out of segments, split and merged; the cap; the peaks of live and held bytes.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "core/host_cache.hpp"

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
    // Held: with the cache one 20 MiB segment serves all three (B after A, C in A's place);
    // without it each block is the system's, and A went back before C came.
    const bool cache = host_cache_cap_bytes() > 0;
    const size_t held_peak = held0 + (cache ? (20 << 20) : (12 << 20));
    CHECK(host_peak_bytes_reserved() == held_peak);
    CHECK(host_bytes_reserved() == held0 + (cache ? (20 << 20) : (10 << 20)));
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

// The cache's large blocks, on a cache of this test's own (the process's serves every tensor).
constexpr size_t MiB = size_t{1} << 20;

TEST_CASE("large blocks: one segment serves several requests, best fit, split, and merged when freed") {
  detail::HostCache cache(size_t{1} << 30);
  char* a = static_cast<char*>(cache.take(4 * MiB));  // a 20 MiB segment: 4 live, 16 free
  CHECK(cache.system_allocations() == 1);
  CHECK(cache.reserved_bytes() == 20 * MiB);
  CHECK(cache.cached_bytes() == 16 * MiB);
  char* b = static_cast<char*>(cache.take(6 * MiB));  // the same segment, right after a
  CHECK(b == a + 4 * MiB);
  CHECK(cache.system_allocations() == 1);
  CHECK(cache.cached_bytes() == 10 * MiB);
  cache.give(a, 4 * MiB);  // a free block of 4 beside b: best fit for a 3 MiB request
  char* c = static_cast<char*>(cache.take(3 * MiB));
  CHECK(c == a);
  cache.give(c, 3 * MiB);
  // b goes back: it merges with the free 4 before it and the 10 after it, one block of 20 again,
  // which a 16 MiB request can take only if the merge happened.
  cache.give(b, 6 * MiB);
  CHECK(cache.cached_bytes() == 20 * MiB);
  char* d = static_cast<char*>(cache.take(16 * MiB));
  CHECK(d == a);
  CHECK(cache.system_allocations() == 1);
  // A request of 10 MiB and more gets a segment of its own, rounded up to 2 MiB.
  char* big = static_cast<char*>(cache.take(11 * MiB + 5));
  CHECK(cache.system_allocations() == 2);
  CHECK(cache.reserved_bytes() == 32 * MiB);
  CHECK(cache.segments() == 2);
  // empty() gives back only a wholly free segment: d's is partly in use.
  cache.give(big, 11 * MiB + 5);
  cache.empty();
  CHECK(cache.segments() == 1);
  CHECK(cache.reserved_bytes() == 20 * MiB);
  cache.give(d, 16 * MiB);
  cache.empty();
  CHECK(cache.reserved_bytes() == 0);
  CHECK(cache.cached_bytes() == 0);
}

TEST_CASE("large blocks: a remainder under 1 MiB stays with its block and comes back with it") {
  detail::HostCache cache(size_t{1} << 30);
  char* a = static_cast<char*>(cache.take(9 * MiB));  // 20 MiB segment: 11 free
  char* b = static_cast<char*>(cache.take(10 * MiB + MiB / 2));  // 10.5 of the 11: no split of 0.5
  CHECK(b == a + 9 * MiB);
  CHECK(cache.cached_bytes() == 0);
  cache.give(b, 10 * MiB + MiB / 2);
  CHECK(cache.cached_bytes() == 11 * MiB);  // the sliver came back with it
  cache.give(a, 9 * MiB);
  CHECK(cache.cached_bytes() == 20 * MiB);
}

TEST_CASE("the cap: free blocks beyond it go back to the system, a segment once wholly free; cap 0 is no cache") {
  detail::HostCache capped(8 * MiB);
  void* a = capped.take(4 * MiB);
  void* b = capped.take(4 * MiB);
  capped.give(a, 4 * MiB);  // 12 + 4 free in a segment still in use: over the cap, nothing can go
  CHECK(capped.reserved_bytes() == 20 * MiB);
  capped.give(b, 4 * MiB);  // the segment is wholly free: it goes
  CHECK(capped.reserved_bytes() == 0);
  CHECK(capped.cached_bytes() == 0);
  void* s1 = capped.take(1000);
  void* s2 = capped.take(1000);
  capped.give(s1, 1000);  // small blocks under the cap wait
  CHECK(capped.cached_bytes() == 1024);
  capped.give(s2, 1000);
  CHECK(capped.cached_bytes() == 2048);

  detail::HostCache off(0);
  void* p = off.take(4 * MiB);
  CHECK(off.reserved_bytes() == 4 * MiB);  // the block itself, no segment
  off.give(p, 4 * MiB);
  CHECK(off.reserved_bytes() == 0);
  void* q = off.take(100);
  off.give(q, 100);
  CHECK(off.reserved_bytes() == 0);
  CHECK(off.system_allocations() == 2);
}

// As PyTorch's CUDA allocator frees its cached blocks before it reports out of memory: under a
// reserve limit, free segments go back before a new one would take the reserved bytes past it
// (resnet18 at batch 102: 2.8 GB of live tensors, 3.7 GB held without it).
TEST_CASE("the reserve limit: free segments go back before a new segment would pass it") {
  detail::HostCache cache(size_t{1} << 30);
  void* a = cache.take(30 * MiB);  // its own segment
  void* b = cache.take(40 * MiB);
  cache.give(a, 30 * MiB);         // 30 free, 40 live
  CHECK(cache.reserved_bytes() == 70 * MiB);
  void* c = cache.take(50 * MiB);  // fits in neither: a third segment, no limit yet
  CHECK(cache.reserved_bytes() == 120 * MiB);
  cache.give(c, 50 * MiB);
  cache.set_reserve_limit(100 * MiB);
  CHECK(cache.reserve_limit() == 100 * MiB);
  // 60 MiB fits in no free segment (30 and 50): without the limit 180 MiB would be held; with it
  // the free 50 goes back first (the largest), then the 30 (70 + 60 would still pass 100),
  // leaving the live 40 and the new 60.
  CHECK(cache.limit_released_bytes() == 0);
  void* d = cache.take(60 * MiB);
  CHECK(cache.reserved_bytes() == 100 * MiB);
  CHECK(cache.limit_released_bytes() == 80 * MiB);
  CHECK(cache.segments() == 2);
  // Live blocks may take it past the limit: nothing fails, nothing free is left to give.
  void* e = cache.take(20 * MiB);
  CHECK(e != nullptr);
  CHECK(cache.reserved_bytes() == 120 * MiB);
  for (auto [p, n] : {std::pair{b, 40 * MiB}, std::pair{d, 60 * MiB}, std::pair{e, 20 * MiB}}) cache.give(p, n);
  // Within the limit nothing goes back: a free segment that serves the request is reused.
  void* f = cache.take(55 * MiB);
  CHECK(cache.reserved_bytes() == 120 * MiB);
  cache.give(f, 55 * MiB);
  cache.set_reserve_limit(0);
  void* g = cache.take(200 * MiB);  // no limit: nothing given back
  CHECK(cache.reserved_bytes() == 320 * MiB);
  cache.give(g, 200 * MiB);
  cache.empty();
  CHECK(cache.reserved_bytes() == 0);
}

// Fragmentation under the limit: free blocks inside a segment that another block keeps in use
// cannot go back whole, but their pages can (resnet18 at batch 102 held 3.7 GB for 2.8 GB of live
// tensors, most of the difference in such blocks).
TEST_CASE("under the reserve limit, the pages of free blocks in segments still in use go back too") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  detail::HostCache cache(size_t{1} << 30);
  auto* a = static_cast<unsigned char*>(cache.take(4 * MiB));  // a 20 MiB segment: a, b, 12 MiB free
  auto* b = static_cast<unsigned char*>(cache.take(4 * MiB));
  std::memset(b, 0xAB, 4 * MiB);
  cache.give(a, 4 * MiB);  // 16 MiB free in a segment b keeps: no segment is wholly free
  CHECK(cache.reserved_bytes() == 20 * MiB);
  cache.set_reserve_limit(22 * MiB);
  void* c = cache.take(16 * MiB);  // a segment of its own: 36 MiB would pass 22
  // The free 16 MiB's pages went back (all but the pages the blocks' edges cut), b's stayed.
  CHECK(cache.limit_released_bytes() >= 16 * MiB - 3 * page);
  CHECK(cache.limit_released_bytes() <= 16 * MiB);
  CHECK(cache.reserved_bytes() == 36 * MiB - cache.limit_released_bytes());
  CHECK(cache.segments() == 2);
  CHECK(std::all_of(b, b + 4 * MiB, [](unsigned char v) { return v == 0xAB; }));
  // A block taken there faults its pages in again: counted whole, and usable.
  auto* d = static_cast<unsigned char*>(cache.take(4 * MiB));
  CHECK(d == a);  // the best fit: a's own block
  CHECK(cache.reserved_bytes() >= 24 * MiB);
  CHECK(cache.reserved_bytes() <= 24 * MiB + 3 * page);
  std::memset(d, 7, 4 * MiB);
  CHECK(std::all_of(d, d + 4 * MiB, [](unsigned char v) { return v == 7; }));
  // Taking a block whose pages went back asks the system for them again: within the limit, another
  // free block's pages go back first. c's segment, now free, goes for the 12 MiB after b.
  cache.give(c, 16 * MiB);
  CHECK(cache.reserved_bytes() >= 24 * MiB);  // d and b live, c's 16 MiB free but held
  auto* e = static_cast<unsigned char*>(cache.take(12 * MiB));
  CHECK(e == b + 4 * MiB);  // the best fit: the released block after b
  CHECK(cache.reserved_bytes() <= 20 * MiB + 3 * page);  // d, b and e; without this, 36 MiB
  std::memset(e, 3, 12 * MiB);
  cache.give(e, 12 * MiB);
  // Freed and merged with the given-back block beside it: its released pages stay counted out.
  cache.give(d, 4 * MiB);
  cache.give(b, 4 * MiB);
  cache.set_reserve_limit(0);
  cache.empty();
  CHECK(cache.reserved_bytes() == 0);
  CHECK(cache.cached_bytes() == 0);
}

TEST_CASE("large and small blocks from 4 threads at once never overlap, and all merge back") {
  detail::HostCache cache(size_t{1} << 30);
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<std::pair<unsigned char*, size_t>> held;
      for (int i = 0; i < 400; ++i) {
        if (!held.empty() && (rng() % 2 || held.size() > 12)) {
          const size_t k = rng() % held.size();
          auto [p, n] = held[k];
          for (size_t j = 0; j < n; j += 4096) bad[t] += p[j] != static_cast<unsigned char>(t + 1);
          bad[t] += p[n - 1] != static_cast<unsigned char>(t + 1);
          cache.give(p, n);
          held.erase(held.begin() + static_cast<long>(k));
        } else {
          const size_t n = rng() % 3 ? (rng() % (12 * MiB)) + MiB : rng() % 5000 + 1;
          auto* p = static_cast<unsigned char*>(cache.take(n));
          std::memset(p, t + 1, n);
          held.emplace_back(p, n);
        }
      }
      for (auto [p, n] : held) cache.give(p, n);
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) CHECK(bad[t] == 0);
  cache.empty();  // every segment is wholly free again: all of it goes
  CHECK(cache.reserved_bytes() == 0);
  CHECK(cache.segments() == 0);
}
