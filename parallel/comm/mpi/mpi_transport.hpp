// The mpi backend's communicator: dpx's algorithms over MPI point-to-point messages (an
// MpiTransport), bit for bit the numerics of the threads backend, plus the library's own
// collectives for --algo mpi (MPI_Allreduce, MPI_Bcast, MPI_Reduce, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Sendrecv, MPI_Alltoall, MPI_Gather, MPI_Scatter). Every wait is
// recorded in the RankState, so the watchdog can time it.
#pragma once
#include <mpi.h>

#include <memory>
#include <string>

#include "parallel/comm/communicator.hpp"
#include "parallel/runtime/mpi/rank_state.hpp"

namespace dpx::parallel::mpi {

class MpiTransport final : public Transport {
 public:
  // `comm` is used, not owned; `label` names it in stall reports.
  MpiTransport(MPI_Comm comm, RankState& state, std::string label);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "mpi"; }
  bool accepts(Device device) const override { return device.is_cpu(); }
  void begin_call(const CommCall& call) override;
  void end_call() override { state_.end_call(); }
  void set_activity(std::string_view what) override { state_.set_activity(what); }
  std::unique_ptr<StopVote> make_stop_vote() override;
  MPI_Comm comm() const { return comm_; }
  RankState& state() { return state_; }
  const std::string& label() const { return label_; }

 protected:
  void do_exchange(const Exchange& x) override;

 private:
  MPI_Comm comm_;
  RankState& state_;
  std::string label_;
  int rank_ = 0, size_ = 1;
  int tag_ = 0;  // of the current call: messages of different calls never match
  std::unique_ptr<std::byte[]> staging_;  // incoming data that is reduced into place
  size_t staging_bytes_ = 0;
};

// Waits for requests, polling: spinning first (latency), then yielding the CPU between polls,
// sleeping between them only after a second. Throws on an MPI error.
void wait_all(int count, MPI_Request* requests, MPI_Status* statuses);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed with it).
  MpiCommunicator(MPI_Comm comm, RankState& state, std::string label, Algorithm default_algorithm);
  ~MpiCommunicator() override;
  MPI_Comm comm() const { return transport_->comm(); }

 protected:
  void execute(const CollectiveArgs& args, Algorithm algo) override;

 private:
  MpiCommunicator(std::unique_ptr<MpiTransport> transport, Algorithm default_algorithm);
  void library_collective(const CollectiveArgs& args);
  MpiTransport* transport_;  // owned by the Communicator
};

}  // namespace dpx::parallel::mpi
