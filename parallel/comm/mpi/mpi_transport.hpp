// The mpi backend's communicator: dpx's algorithms over MPI point-to-point messages (an
// MpiTransport), bit for bit the numerics of the threads backend, plus the library's own
// collectives for --algo mpi (MPI_Allreduce, MPI_Bcast, MPI_Reduce, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Sendrecv, MPI_Alltoall, MPI_Gather, MPI_Scatter). Every call and
// every wait is published to the process's watchdog (runtime/watchdog.hpp), which times it.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/comm/communicator.hpp"
#include "parallel/runtime/watchdog.hpp"

namespace dpx::parallel::mpi {

class MpiTransport final : public Transport {
 public:
  // `comm` is used, not owned; `label` names it in stall reports, which the process's watchdog
  // makes once a wait outlasts `timeout_s`.
  MpiTransport(MPI_Comm comm, std::string label, double timeout_s);
  ~MpiTransport() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "mpi"; }
  bool accepts(Device device) const override { return device.is_cpu(); }
  void begin_call(const CommCall& call) override;
  void end_call() override { watch_->end_call(rank_); }
  void set_activity(std::string_view what) override { watch_->set_activity(rank_, what); }
  MPI_Comm comm() const { return comm_; }
  CommWatch& watch() { return *watch_; }

 protected:
  void do_exchange(const Exchange& x) override;

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<CommWatch> watch_;
  int tag_ = 0;  // of the current call: messages of different calls never match
  Workspace staging_;  // incoming data that is reduced into place
};

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed with it).
  MpiCommunicator(MPI_Comm comm, std::string label, double timeout_s);
  ~MpiCommunicator() override;
  MPI_Comm comm() const { return transport_->comm(); }
  // --comm-timeout, from now on.
  void set_timeout(double seconds) { transport_->watch().set_timeout(seconds); }
  // This rank's work is done: the job is ending normally.
  void set_finished() { transport_->watch().set_finished(rank()); }
  // The same ranks over an MPI communicator of their own (MPI_Comm_dup), labelled `label` in
  // stall reports. Collective.
  std::unique_ptr<MpiCommunicator> duplicate(const std::string& label);

 protected:
  void execute(const CollectiveArgs& args, Algorithm algo) override;

 private:
  void library_collective(const CollectiveArgs& args);
  MpiTransport* transport_;  // owned by the Communicator
};

}  // namespace dpx::parallel::mpi
