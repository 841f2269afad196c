// The p2p backend's parts that need no GPU: where ranks go, the --gpus list, why the backend
// cannot run; and, in a build without CUDA, run_p2p_ranks saying what to do instead.
#include <charconv>

#include "core/error.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"

namespace dpx::parallel {

std::vector<int> parse_gpu_list(std::string_view text, std::string_view flag) {
  std::vector<int> gpus;
  if (text.empty()) return gpus;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    int g = -1;
    const auto [end, err] = std::from_chars(item.data(), item.data() + item.size(), g);
    if (item.empty() || err != std::errc() || end != item.data() + item.size() || g < 0)
      usage_fail(flag, ": '", item, "' in '", text, "' is not a GPU number: give GPU numbers separated by commas, "
                 "e.g. 0,1 (as nvidia-smi numbers them within CUDA_VISIBLE_DEVICES)");
    gpus.push_back(g);
    start = comma + 1;
  }
  return gpus;
}

std::vector<int> p2p_rank_devices(int k, const std::vector<int>& gpus, std::string_view flag) {
  if (k < 1) usage_fail("the number of ranks must be at least 1, not ", k);
  const int visible = cuda::device_count();
  std::vector<int> pool = gpus;
  if (pool.empty())
    for (int g = 0; g < visible; ++g) pool.push_back(g);
  if (pool.empty()) usage_fail("--backend p2p needs a GPU: ", cuda::unavailable_reason());
  for (int g : pool)
    if (g >= visible)
      usage_fail(flag, ": GPU ", g, " does not exist: this machine shows ", visible, " GPU", visible == 1 ? "" : "s",
                 " (0 to ", visible - 1, ")");
  std::vector<int> devices;
  for (int r = 0; r < k; ++r) devices.push_back(pool[static_cast<size_t>(r) % pool.size()]);
  return devices;
}

std::string p2p_unavailable_reason() {
  if (!kP2PBuilt)
    return "this dpx was built without CUDA: rebuild with -DDPX_CUDA=ON on a machine with the CUDA toolkit, cuDNN "
           "and NCCL, or use --backend threads";
  if (cuda::device_count() == 0)
    return "it needs a GPU, and " + cuda::unavailable_reason() + "; run it on a GPU machine, or use --backend threads";
  return "";
}

#ifndef DPX_WITH_CUDA
void run_p2p_ranks(const std::vector<int>&, const std::function<void(Communicator&, Communicator&, int)>&,
                   const RankOptions&) {
  usage_fail("--backend p2p: ", p2p_unavailable_reason());
}

std::unique_ptr<cuda::AllocationStreamScope> replica_allocation_scope(const Context&) { return nullptr; }
#endif

}  // namespace dpx::parallel
