// The nccl backend's transport and communicator (see nccl_comm.hpp). NCCL calls on non-blocking
// communicators may return ncclInProgress; that is success here, and the completion is what
// wait() polls for.
#include "parallel/comm/nccl/cuda/nccl_comm.hpp"

#include <algorithm>
#include <cstdio>
#include <thread>

#include "core/capture.hpp"
#include "core/clock.hpp"
#include "core/cuda/check.hpp"
#include "core/cuda/device_guard.hpp"
#include "core/cuda/event.hpp"
#include "core/error.hpp"
#include "parallel/comm/nccl/cuda/nccl_types.hpp"
#include "parallel/comm/nccl/nccl_wait.hpp"

namespace dpx::parallel::nccl {

namespace {

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

LocalRanks::LocalRanks(int size, std::vector<int> local, double timeout_s) {
  watch_ = std::make_shared<CommWatch>("nccl", size, std::move(local), timeout_s, [this](const std::string& report) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stalled_.empty()) stalled_ = report;
  });
  Watchdog::of_process().watch(watch_);
}

LocalRanks::~LocalRanks() { Watchdog::of_process().forget(watch_.get()); }

std::string LocalRanks::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

void LocalRanks::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.empty()) aborted_ = why;
}

std::string LocalRanks::stalled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stalled_;
}

// ---- NcclTransport ------------------------------------------------------------------------------

NcclTransport::NcclTransport(ncclComm_t comm, int device, int rank, int size, std::shared_ptr<LocalRanks> local)
    : comm_(comm), device_(device), rank_(rank), size_(size), local_(std::move(local)) {
  cuda::DeviceGuard guard(device_);
  // Non-blocking: the legacy default stream's synchronous copies and memsets (Tensor::to,
  // Tensor::zeros) must not wait for all-reduces in flight; DDP orders this stream by events.
  DPX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DPX_CUDA_CHECK(cudaMalloc(&one_, sizeof(float)));
}

NcclTransport::~NcclTransport() {
  cuda::DeviceGuard guard(device_);
  if (!aborted_) {
    try {
      wait();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dpx: nccl rank %d: %s\n", rank_, e.what());
    }
  }
  if (!aborted_) {
    // Finalize flushes what the communicator still has queued; non-blocking, it runs on NCCL's
    // thread and is polled here (10 s at most). Then destroy frees it; a failed or stuck
    // finalize aborts it instead.
    ncclResult_t state = ncclCommFinalize(comm_);
    if ((state == ncclSuccess || state == ncclInProgress) && settle_comm(comm_, 10, state) == NcclWaitVerdict::done)
      ncclCommDestroy(comm_);
    else
      abort_comm();
  }
  if (scratch_) cudaFree(scratch_);
  if (one_) cudaFree(one_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclTransport::abort_comm() {
  if (aborted_.exchange(true)) return;
  // ncclCommAbort first stops NCCL's kernels and proxy threads for this communicator, then frees
  // it, and that waits until every CUDA graph holding the communicator's calls is destroyed
  // (NCCL 2.28: an abort makes its group blocking, even for a non-blocking communicator). Those
  // graphs (--cuda-graph under DDP) go only when the failed step unwinds (spmd.cpp), after this
  // rank throws: a communicator with recorded calls is therefore aborted on a thread of its own.
  if (recorded_) std::thread([comm = comm_] { ncclCommAbort(comm); }).detach();
  else ncclCommAbort(comm_);
}

void NcclTransport::begin_call(const CommCall& call) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = call;
  }
  local_->watch().begin_call(rank_, call);
}

void NcclTransport::end_call() { local_->watch().end_call(rank_); }

void NcclTransport::set_activity(std::string_view what) { local_->watch().set_activity(rank_, what); }

CommCall NcclTransport::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
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
  if (const std::string report = local_->stalled(); !report.empty()) {
    local_->abort(detail::concat("rank ", rank_, " timed out"));
    abort_comm();
    fail(report, "\nThe NCCL communicators of this process were aborted (ncclCommAbort).");
  }
  if (const std::string why = local_->aborted(); !why.empty()) {
    abort_comm();
    fail("nccl rank ", rank_, " aborted: ", why);
  }
}

void NcclTransport::collective(const CollectiveArgs& a) {
  check_alive();
  if (capture::active()) recorded_ = true;
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
  wait();  // a send returns once the peer has the data (communicator.hpp)
}

void NcclTransport::barrier() {
  check_alive();
  cuda::DeviceGuard guard(device_);
  DPX_NCCL_QUEUE(ncclAllReduce(one_, one_, 1, ncclFloat32, ncclSum, comm_, stream_));
  settle();
  wait(current().patient);
}

void NcclTransport::wait(bool patient) {
  CommCall call = current();
  call.patient = patient;
  poll(&call);
}

void NcclTransport::wait_for(cudaEvent_t done, const CommCall& call) { poll(&call, done); }

void NcclTransport::settle() { poll(nullptr); }

void NcclTransport::poll(const CommCall* call, cudaEvent_t done) {
  cuda::DeviceGuard guard(device_);
  // The watchdog times the wait (and its report ends it: check_alive), a settle too: NCCL's first
  // call to a peer connects to it there, and waits for it. A settle is timed in the call that
  // queued it; a wait for queued calls, in `call`.
  struct Published {
    CommWatch& watch;
    int rank;
    ~Published() { watch.end_wait(rank); }
  } published{local_->watch(), rank_};
  local_->watch().begin_wait(rank_, -1, call);
  cudaError_t s = cudaSuccess;
  ncclResult_t async = ncclSuccess;
  NcclProbe seen;
  const NcclWaitVerdict verdict = poll_until_settled(
      [&] {
        check_alive();
        seen = NcclProbe{};
        s = !call ? cudaSuccess : done ? cudaEventQuery(done) : cudaStreamQuery(stream_);
        seen.stream_idle = s == cudaSuccess;
        seen.stream_failed = s != cudaSuccess && s != cudaErrorNotReady;
        async = probe_comm(comm_, seen);
        return seen;
      },
      0);  // no timeout: the watchdog's
  if (verdict == NcclWaitVerdict::failed) {
    const char* last = ncclGetLastError(comm_);
    give_up(seen.stream_failed
                ? detail::concat("CUDA error on its stream: ", cudaGetErrorString(s))
                : detail::concat("NCCL error: ", ncclGetErrorString(async),
                                 last && last[0] ? detail::concat(" (", last, ")") : std::string()));
  }
}

void NcclTransport::abort_group(const std::string& why) {
  local_->abort(why);
  abort_comm();
}

void NcclTransport::give_up(const std::string& why) {
  local_->abort(detail::concat("rank ", rank_, " failed"));
  abort_comm();
  fail("nccl rank ", rank_, ": ", why);
}

// ---- NcclCommunicator ---------------------------------------------------------------------------

NcclCommunicator::NcclCommunicator(std::unique_ptr<NcclTransport> transport)
    : Communicator(std::move(transport), Algorithm::nccl),
      transport_(&static_cast<NcclTransport&>(Communicator::transport())),
      anchor_(transport_->device()) {
  anchor_.record(transport_->stream());
  anchor_.synchronize();
  anchor_s_ = now_s();  // within microseconds of the event, which nothing queued before delays
}

namespace {

// One call queued on the stream: finished when the event after it has happened. Its start on the
// host's steady clock is the communicator's anchor plus the GPU time since it: float milliseconds,
// so within a microsecond for the first minutes of a run and about 0.25 ms an hour in, plus the
// GPU's clock drift against the host's (parts per million).
class NcclWork final : public Work::State {
 public:
  NcclWork(NcclTransport& transport, const CommCall& call, const cuda::Event& anchor, double anchor_s)
      : transport_(transport), call_(call), anchor_(anchor), anchor_s_(anchor_s), start(transport.device()),
        end(transport.device()) {}
  void wait() override { transport_.wait_for(end.get(), call_); }
  bool done() const override { return end.done(); }
  double seconds() const override { return cuda::elapsed_ms(start, end) * 1e-3; }
  uint64_t bytes_sent() const override { return bytes; }
  double started_s() const override { return anchor_s_ + cuda::elapsed_ms(anchor_, start) * 1e-3; }

 private:
  NcclTransport& transport_;
  const CommCall call_;
  const cuda::Event& anchor_;  // the communicator's, which outlives its calls
  const double anchor_s_;

 public:
  cuda::Event start, end;  // timing events around the call on the stream
  uint64_t bytes = 0;
};

}  // namespace

Work NcclCommunicator::start(const CollectiveArgs& args, const CommCall& call, Ready ready) {
  if (ready) ready();  // a fence makes the stream wait for the work that wrote the buffers
  auto work = std::make_shared<NcclWork>(*transport_, call, anchor_, anchor_s_);
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
