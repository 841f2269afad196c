// The nccl backend's transport and communicator (see nccl_comm.hpp). NCCL calls on non-blocking
// communicators may return ncclInProgress; that is success here, and the completion is what
// wait() polls for.
#include "parallel/comm/nccl/cuda/nccl_comm.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "core/clock.hpp"
#include "core/cuda/check.hpp"
#include "core/cuda/device_guard.hpp"
#include "core/cuda/event.hpp"
#include "core/error.hpp"
#include "parallel/comm/nccl/cuda/nccl_types.hpp"
#include "parallel/comm/nccl/nccl_wait.hpp"

namespace dpx::parallel::nccl {

namespace {

// A queued NCCL call: success or still in progress (non-blocking communicators); anything else
// throws with NCCL's words.
void check_queued(ncclResult_t r, const char* expr, const char* file, int line) {
  if (r != ncclSuccess && r != ncclInProgress) cuda::throw_nccl_error(r, expr, file, line);
}
#define DPX_NCCL_QUEUE(expr) check_queued((expr), #expr, __FILE__, __LINE__)

// Runs the sends and receives of one pattern as one NCCL group, so they proceed together.
template <typename F>
void group(F&& body) {
  DPX_NCCL_QUEUE(ncclGroupStart());
  try {
    body();
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  DPX_NCCL_QUEUE(ncclGroupEnd());
}

// NCCL counts no bytes: what the bandwidth-optimal (ring) schedule of the call sends from one
// rank, the figure dpx's algorithms are compared with (NCCL may choose a tree).
uint64_t ring_bytes(const CollectiveArgs& a, int n) {
  const double bytes = static_cast<double>(a.count * dtype_size(a.dtype)), share = (n - 1.0) / n;
  switch (a.kind) {
    case Collective::all_reduce: return static_cast<uint64_t>(2 * share * bytes);
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all: return static_cast<uint64_t>(share * n * bytes);
    default: return static_cast<uint64_t>(bytes);
  }
}

}  // namespace

// ---- LocalRanks ---------------------------------------------------------------------------------

void LocalRanks::add(NcclTransport* t) {
  std::lock_guard<std::mutex> lock(mu_);
  ranks_.push_back(t);
}

void LocalRanks::remove(NcclTransport* t) {
  std::lock_guard<std::mutex> lock(mu_);
  ranks_.erase(std::remove(ranks_.begin(), ranks_.end(), t), ranks_.end());
}

std::vector<RankStatus> LocalRanks::statuses() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RankStatus> out(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    out[static_cast<size_t>(r)].rank = r;
    out[static_cast<size_t>(r)].state = RankStatus::State::no_answer;
    out[static_cast<size_t>(r)].activity = "a rank of another process: the nccl backend does not ask it";
  }
  for (const NcclTransport* t : ranks_) out[static_cast<size_t>(t->rank())] = t->status();
  return out;
}

std::string LocalRanks::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

void LocalRanks::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.empty()) aborted_ = why;
}

// ---- NcclTransport ------------------------------------------------------------------------------

NcclTransport::NcclTransport(ncclComm_t comm, int device, int rank, int size, double timeout_s,
                             std::shared_ptr<LocalRanks> local)
    : comm_(comm), device_(device), rank_(rank), size_(size), timeout_s_(timeout_s), local_(std::move(local)),
      idle_since_s_(now_s()) {
  cuda::DeviceGuard guard(device_);
  // Non-blocking: the legacy default stream's synchronous copies and memsets (Tensor::to,
  // Tensor::zeros) must not wait for all-reduces in flight; DDP orders this stream by events.
  DPX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DPX_CUDA_CHECK(cudaMalloc(&one_, sizeof(float)));
  local_->add(this);
}

NcclTransport::~NcclTransport() {
  local_->remove(this);
  cuda::DeviceGuard guard(device_);
  if (!aborted_) {
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dpx: nccl rank %d: %s\n", rank_, e.what());
    }
  }
  if (!aborted_) {
    // Finalize (non-blocking: poll until it is done, at most a few seconds), then destroy.
    ncclResult_t state = ncclCommFinalize(comm_);
    const double start = now_s();
    while (state == ncclInProgress || (state == ncclSuccess && ncclCommGetAsyncError(comm_, &state) == ncclSuccess &&
                                       state == ncclInProgress)) {
      if (now_s() - start > 10) {
        abort_comm();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!aborted_) ncclCommDestroy(comm_);
  }
  for (InFlight& f : in_flight_) cudaEventDestroy(f.done);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (scratch_) cudaFree(scratch_);
  if (one_) cudaFree(one_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclTransport::abort_comm() {
  if (aborted_.exchange(true)) return;
  ncclCommAbort(comm_);  // ends NCCL's kernels and proxy threads for this communicator
}

void NcclTransport::begin_call(const CommCall& call) {
  std::lock_guard<std::mutex> lock(mu_);
  current_ = call;
  in_call_ = true;
}

void NcclTransport::end_call() {
  std::lock_guard<std::mutex> lock(mu_);
  in_call_ = false;
  idle_since_s_ = now_s();
}

void NcclTransport::set_activity(std::string_view what) {
  std::lock_guard<std::mutex> lock(mu_);
  activity_.assign(what);
}

RankStatus NcclTransport::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  RankStatus s;
  s.rank = rank_;
  s.comm = "nccl";
  s.activity = activity_;
  // The oldest queued call the GPU has not finished is where this rank is, whatever its host
  // thread does meanwhile.
  for (const InFlight& f : in_flight_) {
    if (cudaEventQuery(f.done) == cudaSuccess) continue;
    s.state = RankStatus::State::in_call;
    s.call = f.call;
    s.for_s = now_s() - f.queued_s;
    return s;
  }
  if (in_call_) {
    s.state = RankStatus::State::in_call;
    s.call = current_;
    return s;
  }
  s.state = RankStatus::State::busy;
  s.for_s = now_s() - idle_since_s_;
  return s;
}

void NcclTransport::queued(const CommCall& call) {
  std::lock_guard<std::mutex> lock(mu_);
  // Calls the GPU has finished are forgotten as new ones come, so the list stays short even when
  // nobody waits (DDP queues its buckets and waits once per step).
  while (!in_flight_.empty() && cudaEventQuery(in_flight_.front().done) == cudaSuccess) {
    free_events_.push_back(in_flight_.front().done);
    in_flight_.pop_front();
  }
  cudaEvent_t e = nullptr;
  if (free_events_.empty()) {
    DPX_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  } else {
    e = free_events_.back();
    free_events_.pop_back();
  }
  DPX_CUDA_CHECK(cudaEventRecord(e, stream_));
  in_flight_.push_back({call, e, now_s()});
}

void* NcclTransport::scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    if (scratch_) {
      DPX_CUDA_CHECK(cudaStreamSynchronize(stream_));  // queued calls may still read the old block
      DPX_CUDA_CHECK(cudaFree(scratch_));
      scratch_ = nullptr;
    }
    DPX_CUDA_CHECK(cudaMalloc(&scratch_, bytes));
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

void NcclTransport::check_alive() {
  // An aborted communicator's handle is freed: nothing may touch it again.
  if (aborted_) fail("nccl rank ", rank_, ": its communicator was aborted (", local_->aborted(), ")");
  if (const std::string why = local_->aborted(); !why.empty()) {
    abort_comm();
    fail("nccl rank ", rank_, " aborted: ", why);
  }
}

void NcclTransport::collective(const CollectiveArgs& a) {
  check_alive();
  cuda::DeviceGuard guard(device_);
  const ncclDataType_t t = nccl_dtype(a.dtype);
  const size_t es = dtype_size(a.dtype), n = static_cast<size_t>(size_), r = static_cast<size_t>(rank_);
  const size_t block = a.count * es;
  auto at = [](const void* p, size_t bytes) { return static_cast<const std::byte*>(p) + bytes; };
  auto at_mut = [](void* p, size_t bytes) { return static_cast<std::byte*>(p) + bytes; };
  // In place, a pattern's sends would read what its receives overwrite: send from a copy.
  auto staged = [&](const void* send, size_t bytes) -> const void* {
    void* copy = scratch(bytes);
    DPX_CUDA_CHECK(cudaMemcpyAsync(copy, send, bytes, cudaMemcpyDeviceToDevice, stream_));
    return copy;
  };
  if (a.count > 0) {
    switch (a.kind) {
      case Collective::all_reduce:
        DPX_NCCL_QUEUE(ncclAllReduce(a.send, a.recv, a.count, t, nccl_op(a.op), comm_, stream_));
        break;
      case Collective::broadcast:
        DPX_NCCL_QUEUE(ncclBroadcast(a.send, a.recv, a.count, t, a.root, comm_, stream_));
        break;
      case Collective::reduce:
        DPX_NCCL_QUEUE(ncclReduce(a.send, a.recv, a.count, t, nccl_op(a.op), a.root, comm_, stream_));
        break;
      case Collective::all_gather:
        DPX_NCCL_QUEUE(ncclAllGather(a.send, a.recv, a.count, t, comm_, stream_));
        break;
      case Collective::reduce_scatter:
        DPX_NCCL_QUEUE(ncclReduceScatter(a.send, a.recv, a.count, t, nccl_op(a.op), comm_, stream_));
        break;
      case Collective::sendrecv: {
        const void* send = a.send == a.recv ? staged(a.send, block) : a.send;
        group([&] {
          DPX_NCCL_QUEUE(ncclSend(send, a.count, t, static_cast<int>((r + 1) % n), comm_, stream_));
          DPX_NCCL_QUEUE(ncclRecv(a.recv, a.count, t, static_cast<int>((r + n - 1) % n), comm_, stream_));
        });
        break;
      }
      case Collective::all_to_all: {
        const void* send = a.send == a.recv ? staged(a.send, block * n) : a.send;
        group([&] {
          for (size_t q = 0; q < n; ++q) {
            DPX_NCCL_QUEUE(ncclSend(at(send, q * block), a.count, t, static_cast<int>(q), comm_, stream_));
            DPX_NCCL_QUEUE(ncclRecv(at_mut(a.recv, q * block), a.count, t, static_cast<int>(q), comm_, stream_));
          }
        });
        break;
      }
      case Collective::gather:
        if (static_cast<int>(r) == a.root) {
          void* own = at_mut(a.recv, r * block);
          if (own != a.send)
            DPX_CUDA_CHECK(cudaMemcpyAsync(own, a.send, block, cudaMemcpyDeviceToDevice, stream_));
        }
        group([&] {
          if (static_cast<int>(r) != a.root) {
            DPX_NCCL_QUEUE(ncclSend(a.send, a.count, t, a.root, comm_, stream_));
            return;
          }
          for (size_t q = 0; q < n; ++q)
            if (q != r)
              DPX_NCCL_QUEUE(ncclRecv(at_mut(a.recv, q * block), a.count, t, static_cast<int>(q), comm_, stream_));
        });
        break;
      case Collective::scatter:
        group([&] {
          if (static_cast<int>(r) != a.root) {
            DPX_NCCL_QUEUE(ncclRecv(a.recv, a.count, t, a.root, comm_, stream_));
            return;
          }
          for (size_t q = 0; q < n; ++q)
            if (q != r)
              DPX_NCCL_QUEUE(ncclSend(at(a.send, q * block), a.count, t, static_cast<int>(q), comm_, stream_));
        });
        if (static_cast<int>(r) == a.root && at(a.send, r * block) != a.recv)
          DPX_CUDA_CHECK(cudaMemcpyAsync(a.recv, at(a.send, r * block), block, cudaMemcpyDeviceToDevice, stream_));
        break;
      default: fail("the nccl backend has no ", collective_name(a.kind));
    }
  }
  settle();  // a non-blocking communicator may return before the work is on the stream
  count_sent(ring_bytes(a, size_));
  CommCall call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call = current_;
  }
  queued(call);
}

void NcclTransport::do_exchange(const Exchange& x) {
  if (x.reduce_with)
    fail("the nccl backend runs NCCL's collectives, not dpx's algorithms (their reductions need the p2p backend)");
  check_alive();
  cuda::DeviceGuard guard(device_);
  group([&] {
    if (x.send_peer >= 0) DPX_NCCL_QUEUE(ncclSend(x.send, x.send_bytes, ncclUint8, x.send_peer, comm_, stream_));
    if (x.recv_peer >= 0) DPX_NCCL_QUEUE(ncclRecv(x.recv, x.recv_bytes, ncclUint8, x.recv_peer, comm_, stream_));
  });
  settle();
  CommCall call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call = current_;
  }
  queued(call);
  wait();  // a send returns once the peer has the data (communicator.hpp)
}

void NcclTransport::barrier() {
  bool patient = false;
  CommCall call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    patient = current_.patient;
    call = current_;
  }
  check_alive();
  cuda::DeviceGuard guard(device_);
  DPX_NCCL_QUEUE(ncclAllReduce(one_, one_, 1, ncclFloat32, ncclSum, comm_, stream_));
  settle();
  queued(call);
  wait(patient);
}

template <typename F>
void NcclTransport::announced(const CommCall& call, F&& wait) {
  if (!host_) return wait();
  host_->begin_foreign_call(call);
  try {
    wait();
  } catch (...) {
    host_->end_foreign_call();
    throw;
  }
  host_->end_foreign_call();
}

void NcclTransport::wait(bool patient) {
  CommCall call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call = current_;
  }
  call.patient = patient;
  announced(call, [&] { poll(true, patient); });
}

void NcclTransport::wait_for(cudaEvent_t done, const CommCall& call) {
  announced(call, [&] { poll(true, false, done); });
}

void NcclTransport::settle() { poll(false, false); }

void NcclTransport::poll(bool stream_too, bool patient, cudaEvent_t done) {
  cuda::DeviceGuard guard(device_);
  const double start = now_s();
  for (;;) {
    check_alive();
    NcclProbe probe;
    const cudaError_t s = !stream_too ? cudaSuccess : done ? cudaEventQuery(done) : cudaStreamQuery(stream_);
    probe.stream_idle = s == cudaSuccess;
    probe.stream_failed = s != cudaSuccess && s != cudaErrorNotReady;
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess) probe.comm_failed = true;
    probe.comm_in_progress = async == ncclInProgress;
    probe.comm_failed = probe.comm_failed || (async != ncclSuccess && async != ncclInProgress);
    const double waited = now_s() - start;
    // With a host watchdog (report_to) that one reports at --comm-timeout, asking every process.
    const double timeout = host_ ? timeout_s_ + std::max(10.0, timeout_s_ / 2) : timeout_s_;
    switch (judge_wait(probe, waited, patient ? 0 : timeout)) {
      case NcclWaitVerdict::done: {
        if (!stream_too || done) return;  // queued, or the one call waited for has finished
        std::lock_guard<std::mutex> lock(mu_);
        for (InFlight& f : in_flight_) free_events_.push_back(f.done);
        in_flight_.clear();
        return;
      }
      case NcclWaitVerdict::failed: {
        const char* last = ncclGetLastError(comm_);
        give_up(probe.stream_failed
                    ? detail::concat("CUDA error on its stream: ", cudaGetErrorString(s))
                    : detail::concat("NCCL error: ", ncclGetErrorString(async),
                                     last && last[0] ? detail::concat(" (", last, ")") : std::string()),
                false);
      }
      case NcclWaitVerdict::timed_out: {
        StallPoint at;
        at.rank = rank_;
        at.comm = "nccl";
        at.waited_s = waited;
        at.timeout_s = timeout;
        const RankStatus mine = status();
        at.call = mine.call;
        give_up(stall_report(at, local_->statuses()), true);
      }
      case NcclWaitVerdict::pending: {
        const double pause = poll_pause_s(waited);
        if (pause > 0) std::this_thread::sleep_for(std::chrono::duration<double>(pause));
        else std::this_thread::yield();
      }
    }
  }
}

void NcclTransport::abort_group(const std::string& why) {
  local_->abort(why);
  abort_comm();
}

void NcclTransport::give_up(const std::string& why, bool timed_out) {
  local_->abort(detail::concat("rank ", rank_, timed_out ? " timed out" : " failed"));
  abort_comm();
  fail(timed_out ? "" : detail::concat("nccl rank ", rank_, ": "), why,
       timed_out ? "\nThe NCCL communicators of this process were aborted (ncclCommAbort)." : "");
}

// ---- NcclCommunicator ---------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(std::unique_ptr<NcclTransport> transport)
    : Communicator(std::move(transport), Algorithm::nccl),
      transport_(&static_cast<NcclTransport&>(Communicator::transport())) {}

namespace {

// One call queued on the stream: finished when the event after it has happened.
class NcclWork final : public Work::State {
 public:
  NcclWork(NcclTransport& transport, const CommCall& call)
      : transport_(transport), call_(call), start(transport.device()), end(transport.device()) {}
  void wait() override { transport_.wait_for(end.get(), call_); }
  bool done() const override { return end.done(); }
  double seconds() const override { return cuda::elapsed_ms(start, end) * 1e-3; }
  uint64_t bytes_sent() const override { return bytes; }

 private:
  NcclTransport& transport_;
  const CommCall call_;

 public:
  cuda::Event start, end;  // timing events around the call on the stream
  uint64_t bytes = 0;
};

}  // namespace

Work NcclCommunicator::start(const CollectiveArgs& args, const CommCall& call, Ready ready) {
  if (ready) ready();  // a fence makes the stream wait for the work that wrote the buffers
  auto work = std::make_shared<NcclWork>(*transport_, call);
  const uint64_t sent = transport_->bytes_sent();
  work->start.record(transport_->stream());
  perform(args, call);
  work->end.record(transport_->stream());
  work->bytes = transport_->bytes_sent() - sent;
  return Work(work);
}

void NcclCommunicator::execute(const CollectiveArgs& args, Algorithm algo) {
  if (algo != Algorithm::nccl)
    fail("--algo ", algorithm_name(algo), ": the nccl backend runs NCCL's own collectives (--algo nccl); dpx's "
         "algorithms over GPUs are the p2p backend's");
  transport_->collective(args);
}

}  // namespace dpx::parallel::nccl
