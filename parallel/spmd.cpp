// SPMD training: every rank runs the same program, train_loop over its own replica
// (train_step.hpp). One rank with NoSync is the single-replica run; k ranks with DdpSync are
// DistributedDataParallel, the ranks being threads of this process or, under MPI, one per
// process.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "core/data/loader.hpp"
#include "layers/optim.hpp"
#include "parallel/ddp.hpp"
#include "parallel/device_env.hpp"
#include "parallel/gather.hpp"
#include "parallel/grad_sync.hpp"
#include "parallel/run_modes.hpp"
#include "parallel/threads_backend.hpp"
#include "parallel/train_step.hpp"

namespace dpx::parallel {

namespace {

// One SPMD rank: its device, its replica (rank 0's weights, as DDP's constructor broadcasts),
// optimizer and shard of the data, trained by the shared loop. `comm` is null for the
// single-replica run.
void spmd_rank(const Job& job, int rank, Communicator* comm, GradSync& sync, TrainReport& report,
               std::mutex& report_mu, const TrainHooks& hooks, double clock_offset_s) {
  const TrainOptions& o = job.options;
  std::unique_ptr<DeviceEnv> env = make_device_env(o.device(), job.threads_per_rank, o.allow_tf32, o.reference_kernels());
  env->ctx().deterministic = o.deterministic;
  nn::Model model = job.initial.clone(env->ctx().device);
  if (comm) {
    comm->broadcast(model.flat_params(), 0);
    for (auto& [name, buffer] : model.root().named_buffers()) comm->broadcast(*buffer, 0);
  }
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
  DdpOptions d;
  d.bucket_cap_bytes = static_cast<size_t>(o.bucket_mb * 1024 * 1024);
  d.overlap = o.overlap;
  d.algo = o.algo;
  d.grad_dtype = o.grad_wire_dtype();
  const NetSim net = parse_net_sim(o.net_sim, "--net-sim");
  if (processes) {
    processes->set_net_sim(net);
    if (o.ranks_per_node > 0) {
      std::vector<int> nodes;
      for (int r = 0; r < processes->size(); ++r) nodes.push_back(r / o.ranks_per_node);
      processes->set_node_layout(nodes);
    }
    const int rank = processes->rank();
    const auto& offsets = report.launch.clock_offset_s;
    const double offset = static_cast<size_t>(rank) < offsets.size() ? offsets[static_cast<size_t>(rank)] : 0.0;
    if (o.parallel == ParallelMode::none) {
      NoSync sync;
      spmd_rank(job, rank, nullptr, sync, report, report_mu, hooks, offset);
    } else {
      DdpSync sync(*processes, d);
      spmd_rank(job, rank, processes, sync, report, report_mu, hooks, offset);
    }
    if (processes->size() > 1) gather_steps(*processes, report.steps);
  } else if (o.parallel == ParallelMode::none) {
    NoSync sync;
    spmd_rank(job, 0, nullptr, sync, report, report_mu, hooks, 0.0);
  } else {
    RankOptions ro;
    ro.pin_threads = o.pin_threads;
    ro.timeout_s = o.comm_timeout_s;
    ro.ranks_per_node = o.ranks_per_node;
    ro.net_sim = net;
    run_ranks(job.ranks, [&](Communicator& comm) {
      DdpSync sync(comm, d);
      spmd_rank(job, comm.rank(), &comm, sync, report, report_mu, hooks, 0.0);
    }, ro);
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
