// The parts of the nccl backend that need no GPU of their own: which GPU a rank drives, and the
// thread ranks over a process's GPUs built on the entry points (compiled in every build, tested on
// the CPU where they can be).
#include <charconv>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "parallel/comm/nccl/nccl_backend.hpp"
#include "parallel/comm/threads/threads_backend.hpp"

namespace dpx::parallel {

int nccl_device_for_local_rank(int local_rank, int visible) {
  if (visible < 1) fail("the nccl backend needs a GPU, and this process sees none");
  if (local_rank < 0) fail("local rank ", local_rank, ": the launcher gave no node-local rank");
  return local_rank % visible;
}

std::optional<std::pair<int, int>> first_shared_gpu(const std::vector<std::string>& uuids) {
  std::map<std::string, int> first;
  for (size_t r = 0; r < uuids.size(); ++r) {
    const auto [it, fresh] = first.emplace(uuids[r], static_cast<int>(r));
    if (!fresh) return std::make_pair(it->second, static_cast<int>(r));
  }
  return std::nullopt;
}

std::vector<int> parse_cuda_device_list(std::string_view devices, std::string_view flag, bool repeats) {
  const std::string shown(devices);
  auto bad = [&](std::string_view why) {
    usage_fail(flag, " '", shown, "': ", why, "; name the GPUs as cuda:0,cuda:1 (or cuda:0,1), one rank each");
  };
  std::vector<int> out;
  size_t at = 0;
  while (at <= devices.size()) {
    size_t end = devices.find(',', at);
    if (end == std::string_view::npos) end = devices.size();
    std::string_view item = devices.substr(at, end - at);
    if (item.substr(0, 5) == "cuda:") item.remove_prefix(5);
    else if (out.empty()) bad("not a list of CUDA devices");
    int index = -1;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), index);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || index < 0)
      bad("each device is cuda:N with N >= 0");
    for (int seen : out)
      if (seen == index && !repeats)
        bad("cuda:" + std::to_string(index) + " is named twice (NCCL runs one rank per GPU; --backend p2p takes several)");
    out.push_back(index);
    at = end + 1;
  }
  return out;
}

void run_nccl_ranks(const std::vector<int>& devices, double timeout_s, const RankOptions& options,
                    const std::function<void(Communicator& host, Communicator& nccl)>& body) {
  std::vector<std::unique_ptr<Communicator>> nccl = make_nccl_communicators(devices, timeout_s);
  run_ranks(static_cast<int>(devices.size()), [&](Communicator& host) {
    std::unique_ptr<Communicator>& mine = nccl[static_cast<size_t>(host.rank())];
    try {
      body(host, *mine);
    } catch (const std::exception& e) {  // the other GPUs' threads may wait in NCCL for this one
      abort_nccl_group(*mine, detail::concat("rank ", host.rank(), " failed: ", e.what()));
      throw;
    }
    mine.reset();  // every rank finalizes its own at once (a collective)
  }, options);
}

}  // namespace dpx::parallel
