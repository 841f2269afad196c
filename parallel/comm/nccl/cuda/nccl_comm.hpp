// The nccl backend's communicator (CUDA builds only; the rest of dpx reaches it through
// nccl_backend.hpp): every collective is one NCCL call (or a group of ncclSend/ncclRecv for
// sendrecv, all_to_all, gather and scatter) queued on the rank's communication stream. The
// NcclTransport holds the NCCL communicator, the GPU and the stream together (the device is kept
// with the stream, never asked of it), records each queued call with an event, and waits for them
// in synchronize(): polling the stream and ncclCommGetAsyncError (nccl_wait.hpp), and past
// --comm-timeout printing the stall report of every rank this process drives and aborting them.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm/communicator.hpp"
#include "parallel/runtime/stall_report.hpp"

namespace dpx::parallel::nccl {

class NcclTransport;

// The ranks of one group that this process drives (all of them with one process and several
// GPUs; one under mpirun), for stall reports; and the group's abort: when one of them gives up,
// the others stop waiting too.
class LocalRanks {
 public:
  explicit LocalRanks(int size) : size_(size) {}
  void add(NcclTransport* t);
  void remove(NcclTransport* t);
  // One status per rank of the group; ranks of other processes are not asked (no_answer).
  std::vector<RankStatus> statuses() const;
  // The first reason any rank gave up, or "".
  std::string aborted() const;
  void abort(const std::string& why);

 private:
  mutable std::mutex mu_;
  int size_;
  std::vector<NcclTransport*> ranks_;
  std::string aborted_;
};

class NcclTransport final : public Transport {
 public:
  // Takes ownership of `comm` (an initialised, non-blocking NCCL communicator on `device`).
  NcclTransport(ncclComm_t comm, int device, int rank, int size, double timeout_s, std::shared_ptr<LocalRanks> local);
  ~NcclTransport() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "nccl"; }
  bool accepts(Device device) const override { return device.is_cuda() && device.index == device_; }
  void barrier() override;
  void begin_call(const CommCall& call) override;
  void end_call() override;
  void set_activity(std::string_view what) override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // Queues one validated collective (NCCL's buffer conventions, device memory of this GPU).
  void collective(const CollectiveArgs& a);
  // Waits for everything queued (the watchdog: polls, times out, aborts). `patient`: no timeout.
  void wait(bool patient = false);
  // Waits, as wait() does, until `done` has happened on the stream (one call's Work).
  void wait_for(cudaEvent_t done, const CommCall& call);
  // Under mpirun: the process group (MPI), whose watchdog answers the other processes and prints
  // the job's stall report. Each wait is announced to it as a call (the last collective queued),
  // so that a hang in NCCL is reported after --comm-timeout with every process's state; this
  // rank's own give-up then waits longer, as the fallback.
  void report_to(Communicator* host) { host_ = host; }
  RankStatus status() const;
  // Tells the other ranks of this process to stop waiting, and aborts this rank's communicator.
  void abort_group(const std::string& why);

 protected:
  void do_exchange(const Exchange& x) override;

 private:
  struct InFlight {
    CommCall call;
    cudaEvent_t done = nullptr;
    double queued_s = 0;
  };
  void queued(const CommCall& call);  // records the call's completion event
  void check_alive();                  // throws once this rank's group has been aborted
  // A non-blocking communicator's call may return ncclInProgress before its work is on the stream:
  // settle() polls ncclCommGetAsyncError until it is (events recorded after it then follow the
  // work); poll() is that, and with stream_too also waits for the stream to finish.
  void settle();
  // Polls until `done` has happened (null: everything queued) or, with stream_too false, only
  // until the calls are on the stream.
  void poll(bool stream_too, bool patient, cudaEvent_t done = nullptr);
  // Tells the host watchdog (report_to) about a wait of `call` while `wait` runs.
  template <typename F>
  void announced(const CommCall& call, F&& wait);
  void* scratch(size_t bytes);         // device memory for staged in-place sends
  [[noreturn]] void give_up(const std::string& why, bool timed_out);
  void abort_comm();

  ncclComm_t comm_;
  const int device_, rank_, size_;
  double timeout_s_;
  std::shared_ptr<LocalRanks> local_;
  Communicator* host_ = nullptr;  // report_to
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  float* one_ = nullptr;  // the barrier's 4 bytes
  std::atomic<bool> aborted_{false};

  mutable std::mutex mu_;           // what status() reads from the watchdog of another rank
  std::deque<InFlight> in_flight_;  // queued calls, oldest first
  std::vector<cudaEvent_t> free_events_;
  CommCall current_;                // the call being queued (between begin_call and end_call)
  bool in_call_ = false;
  double idle_since_s_ = 0;
  std::string activity_;
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::unique_ptr<NcclTransport> transport);
  void synchronize() override { transport_->wait(); }
  int device() const { return transport_->device(); }
  cudaStream_t stream() const { return transport_->stream(); }
  cuda::Stream call_stream() const override { return transport_->stream(); }
  void abort_group(const std::string& why) { transport_->abort_group(why); }

 protected:
  void execute(const CollectiveArgs& args, Algorithm algo) override;
  // Queued on the stream between two timing events; `ready` (the fence) runs first, here.
  Work start(const CollectiveArgs& args, const CommCall& call, Ready ready) override;

 private:
  NcclTransport* transport_;  // owned by the Communicator
};

}  // namespace dpx::parallel::nccl
