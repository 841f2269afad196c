// Gathering variable-sized data at rank 0 over any communicator (its sizes first, then each
// rank's bytes by send/recv): step records and trace spans at the end of a run, checkpoint parts.
#pragma once
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "parallel/comm/communicator.hpp"

namespace dpx::parallel {

// Collective. Rank 0 gets every rank's bytes, indexed by rank (its own included); the others get
// nothing.
std::vector<std::vector<std::byte>> gather_bytes(Communicator& comm, const std::vector<std::byte>& mine);

// The same for records that travel as their bytes (all ranks run one dpx binary).
template <class Record>
std::vector<std::vector<Record>> gather_records(Communicator& comm, const std::vector<Record>& mine) {
  static_assert(std::is_trivially_copyable_v<Record>, "records travel as bytes");
  const auto* first = reinterpret_cast<const std::byte*>(mine.data());
  std::vector<std::vector<Record>> all;
  for (const std::vector<std::byte>& bytes : gather_bytes(comm, {first, first + mine.size() * sizeof(Record)})) {
    std::vector<Record>& records = all.emplace_back(bytes.size() / sizeof(Record));
    if (!records.empty()) std::memcpy(records.data(), bytes.data(), records.size() * sizeof(Record));
  }
  return all;
}

}  // namespace dpx::parallel
