// gather_bytes (see gather.hpp).
#include "parallel/comm/gather.hpp"

namespace dpx::parallel {

std::vector<std::vector<std::byte>> gather_bytes(Communicator& comm, const std::vector<std::byte>& mine) {
  const int n = comm.size();
  const int64_t size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(static_cast<size_t>(n));
  comm.all_gather(&size, sizes.data(), 1, DType::i64);
  if (comm.rank() != 0) {
    if (!mine.empty()) comm.send(mine.data(), mine.size(), DType::u8, 0);
    return {};
  }
  std::vector<std::vector<std::byte>> all(static_cast<size_t>(n));
  all[0] = mine;
  for (int q = 1; q < n; ++q) {
    all[static_cast<size_t>(q)].resize(static_cast<size_t>(sizes[static_cast<size_t>(q)]));
    if (!all[static_cast<size_t>(q)].empty())
      comm.recv(all[static_cast<size_t>(q)].data(), all[static_cast<size_t>(q)].size(), DType::u8, q);
  }
  return all;
}

}  // namespace dpx::parallel
