// The host block cache (host_cache.hpp): small blocks in free lists by size, large ones carved out
// of segments, best fit, split and merged.
#include "core/host_cache.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

namespace dpx::detail {

namespace {

constexpr size_t kSmallAlign = 64;                   // every block's alignment and a small size's step
constexpr size_t kLargeRound = 512;                  // a large request's size step
constexpr size_t kSegmentForSmallLarge = 20 << 20;   // the segment of a request under kBigRequest
constexpr size_t kBigRequest = 10 << 20;             // from here a request gets a segment of its own
constexpr size_t kSegmentRound = 2 << 20;            // ... rounded up to this

size_t round_up(size_t n, size_t step) { return (n + step - 1) / step * step; }

}  // namespace

HostCache::HostCache(size_t cap_bytes) : cap_(cap_bytes) {}

HostCache::~HostCache() { empty(); }

void* HostCache::system_alloc(size_t bytes) {
  void* p = std::aligned_alloc(kSmallAlign, bytes);
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  reserved_ += bytes;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  ++system_allocations_;
  return p;
}

void* HostCache::take(size_t bytes) {
  const size_t size = round_up(std::max<size_t>(bytes, 1), kSmallAlign);
  if (cap_ > 0 && size >= kLarge) return take_large(size);
  if (cap_ > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = small_.find(size); it != small_.end()) {
      void* p = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) small_.erase(it);
      cached_ -= size;
      return p;
    }
  }
  void* p = system_alloc(size);
  if (!p && cap_ > 0) {  // the cache's free blocks of other sizes may be what the system lacks
    empty();
    p = system_alloc(size);
  }
  return p;
}

void HostCache::split(Block* b, size_t size) {
  if (b->size - size < kLarge) return;  // a sliver stays with the block: merged back when it is freed
  Block* rest = new Block{b->ptr + size, b->size - size, true, b, b->next};
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  free_large_.insert(rest);
  cached_ += rest->size;
}

void* HostCache::take_large(size_t bytes) {
  const size_t size = round_up(bytes, kLargeRound);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Block probe{nullptr, size, true, nullptr, nullptr};
    if (auto it = free_large_.lower_bound(&probe); it != free_large_.end()) {
      Block* b = *it;
      free_large_.erase(it);
      b->free = false;
      // Its pages given back fault in again: under the limit, other free blocks' pages go first.
      if (reserve_limit_ > 0 && b->released > 0 && reserved_ + b->released > reserve_limit_) {
        const size_t reserved_before = reserved_;
        release_pages_locked(reserve_limit_ > b->released ? reserve_limit_ - b->released : 0);
        limit_released_ += reserved_before - reserved_;
      }
      cached_ -= b->size - b->released;
      reserved_ += b->released;  // counted whole
      peak_reserved_ = std::max(peak_reserved_, reserved_);
      b->released = 0;
      split(b, size);
      live_large_[b->ptr] = b;
      return b->ptr;
    }
  }
  const size_t segment = size < kBigRequest ? kSegmentForSmallLarge : round_up(size, kSegmentRound);
  std::vector<std::pair<void*, size_t>> back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reserve_limit_ > 0 && reserved_ + segment > reserve_limit_) {
      const size_t reserved_before = reserved_, within = reserve_limit_ > segment ? reserve_limit_ - segment : 0;
      back = trim_locked(SIZE_MAX, within);
      release_pages_locked(within);
      limit_released_ += reserved_before - reserved_;
    }
  }
  for (auto& [q, n] : back) std::free(q);
  void* p = system_alloc(segment);
  if (!p) {
    empty();
    p = system_alloc(segment);
  }
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  ++segments_;
  Block* b = new Block{static_cast<char*>(p), segment, false, nullptr, nullptr};
  split(b, size);
  live_large_[p] = b;
  return p;
}

void HostCache::give(void* p, size_t bytes) {
  const size_t size = round_up(std::max<size_t>(bytes, 1), kSmallAlign);
  if (cap_ == 0) {
    std::free(p);
    std::lock_guard<std::mutex> lock(mu_);
    reserved_ -= size;
    return;
  }
  std::vector<std::pair<void*, size_t>> back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (size >= kLarge) {
      auto it = live_large_.find(p);
      if (it == live_large_.end()) std::abort();  // not a block of this cache: memory is corrupt
      Block* b = it->second;
      live_large_.erase(it);
      b->free = true;
      cached_ += b->size;
      // Merge with free neighbours (taken out of the set first: its order is by size).
      if (Block* a = b->prev; a && a->free) {
        free_large_.erase(a);
        a->size += b->size;
        a->released += b->released;
        a->next = b->next;
        if (b->next) b->next->prev = a;
        delete b;
        b = a;
      }
      if (Block* c = b->next; c && c->free) {
        free_large_.erase(c);
        b->size += c->size;
        b->released += c->released;
        b->next = c->next;
        if (c->next) c->next->prev = b;
        delete c;
      }
      free_large_.insert(b);
    } else {
      small_[size].push_back(p);
      cached_ += size;
    }
    if (cached_ > cap_) back = trim_locked(cap_, SIZE_MAX);
  }
  for (auto& [q, n] : back) std::free(q);
}

std::vector<std::pair<void*, size_t>> HostCache::trim_locked(size_t cached_at_most, size_t reserved_at_most) {
  std::vector<std::pair<void*, size_t>> back;
  auto over = [&] { return cached_ > cached_at_most || reserved_ > reserved_at_most; };
  // Wholly free segments first, the largest first: a segment partly in use cannot go.
  for (auto it = free_large_.end(); it != free_large_.begin() && over();) {
    Block* b = *--it;
    if (b->prev || b->next) continue;
    back.emplace_back(b->ptr, b->size);
    cached_ -= b->size - b->released;
    reserved_ -= b->size - b->released;
    --segments_;
    it = free_large_.erase(it);
    delete b;
  }
  while (!small_.empty() && over()) {
    auto it = std::prev(small_.end());
    back.emplace_back(it->second.back(), it->first);
    cached_ -= it->first;
    reserved_ -= it->first;
    it->second.pop_back();
    if (it->second.empty()) small_.erase(it);
  }
  return back;
}

void HostCache::release_pages_locked(size_t reserved_at_most) {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (auto it = free_large_.end(); it != free_large_.begin() && reserved_ > reserved_at_most;) {
    Block* b = *--it;
    const uintptr_t first = round_up(reinterpret_cast<uintptr_t>(b->ptr), page);
    const uintptr_t last = (reinterpret_cast<uintptr_t>(b->ptr) + b->size) / page * page;
    const size_t pages = last > first ? last - first : 0;
    if (pages <= b->released || ::madvise(reinterpret_cast<void*>(first), pages, MADV_DONTNEED) != 0) continue;
    cached_ -= pages - b->released;
    reserved_ -= pages - b->released;
    b->released = pages;
  }
}

void HostCache::empty() {
  std::vector<std::pair<void*, size_t>> back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    back = trim_locked(0, 0);
  }
  for (auto& [p, n] : back) std::free(p);
}

size_t HostCache::cached_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}
size_t HostCache::reserved_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}
size_t HostCache::peak_reserved_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_reserved_;
}
void HostCache::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_reserved_ = reserved_;
}
uint64_t HostCache::system_allocations() {
  std::lock_guard<std::mutex> lock(mu_);
  return system_allocations_;
}
void HostCache::set_reserve_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  reserve_limit_ = bytes;
}
size_t HostCache::reserve_limit() {
  std::lock_guard<std::mutex> lock(mu_);
  return reserve_limit_;
}

size_t HostCache::limit_released_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return limit_released_;
}

size_t HostCache::segments() {
  std::lock_guard<std::mutex> lock(mu_);
  return segments_;
}

}  // namespace dpx::detail
