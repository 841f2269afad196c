// The launch table (see launch.hpp): one row per backend and launcher.
#include "parallel/runtime/launch.hpp"

#include <memory>

#include "core/cuda/memory.hpp"
#include "core/error.hpp"
#include "parallel/comm/nccl/nccl_backend.hpp"
#include "parallel/comm/p2p/p2p_backend.hpp"
#include "parallel/comm/threads/thread_ranks.hpp"
#include "parallel/runtime/process_group.hpp"

namespace dpx::parallel {

namespace {

// Per rank, the launch's value for it, or `otherwise` where the launch does not say.
template <typename T>
T of_rank(const std::vector<T>& per_rank, int rank, T otherwise) {
  return static_cast<size_t>(rank) < per_rank.size() ? per_rank[static_cast<size_t>(rank)] : otherwise;
}

// k thread ranks of this process: a host world and a data world.
void thread_ranks(const LaunchSpec& s, const RankBody& body) {
  run_thread_ranks(s.ranks, [&](Communicator& host, Communicator& data) {
    RankSetup r{host.rank(), s.device, &host, &data};
    body(r);
  }, s.options, nullptr, "threads");
}

// Thread ranks on GPUs, several may share one: a host world, and the p2p one over device copies.
void p2p_ranks(const LaunchSpec& s, const RankBody& body) {
  run_p2p_ranks(s.gpus, [&](Communicator& host, Communicator& p2p, int device) {
    RankSetup r{p2p.rank(), Device::cuda(device), &host, &p2p};
    body(r);
  }, s.options);
}

// A thread per GPU: the thread ranks' host communicator, and an NCCL communicator each.
void nccl_thread_ranks(const LaunchSpec& s, const RankBody& body) {
  check_nccl_gpus(static_cast<int>(s.gpus.size()));
  run_nccl_ranks(s.gpus, s.options.timeout_s, s.options, [&](Communicator& host, Communicator& nccl) {
    RankSetup r{host.rank(), Device::cuda(s.gpus[static_cast<size_t>(host.rank())]), &host, &nccl};
    body(r);
  });
}

// This process, one rank of the MPI job: the job's communicator for the host, a duplicate of it
// for the data (--net-sim and --ranks-per-node apply there).
void mpi_rank(const LaunchSpec& s, const RankBody& body) {
  Communicator& host = *s.processes;
  std::unique_ptr<Communicator> data = duplicate(host);
  data->set_net_sim(s.options.net_sim);
  if (s.options.ranks_per_node > 0) {
    std::vector<int> nodes;
    for (int r = 0; r < host.size(); ++r) nodes.push_back(r / s.options.ranks_per_node);
    data->set_node_layout(nodes);
  }
  RankSetup r{host.rank(), s.device, &host, data.get(), of_rank(s.launch->clock_offset_s, host.rank(), 0.0)};
  body(r);
}

// This process on its local rank's GPU: the job's communicator for the host, NCCL's for the data
// (its unique id broadcast over the host's).
void nccl_process_rank(const LaunchSpec& s, const RankBody& body) {
  Communicator& host = *s.processes;
  check_nccl_gpus(0);  // a GPU at all (else a usage error that says how to run without one)
  const int gpu = nccl_device_for_local_rank(of_rank(s.launch->local_rank, host.rank(), 0), cuda::device_count());
  std::unique_ptr<Communicator> nccl = make_nccl_communicator(host, gpu, s.options.timeout_s);
  RankSetup r{host.rank(), Device::cuda(gpu), &host, nccl.get(), of_rank(s.launch->clock_offset_s, host.rank(), 0.0)};
  body(r);
}

struct LaunchRow {
  Backend backend;
  bool launched;  // by an MPI launcher: this process is one rank
  void (*run)(const LaunchSpec&, const RankBody&);
};

constexpr LaunchRow kLaunch[] = {
    {Backend::threads, false, thread_ranks},
    {Backend::p2p, false, p2p_ranks},
    {Backend::nccl, false, nccl_thread_ranks},
    {Backend::mpi, true, mpi_rank},
    {Backend::nccl, true, nccl_process_rank},
};

}  // namespace

void launch_ranks(const LaunchSpec& spec, const RankBody& body) {
  const bool launched = spec.processes != nullptr;
  for (const LaunchRow& row : kLaunch)
    if (row.backend == spec.backend && row.launched == launched) return row.run(spec, body);
  usage_fail("--backend ", choice_name(kBackends, spec.backend),
             launched ? " cannot run under an MPI launcher: use --backend mpi, or nccl for GPUs"
                      : " needs an MPI launcher (mpirun, srun): every rank is a process");
}

}  // namespace dpx::parallel
