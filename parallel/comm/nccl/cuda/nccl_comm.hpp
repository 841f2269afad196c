// The nccl backend's communicator (CUDA builds only; the rest of dpx reaches it through
// nccl_backend.hpp): every collective is one NCCL call (or a group of ncclSend/ncclRecv for
// sendrecv, all_to_all, gather and scatter) queued on the rank's communication stream. The
// NcclTransport holds the NCCL communicator, the GPU and the stream together (the device is kept
// with the stream, never asked of it) and waits for its calls in synchronize() and in each Work:
// polling the stream and ncclCommGetAsyncError (nccl_wait.hpp), the wait published to the
// process's watchdog, whose stall report past --comm-timeout aborts every rank this process drives.
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/cuda/event.hpp"
#include "parallel/comm/communicator.hpp"
#include "parallel/runtime/watchdog.hpp"

namespace dpx::parallel::nccl {

// The ranks of one group that this process drives (all of them with one process and several
// GPUs; one under mpirun): what they wait in, timed by the process's watchdog, and the group's
// abort: when one of them gives up, or the watchdog reports a stall, the others stop waiting too.
class LocalRanks {
 public:
  LocalRanks(int size, std::vector<int> local, double timeout_s);
  ~LocalRanks();
  CommWatch& watch() { return *watch_; }
  // The first reason any rank gave up, or "".
  std::string aborted() const;
  void abort(const std::string& why);
  // The watchdog's report, which every rank throws, or "".
  std::string stalled() const;

 private:
  mutable std::mutex mu_;
  std::string aborted_, stalled_;
  std::shared_ptr<CommWatch> watch_;
};

class NcclTransport final : public Transport {
 public:
  // Takes ownership of `comm` (an initialised, non-blocking NCCL communicator on `device`).
  NcclTransport(ncclComm_t comm, int device, int rank, int size, std::shared_ptr<LocalRanks> local);
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
  // Waits for everything queued. `patient`: the watchdog gives it no timeout.
  void wait(bool patient = false);
  // Waits, as wait() does, until `done` has happened on the stream (one call's Work).
  void wait_for(cudaEvent_t done, const CommCall& call);
  // Tells the other ranks of this process to stop waiting, and aborts this rank's communicator.
  void abort_group(const std::string& why);

 protected:
  void do_exchange(const Exchange& x) override;

 private:
  void check_alive();                  // throws once this rank's group has been aborted
  // A non-blocking communicator's call may return ncclInProgress before its work is on the stream:
  // settle() polls ncclCommGetAsyncError until it is (events recorded after it then follow the
  // work); poll() is that, and with `call` also waits until `done` has happened (null: the
  // stream is idle). Both are published to the watchdog as a wait (in `call`, where given).
  void settle();
  void poll(const CommCall* call, cudaEvent_t done = nullptr);
  CommCall current() const;
  void* scratch(size_t bytes);         // device memory for staged in-place sends
  [[noreturn]] void give_up(const std::string& why);
  void abort_comm();

  ncclComm_t comm_;
  const int device_, rank_, size_;
  std::shared_ptr<LocalRanks> local_;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  float* one_ = nullptr;  // the barrier's 4 bytes
  std::atomic<bool> aborted_{false};
  std::atomic<bool> recorded_{false};  // a call was queued inside a CUDA graph's capture (abort_comm)
  mutable std::mutex mu_;
  CommCall current_;  // the call being queued (between begin_call and end_call)
};

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::unique_ptr<NcclTransport> transport);
  void synchronize() override { transport_->wait(); }
  cuda::Stream call_stream() const override { return transport_->stream(); }
  void abort_group(const std::string& why) { transport_->abort_group(why); }

 protected:
  void execute(const CollectiveArgs& args, Algorithm algo) override;
  // Queued on the stream between two timing events; `ready` (the fence) runs first, here.
  Work start(const CollectiveArgs& args, const CommCall& call, Ready ready) override;

 private:
  NcclTransport* transport_;  // owned by the Communicator
  // An event on the stream that had happened at the steady clock's anchor_s_ (waited for when
  // the communicator was made): a call's start on the host clock is anchor_s_ plus the GPU time
  // from it (Work::started_s, the trace's bucket spans).
  cuda::Event anchor_;
  double anchor_s_ = 0;
};

}  // namespace dpx::parallel::nccl
