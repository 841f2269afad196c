// The host block cache behind allocate_storage (core/tensor.hpp): host memory a training step
// frees is kept and handed to the step's later allocations, so that after its first steps a
// step asks the system for nothing (a fresh block's pages fault in again, every step: resnet18
// at batch 32 trained at 12 img/s without the cache, 19 with it).
//
// Two kinds of block, as PyTorch's CUDA caching allocator has:
//   small (under 1 MiB)  a free list per size, rounded up to 64 bytes; a block serves its size only;
//   large (1 MiB and up) carved out of segments asked of the system (20 MiB for requests under
//                        10 MiB, else the request rounded up to 2 MiB). A request takes the smallest
//                        free block that holds it (best fit) and splits off what is left when that
//                        is 1 MiB or more; a freed block merges with its free neighbours in its
//                        segment. So the sizes one part of a step frees serve the different sizes
//                        the next part asks for: with a free list per size, resnet18's step at
//                        batch 32 held 1.95 GB for 1.07 GB of live tensors.
// At most `cap` bytes of free blocks wait in the cache: beyond it, free small blocks and wholly
// free segments go back to the system (a segment with a live block stays). A reserve limit (0: none)
// bounds what the cache holds in all, as PyTorch's CUDA allocator frees its cached blocks before
// it reports a device out of memory: a segment that would take the reserved bytes past the limit
// is asked for only after free small blocks and wholly free segments have gone back, and then the
// pages of free blocks inside segments still partly in use (madvise MADV_DONTNEED: the addresses
// stay the segment's, the memory goes back to the system and faults in again, zeroed, when a
// block there is taken), enough of them to stay within it where they can (live blocks can take
// it past; nothing fails). The reserved bytes count what is held: a block's pages given back are
// counted again when it is taken, whole, other free blocks' pages going back first where that
// would pass the limit. Cap 0 turns the cache
// off: every block comes from the system and goes back at once (under AddressSanitizer, where a
// block reused at once would hide a use after free).
//
// Thread-safe. Blocks are 64-byte aligned and not zeroed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

namespace dpx::detail {

class HostCache {
 public:
  explicit HostCache(size_t cap_bytes);
  ~HostCache();  // gives back every free block; live blocks must be given back first
  HostCache(const HostCache&) = delete;
  HostCache& operator=(const HostCache&) = delete;

  // A block of at least `bytes`, or null when the system has none even after the cache gave its
  // free blocks back.
  void* take(size_t bytes);
  // Gives back a block take(bytes) returned.
  void give(void* p, size_t bytes);
  // Gives every free small block and every wholly free segment back to the system.
  void empty();

  size_t cached_bytes();            // free bytes held (small blocks and free parts of segments)
  size_t reserved_bytes();          // everything held from the system: live and free
  size_t peak_reserved_bytes();     // the most reserved at once since construction or reset_peak
  void reset_peak();                // the peak := what is reserved now
  uint64_t system_allocations();    // blocks and segments asked of the system so far
  size_t segments();                // segments held now
  size_t cap_bytes() const { return cap_; }
  // The reserve limit in bytes (0: none): see above.
  void set_reserve_limit(size_t bytes);
  size_t reserve_limit();
  size_t limit_released_bytes();    // given back to keep within the reserve limit (segments, small blocks
                                    // and pages of free blocks), since construction

  static constexpr size_t kLarge = size_t{1} << 20;  // requests of this size and up come from segments

 private:
  struct Block {
    char* ptr;
    size_t size;
    bool free;
    Block* prev;  // the neighbours in the block's segment; both null: the block is the whole segment
    Block* next;
    size_t released = 0;  // free: bytes of its pages given back (madvise), not counted as reserved
  };
  struct BySize {  // best fit: the smallest size, then the lowest address
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };

  void* system_alloc(size_t bytes);      // counts it; null when the system has none
  void* take_large(size_t bytes);
  void split(Block* b, size_t size);     // b keeps `size`, the rest becomes a free block after it
  // Free blocks to give back to the system, wholly free segments (largest first) then small
  // blocks, until at most `cached_at_most` bytes are cached and `reserved_at_most` reserved (or
  // none is left), taken out of the cache's books; the caller frees them unlocked.
  std::vector<std::pair<void*, size_t>> trim_locked(size_t cached_at_most, size_t reserved_at_most);
  // Gives the pages of free blocks inside partly used segments back (largest blocks first) until
  // at most `reserved_at_most` bytes are reserved or none is left.
  void release_pages_locked(size_t reserved_at_most);

  const size_t cap_;
  std::mutex mu_;
  std::map<size_t, std::vector<void*>> small_;  // rounded size -> free small blocks
  std::set<Block*, BySize> free_large_;
  std::unordered_map<void*, Block*> live_large_;
  size_t cached_ = 0, reserved_ = 0, peak_reserved_ = 0, segments_ = 0, reserve_limit_ = 0, limit_released_ = 0;
  uint64_t system_allocations_ = 0;
};

}  // namespace dpx::detail
