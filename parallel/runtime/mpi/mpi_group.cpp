// The group of MPI processes (see process_group.hpp). Start-up, in order: MPI_Init_thread asking
// for MPI_THREAD_MULTIPLE (the communication threads and the watchdog call MPI while the training
// thread does); cross-check the launcher's variables; learn every rank's pid, host and node; hand
// the process's watchdog the job's peers (which take SIGINT, SIGTERM and SIGHUP from here on);
// align the clocks.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "core/error.hpp"
#include "parallel/runtime/clock_sync.hpp"
#include "parallel/runtime/launcher_env.hpp"
#include "parallel/comm/mpi/mpi_transport.hpp"
#include "parallel/comm/mpi/mpi_util.hpp"
#include "parallel/runtime/mpi/mpi_peers.hpp"
#include "parallel/runtime/process_group.hpp"
#include "parallel/comm/threads/threads_backend.hpp"

namespace dpx::parallel {

namespace mpi {

namespace {

// What each rank tells the others about itself at start-up.
struct Identity {
  int32_t pid = 0;
  int32_t node = 0;        // the world rank of the node's first rank
  int32_t local_rank = 0;
  int32_t cores = 1;       // CPUs this process may run on
  uint64_t pid_namespace = 0;
  char host[64] = {};
};

uint64_t pid_namespace() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

}  // namespace

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup(int& argc, char**& argv, const LauncherEnv& env);
  ~MpiProcessGroup() override;
  bool launched() const override { return true; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const LaunchInfo& info() const override { return info_; }
  Communicator& world() override { return *world_; }
  std::unique_ptr<Communicator> first(int k) override;
  void set_comm_timeout(double seconds) override {
    if (!(seconds > 0)) usage_fail("--comm-timeout must be a positive number of seconds (got ", seconds, ")");
    timeout_s_ = seconds;
    world_->set_timeout(seconds);
  }
  [[noreturn]] void abort(int exit_code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }
  void finish() override;

 private:
  int rank_ = 0, size_ = 1;
  LaunchInfo info_;
  double timeout_s_ = 300;  // --comm-timeout
  MPI_Comm control_ = MPI_COMM_NULL;
  std::unique_ptr<MpiPeers> peers_;
  std::unique_ptr<MpiCommunicator> world_;
  bool finished_ = false;
};

MpiProcessGroup::MpiProcessGroup(int& argc, char**& argv, const LauncherEnv& env) {
  int provided = MPI_THREAD_SINGLE;
  DPX_MPI_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // errors come back to DPX_MPI_CHECK
  DPX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  DPX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  require_thread_multiple(provided);
  create_types();

  // Where each rank runs: a communicator per node (shared memory), whose first rank names it.
  MPI_Comm node_comm;
  DPX_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm));
  MpiPlace place;
  place.rank = rank_;
  place.size = size_;
  DPX_MPI_CHECK(MPI_Comm_rank(node_comm, &place.local_rank));
  DPX_MPI_CHECK(MPI_Comm_size(node_comm, &place.local_size));
  int node = rank_;
  DPX_MPI_CHECK(MPI_Bcast(&node, 1, MPI_INT, 0, node_comm));
  MPI_Comm_free(&node_comm);

  // Every rank checks its launcher's variables; if any rank's disagree, every rank stops.
  const std::vector<std::string> mismatches = launcher_mismatches(process_env(), place, srun_mpi_plugin());
  int bad = mismatches.empty() ? 0 : 1, any_bad = 0;
  DPX_MPI_CHECK(MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (any_bad) {
    std::string text;
    for (const std::string& m : mismatches) text += (text.empty() ? "" : "; ") + m;
    fail("rank ", rank_, " of ", size_, ": the launcher and the MPI library disagree: ",
         text.empty() ? "on another rank (see its message)" : text);
  }

  Identity me;
  me.pid = static_cast<int32_t>(getpid());
  me.node = node;
  me.local_rank = place.local_rank;
  me.cores = available_cpus();
  me.pid_namespace = pid_namespace();
  gethostname(me.host, sizeof me.host - 1);
  std::vector<Identity> all(static_cast<size_t>(size_));
  DPX_MPI_CHECK(MPI_Allgather(&me, sizeof me, MPI_BYTE, all.data(), sizeof me, MPI_BYTE, MPI_COMM_WORLD));

  std::vector<Peer> peers;
  std::vector<int> nodes;
  info_.backend = "mpi";
  info_.library = library_version();
  info_.thread_level = thread_level_name(provided);
  info_.launcher = env.launcher;
  info_.launcher_env = env.variables;
  info_.ranks = size_;
  info_.nodes = 0;
  for (int q = 0; q < size_; ++q) {
    const Identity& id = all[static_cast<size_t>(q)];
    Peer p;
    p.rank = q;
    p.pid = id.pid;
    p.host = id.host;
    // A pid means the same process only inside one pid namespace on one machine.
    p.local = id.node == node && id.pid_namespace == me.pid_namespace && p.host == me.host;
    peers.push_back(p);
    nodes.push_back(id.node);
    info_.nodes += id.node == q ? 1 : 0;
    info_.hosts.push_back(id.host);
    info_.pids.push_back(id.pid);
    info_.node_of_rank.push_back(id.node);
    info_.local_rank.push_back(id.local_rank);
  }
  // The launcher's binding decides the cores: a process bound to a set uses that set; an
  // unbound one (every CPU of the machine) shares the machine with the other ranks of its node.
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  info_.cores_per_rank = me.cores < machine || place.local_size == 1 ? me.cores : std::max(1, machine / place.local_size);
  info_.bound = me.cores < machine;

  DPX_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &control_));
  MPI_Comm data;
  DPX_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &data));
  peers_ = std::make_unique<MpiPeers>(control_, peers, rank_);
  Watchdog::of_process().set_peers(peers_.get());
  world_ = std::make_unique<MpiCommunicator>(data, "world", timeout_s_);
  world_->set_node_layout(nodes);
  world_->set_activity("starting up: aligning clocks");
  for (const ClockOffset& c : align_clocks(*world_)) {
    info_.clock_offset_s.push_back(c.offset_s);
    info_.clock_uncertainty_s.push_back(c.uncertainty_s);
  }
  world_->set_activity("starting up");
  // Only rank 0 writes to standard output; every rank keeps standard error for its errors.
  if (rank_ != 0) {
    std::fflush(stdout);
    if (std::FILE* null = std::freopen("/dev/null", "w", stdout); !null) std::fclose(stdout);
  }
}

std::unique_ptr<Communicator> MpiProcessGroup::first(int k) {
  if (k < 1 || k > size_) fail("a communicator of the first ", k, " ranks in a world of ", size_);
  MPI_Comm sub = MPI_COMM_NULL;
  DPX_MPI_CHECK(MPI_Comm_split(world_->comm(), rank_ < k ? 0 : MPI_UNDEFINED, rank_, &sub));
  if (sub == MPI_COMM_NULL) return nullptr;
  MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  auto comm = std::make_unique<MpiCommunicator>(sub, k == 1 ? "rank 0" : detail::concat("ranks 0-", k - 1), timeout_s_);
  comm->set_node_layout(std::vector<int>(info_.node_of_rank.begin(), info_.node_of_rank.begin() + k));
  return comm;
}

void MpiProcessGroup::finish() {
  if (finished_) return;
  finished_ = true;
  // From here ranks leave as they finish, so their exits must not read as crashes. The last
  // barrier waits as long as rank 0 takes to write the run's files; a rank that never reaches it
  // (dead, hung) still ends it, as it stops answering.
  peers_->stop_watching_peers();
  world_->barrier_patient("the last rank to finish (rank 0 writes the run's files)");
  world_->set_finished();
}

MpiProcessGroup::~MpiProcessGroup() {
  try {
    finish();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpx: error: rank %d: while finishing: %s\n", rank_, e.what());
    abort(1);
  }
  world_.reset();
  Watchdog::of_process().set_peers(nullptr);
  peers_.reset();
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
  free_types();
  MPI_Finalize();
}

}  // namespace mpi

std::unique_ptr<Communicator> duplicate(Communicator& comm) {
  auto* mpi = dynamic_cast<mpi::MpiCommunicator*>(&comm);
  DPX_CHECK(mpi != nullptr, "duplicate: the ", comm.backend(), " backend's communicators are not MPI's");
  return mpi->duplicate(mpi->size() == 1 ? "rank 0, data" : detail::concat("ranks 0-", mpi->size() - 1, ", data"));
}

std::unique_ptr<ProcessGroup> join_process_group(int& argc, char**& argv) {
  const LauncherEnv env = read_launcher_env(process_env());
  if (!env.launched()) return std::make_unique<LocalProcessGroup>();
  if (const std::string refusal = launch_refusal(process_env(), mpi::srun_mpi_plugin()); !refusal.empty())
    usage_fail(refusal);
  return std::make_unique<mpi::MpiProcessGroup>(argc, argv, env);
}

}  // namespace dpx::parallel
