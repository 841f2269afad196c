// Making the nccl backend's communicators (see nccl_backend.hpp): non-blocking NCCL communicators
// (config.blocking = 0), their initialisation polled by the same loop as every other wait
// (nccl_wait.hpp), so a rank that never joins ends in an error after --comm-timeout, not a hang.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/cuda/check.hpp"
#include "core/cuda/device_guard.hpp"
#include "core/cuda/memory.hpp"
#include "core/error.hpp"
#include "parallel/comm/nccl/nccl_backend.hpp"
#include "parallel/comm/nccl/cuda/nccl_comm.hpp"
#include "parallel/comm/nccl/cuda/nccl_types.hpp"
#include "parallel/comm/nccl/nccl_wait.hpp"

namespace dpx::parallel {

namespace {

using nccl::NcclWaitVerdict;

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  // NCCL lets the environment override the config (init.cc): its waits would then block inside
  // NCCL, where neither --comm-timeout nor the watchdog reaches them.
  static const bool warned = [] {
    const char* v = std::getenv("NCCL_COMM_BLOCKING");
    if (v && std::string(v) == "1")
      std::fprintf(stderr, "dpx: warning: NCCL_COMM_BLOCKING=1 makes NCCL's communicators blocking: a rank that "
                           "never joins or a stalled call then hangs instead of ending after --comm-timeout; unset it\n");
    return true;
  }();
  (void)warned;
  return config;
}

// Polls until every communicator has finished initialising, all within timeout_s; aborts them
// all on an error or a timeout.
void wait_initialised(std::vector<ncclComm_t>& comms, const std::vector<int>& devices, double timeout_s) {
  const double deadline = now_s() + timeout_s;
  for (size_t i = 0; i < comms.size(); ++i) {
    cuda::DeviceGuard guard(devices[i]);
    ncclResult_t state = ncclSuccess;
    // What is left of timeout_s, but never none (a timeout of 0 would be a patient wait).
    const NcclWaitVerdict v = nccl::settle_comm(comms[i], std::max(deadline - now_s(), 1e-6), state);
    if (v == NcclWaitVerdict::done) continue;
    for (ncclComm_t c : comms)
      if (c) ncclCommAbort(c);
    if (v == NcclWaitVerdict::failed)
      fail("NCCL could not create the communicator of cuda:", devices[i], ": ", ncclGetErrorString(state),
           " (NCCL_DEBUG=INFO says more)");
    fail("NCCL's communicators were not ready after --comm-timeout ", timeout_s,
         " s: a rank never joined (check that every process reached start-up, and NCCL_DEBUG=INFO)");
  }
}

// What to do instead, where the GPUs are missing.
constexpr const char* kNoGpuHint =
    "; run it on a machine with NVIDIA GPUs, or use CPU ranks here (dpx collective --backend threads; dpx train "
    "--devices cpu:K --parallel ddp)";

void check_devices(const std::vector<int>& devices) {
  if (!cuda::available())
    usage_fail("--backend nccl: no usable CUDA device: ", cuda::unavailable_reason(), kNoGpuHint);
  const int visible = cuda::device_count();
  for (int d : devices)
    if (d < 0 || d >= visible)
      usage_fail("--backend nccl: cuda:", d, " does not exist: this machine shows ", visible, " CUDA device(s)");
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(const std::vector<int>& devices, double timeout_s) {
  check_devices(devices);
  const int n = static_cast<int>(devices.size());
  ncclUniqueId id;
  DPX_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  ncclConfig_t config = non_blocking_config();
  // ncclCommInitAll, with a config: one rank per device from this thread, inside one group.
  nccl::group([&] {
    for (int i = 0; i < n; ++i) {
      cuda::DeviceGuard guard(devices[static_cast<size_t>(i)]);
      DPX_NCCL_QUEUE(ncclCommInitRankConfig(&comms[static_cast<size_t>(i)], n, id, i, &config));
    }
  });
  wait_initialised(comms, devices, timeout_s);
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ranks[static_cast<size_t>(i)] = i;
  auto local = std::make_shared<nccl::LocalRanks>(n, std::move(ranks), timeout_s);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int i = 0; i < n; ++i)
    out.push_back(std::make_unique<nccl::NcclCommunicator>(std::make_unique<nccl::NcclTransport>(
        comms[static_cast<size_t>(i)], devices[static_cast<size_t>(i)], i, n, local)));
  return out;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& world, int device, double timeout_s) {
  check_devices({device});
  // The process's GPU becomes its current device for good: a scope that restored "device 0" (what
  // a thread that chose none reads) would create GPU 0's context in every process.
  DPX_CUDA_CHECK(cudaSetDevice(device));
  // No two ranks on one GPU: NCCL's own refusal ("Duplicate GPU detected") comes later and says less.
  cudaDeviceProp prop{};
  DPX_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  constexpr size_t kUuid = sizeof prop.uuid.bytes;
  std::vector<char> all(kUuid * static_cast<size_t>(world.size()));
  world.all_gather(prop.uuid.bytes, all.data(), kUuid, DType::u8);
  std::vector<std::string> uuids;
  for (int r = 0; r < world.size(); ++r) uuids.emplace_back(all.data() + kUuid * static_cast<size_t>(r), kUuid);
  if (const auto shared = first_shared_gpu(uuids))
    usage_fail("--backend nccl: ranks ", shared->first, " and ", shared->second, " would drive the same GPU (each process ",
               "sees ", cuda::device_count(), " and takes its node-local rank's, modulo that); NCCL runs one rank per ",
               "GPU: start at most as many processes per node as it has GPUs (srun --gpus-per-task=1, or mpirun "
               "-npernode N)");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (world.rank() == 0) DPX_NCCL_CHECK(ncclGetUniqueId(&id));
  world.broadcast(&id, &id, sizeof id, DType::u8, 0);  // host memory, over the launcher's group (MPI)
  std::vector<ncclComm_t> comms(1, nullptr);
  ncclConfig_t config = non_blocking_config();
  {
    cuda::DeviceGuard guard(device);
    DPX_NCCL_QUEUE(ncclCommInitRankConfig(&comms[0], world.size(), id, world.rank(), &config));
  }
  wait_initialised(comms, {device}, timeout_s);
  // Its waits are timed by this process's watchdog, whose MPI peers report a stall for the job.
  auto local = std::make_shared<nccl::LocalRanks>(world.size(), std::vector<int>{world.rank()}, timeout_s);
  return std::make_unique<nccl::NcclCommunicator>(
      std::make_unique<nccl::NcclTransport>(comms[0], device, world.rank(), world.size(), local));
}

void abort_nccl_group(Communicator& comm, const std::string& why) {
  if (auto* nccl = dynamic_cast<nccl::NcclCommunicator*>(&comm)) nccl->abort_group(why);
}

void check_nccl_gpus(int count) {
  if (!cuda::available())
    usage_fail("--backend nccl: no usable CUDA device: ", cuda::unavailable_reason(), kNoGpuHint);
  if (count > cuda::device_count())
    usage_fail("--backend nccl with ", count, " ranks: this machine shows ", cuda::device_count(), " CUDA device(s), "
               "and NCCL runs one rank per GPU; pass at most that many");
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
  return detail::concat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

}  // namespace dpx::parallel
