// The processes of this job. Under an MPI launcher (mpirun, srun) every process is one rank and
// the group is MPI's world (parallel/comm/mpi/, parallel/runtime/mpi/); otherwise the group is this process alone and ranks,
// if any, are its threads (threads_backend.hpp). main() joins the group before anything else and
// leaves it last; the commands ask it for communicators, and agree through it at start-up.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "parallel/comm/communicator.hpp"
#include "parallel/runtime/launch_info.hpp"

namespace dpx::parallel {

// The options a rank runs with, as (flag, value) pairs, and how its start went. Every rank
// brings one to ProcessGroup::agree.
struct StartReport {
  int code = 0;            // 0: ready; 2: a usage error; 1: another error
  std::string message;     // the error, when code != 0
  std::vector<std::pair<std::string, std::string>> options;
};

// A failure every rank meets alike, at the same point: the ranks did not all start well, or
// disagree on their options, or all see the same non-finite gradients. Every rank knows, so
// rank 0 says it once and every rank leaves cleanly with exit_code.
struct SharedFailure : Error {
  SharedFailure(int code, const std::string& message) : Error(message), exit_code(code) {}
  int exit_code;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  // Ranks are processes started by an MPI launcher (even a world of one).
  virtual bool launched() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const LaunchInfo& info() const = 0;
  // The communicator over every process. Launched groups only.
  virtual Communicator& world() = 0;
  // A communicator over ranks [0, k) for ranks < k, null for the others; every rank calls it.
  virtual std::unique_ptr<Communicator> first(int k) = 0;
  // The timeout of every collective from now on (--comm-timeout).
  virtual void set_comm_timeout(double seconds) = 0;
  // Collective, once: returns when every rank is ready and all run the same options; otherwise
  // throws SharedFailure on every rank, naming the ranks that failed or the differing option.
  void agree(const StartReport& mine);
  bool agreed() const { return agreed_; }
  // After an error on this rank once the ranks agreed: ends every rank of the job. Never returns
  // (a group of this process alone throws: its caller returns the exit code instead).
  [[noreturn]] virtual void abort(int exit_code) = 0;
  // The work is done on every rank: from here a rank that leaves is no fault (collective).
  virtual void finish() = 0;

 protected:
  bool agreed_ = false;
};

// The group this process belongs to: MPI's world when a launcher started it (and dpx was built
// with MPI), else this process alone. Throws dpx::Error when a launcher started several
// processes but this dpx has no MPI, or when MPI and the launcher disagree.
std::unique_ptr<ProcessGroup> join_process_group(int& argc, char**& argv);

// A group of one process: ranks are threads.
class LocalProcessGroup final : public ProcessGroup {
 public:
  LocalProcessGroup();
  bool launched() const override { return false; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const LaunchInfo& info() const override { return info_; }
  Communicator& world() override;
  std::unique_ptr<Communicator> first(int k) override;
  void set_comm_timeout(double) override {}
  [[noreturn]] void abort(int exit_code) override;
  void finish() override {}

 private:
  LaunchInfo info_;
};

// A communicator of the same ranks as `comm`, one of the MPI job's, over messages of its own: DDP's
// gradients (and --net-sim) there, the votes and barriers on `comm`. Collective.
std::unique_ptr<Communicator> duplicate(Communicator& comm);

// The start-up agreement over any communicator (the mpi group's world): exchanges every rank's
// report and throws SharedFailure alike on every rank when one failed or the options differ.
void agree_on_start(Communicator& comm, const StartReport& mine);

}  // namespace dpx::parallel
