// SPMD training: every rank runs the same program, train_loop over its own replica
// (train_step.hpp). One rank with NoSync is the single-replica run; k ranks with a Reducer are
// DistributedDataParallel, the ranks being threads of this process or, under MPI, one per
// process. With --backend nccl the ranks are GPUs: a thread per GPU in this process, or a
// process per GPU under MPI; their gradients travel over NCCL (the Reducer over an NCCL communicator) while
// votes, barriers and step records stay on the host communicator.
#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <type_traits>

#include "core/cuda/memory.hpp"
#include "core/data/loader.hpp"
#include "core/error.hpp"
#include "layers/optim.hpp"
#include "parallel/train/reducer.hpp"
#include "parallel/train/device_env.hpp"
#include "parallel/comm/gather.hpp"
#include "parallel/train/grad_sync.hpp"
#include "parallel/comm/nccl/nccl_backend.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"
#include "parallel/train/run_modes.hpp"
#include "parallel/comm/threads/thread_ranks.hpp"
#include "parallel/runtime/process_group.hpp"
#include "parallel/train/train_step.hpp"

namespace dpx::parallel {

namespace {

// A rank's gradient reduction, made once its device exists (DDP on GPUs needs the compute stream).
using MakeSync = std::function<std::unique_ptr<GradSync>(DeviceEnv&)>;

// One SPMD rank: its device, its replica (rank 0's weights, as DDP's constructor broadcasts),
// optimizer and shard of the data, trained by the shared loop. `comm` (host memory: votes,
// barriers) is null for the single-replica run; `grads` carries the model's tensors (the same
// communicator, except with --backend nccl: the rank's NCCL communicator).
void spmd_rank(const Job& job, int rank, Device device, Communicator* comm, Communicator* grads,
               const MakeSync& make_sync, TrainReport& report, std::mutex& report_mu, const TrainHooks& hooks,
               double clock_offset_s) {
  const TrainOptions& o = job.options;
  std::unique_ptr<DeviceEnv> env = make_device_env(device, job.threads_per_rank, o.reference_kernels());
  apply_math(env->ctx(), o);
  // p2p replicas may share a GPU: each allocates from its own stream's pool (outlives every tensor below).
  const std::unique_ptr<cuda::AllocationStreamScope> pool =
      o.backend == "p2p" ? replica_allocation_scope(env->ctx()) : nullptr;
  nn::Model model = job.initial.clone(env->ctx().device);
  if (grads) {
    grads->broadcast(model.flat_params(), 0);
    for (auto& [name, buffer] : model.root().named_buffers()) grads->broadcast(*buffer, 0);
    grads->synchronize();  // a GPU's broadcast was queued on the communicator's stream
  }
  std::unique_ptr<GradSync> owned = make_sync(*env);
  GradSync& sync = *owned;
  sync.attach(model);
  std::unique_ptr<nn::Optimizer> optimizer = job.make_optimizer(model);
  data::DataLoader loader(job.train_set, job.train_loader(rank, job.ranks, job.rank_batch));
  LocalReplica replica(model);
  Rank r(job, rank, *env, replica, sync, *optimizer, loader, clock_offset_s);
  train_loop(r, comm, report, report_mu, hooks);
}

}  // namespace

void run_spmd(const Job& job, TrainReport& report, const TrainHooks& hooks, Communicator* processes) {
  std::mutex report_mu;
  const TrainOptions& o = job.options;
  ReducerOptions d;
  d.bucket_cap_bytes = static_cast<size_t>(o.bucket_mb * 1024 * 1024);
  d.overlap = o.overlap;
  d.algo = parse_algorithm(o.algo);
  d.grad_dtype = o.grad_wire_dtype();
  const NetSim net = parse_net_sim(o.net_sim, "--net-sim");
  const auto no_sync = [](DeviceEnv&) -> std::unique_ptr<GradSync> { return std::make_unique<NoSync>(); };
  if (o.backend == "nccl" && processes) {  // one GPU per process, by local rank; NCCL's id over MPI
    const int rank = processes->rank();
    const auto& launch = report.launch;
    const int local = static_cast<size_t>(rank) < launch.local_rank.size() ? launch.local_rank[static_cast<size_t>(rank)] : 0;
    const int gpu = nccl_device_for_local_rank(local, cuda::device_count());
    std::unique_ptr<Communicator> nccl = make_nccl_communicator(*processes, gpu, o.comm_timeout_s);
    const auto& offsets = launch.clock_offset_s;
    const double offset = static_cast<size_t>(rank) < offsets.size() ? offsets[static_cast<size_t>(rank)] : 0.0;
    spmd_rank(job, rank, Device::cuda(gpu), processes, nccl.get(),
              [&](DeviceEnv& env) { return std::make_unique<Reducer>(*nccl, d, env.ctx()); }, report, report_mu, hooks, offset);
    if (processes->size() > 1) gather_steps(*processes, report.steps);
  } else if (o.backend == "nccl") {  // one process, one thread per GPU
    const std::vector<int> gpus = o.cuda_devices();
    check_nccl_gpus(static_cast<int>(gpus.size()));
    RankOptions ro;
    ro.timeout_s = o.comm_timeout_s;
    run_nccl_ranks(gpus, o.comm_timeout_s, ro, [&](Communicator& comm, Communicator& mine) {
      spmd_rank(job, comm.rank(), Device::cuda(gpus[static_cast<size_t>(comm.rank())]), &comm, &mine,
                [&](DeviceEnv& env) { return std::make_unique<Reducer>(mine, d, env.ctx()); }, report, report_mu, hooks, 0.0);
    });
  } else if (o.backend == "p2p") {  // thread ranks on GPUs, several may share one: dpx's algorithms over device copies
    RankOptions ro;
    ro.timeout_s = o.comm_timeout_s;
    ro.net_sim = net;
    run_p2p_ranks(o.cuda_devices(), [&](Communicator& host, Communicator& p2p, const P2PRank& me) {
      spmd_rank(job, p2p.rank(), Device::cuda(me.device), &host, &p2p,
                [&](DeviceEnv& env) { return std::make_unique<Reducer>(p2p, d, env.ctx()); }, report, report_mu, hooks, 0.0);
    }, ro);
  } else if (processes) {
    const int rank = processes->rank();
    const auto& offsets = report.launch.clock_offset_s;
    const double offset = static_cast<size_t>(rank) < offsets.size() ? offsets[static_cast<size_t>(rank)] : 0.0;
    if (o.parallel == ParallelMode::none) {
      spmd_rank(job, rank, o.device(), nullptr, nullptr, no_sync, report, report_mu, hooks, offset);
    } else {
      std::unique_ptr<Communicator> data = duplicate(*processes);  // the gradients, apart from the votes
      data->set_net_sim(net);
      if (o.ranks_per_node > 0) {
        std::vector<int> nodes;
        for (int r = 0; r < processes->size(); ++r) nodes.push_back(r / o.ranks_per_node);
        data->set_node_layout(nodes);
      }
      spmd_rank(job, rank, o.device(), processes, data.get(),
                [&](DeviceEnv& env) { return std::make_unique<Reducer>(*data, d, env.ctx()); }, report, report_mu, hooks, offset);
    }
    if (processes->size() > 1) gather_steps(*processes, report.steps);
  } else if (o.parallel == ParallelMode::none) {
    spmd_rank(job, 0, o.device(), nullptr, nullptr, no_sync, report, report_mu, hooks, 0.0);
  } else {
    RankOptions ro;
    ro.pin_threads = o.pin_threads;
    ro.timeout_s = o.comm_timeout_s;
    ro.ranks_per_node = o.ranks_per_node;
    ro.net_sim = net;
    run_thread_ranks(job.ranks, [&](Communicator& host, Communicator& data) {
      spmd_rank(job, host.rank(), o.device(), &host, &data,
                [&](DeviceEnv& env) { return std::make_unique<Reducer>(data, d, env.ctx()); }, report, report_mu, hooks, 0.0);
    }, ro, nullptr, "threads");
  }
  std::stable_sort(report.steps.begin(), report.steps.end(), [](const StepRecord& a, const StepRecord& b) {
    return a.global_step != b.global_step ? a.global_step < b.global_step : a.rank < b.rank;
  });
}

void gather_steps(Communicator& comm, std::vector<StepRecord>& steps) {
  static_assert(std::is_trivially_copyable_v<StepRecord>, "step records travel as bytes");
  const auto* first = reinterpret_cast<const std::byte*>(steps.data());
  const auto all = gather_bytes(comm, std::vector<std::byte>(first, first + steps.size() * sizeof(StepRecord)));
  for (size_t q = 1; q < all.size(); ++q) {
    const size_t count = all[q].size() / sizeof(StepRecord);
    const size_t at = steps.size();
    steps.resize(at + count);
    std::memcpy(steps.data() + at, all[q].data(), count * sizeof(StepRecord));
  }
}

}  // namespace dpx::parallel
