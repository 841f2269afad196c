// Communicator: argument checks, call counting, the Tensor overloads and the communication
// thread of asynchronous calls; the work itself is execute(), which by default runs one of dpx's
// algorithms (algorithms.hpp) over the transport.
#include "parallel/comm/communicator.hpp"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "core/clock.hpp"
#include "core/error.hpp"

namespace dpx::parallel {

namespace {

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

void* ptr(const Tensor& t) { return t.defined() ? t.raw() : nullptr; }

}  // namespace

// The communication thread: runs the asynchronous calls one after the other, in the order they
// were started (the same on every rank).
class Communicator::Worker {
 public:
  // A Work of a host backend: finished by the communication thread.
  class HostWork final : public Work::State {
   public:
    void wait() override {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return done_; });
      if (error_) std::rethrow_exception(error_);
    }
    bool done() const override {
      std::lock_guard<std::mutex> lock(m_);
      return done_;
    }
    double seconds() const override { return seconds_; }
    uint64_t bytes_sent() const override { return bytes_; }
    double started_s() const override { return started_; }
    void finish(double started, double seconds, uint64_t bytes, std::exception_ptr error) {
      {
        std::lock_guard<std::mutex> lock(m_);
        started_ = started;
        seconds_ = seconds;
        bytes_ = bytes;
        error_ = std::move(error);
        done_ = true;
      }
      cv_.notify_all();
    }

   private:
    mutable std::mutex m_;
    std::condition_variable cv_;
    bool done_ = false;
    double started_ = 0, seconds_ = 0;
    uint64_t bytes_ = 0;
    std::exception_ptr error_;
  };

  explicit Worker(Transport& transport) : transport_(transport), thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Work post(Ready ready, std::function<void()> call) {
    auto work = std::make_shared<HostWork>();
    {
      std::lock_guard<std::mutex> lock(m_);
      queue_.push_back({std::move(ready), std::move(call), work});
      ++posted_;
    }
    cv_.notify_all();
    return Work(work);
  }

  // Until every call posted so far has run.
  void drain() {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return finished_ == posted_; });
  }

 private:
  struct Task {
    Ready ready;
    std::function<void()> call;
    std::shared_ptr<HostWork> work;
  };

  void loop() {
    std::unique_lock<std::mutex> lock(m_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      Task task = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::exception_ptr error;
      double start = 0, seconds = 0;
      uint64_t bytes = 0;
      try {
        if (task.ready) task.ready();  // not the collective's time
        start = now_s();
        const uint64_t sent = transport_.bytes_sent();
        task.call();
        seconds = now_s() - start;
        bytes = transport_.bytes_sent() - sent;
      } catch (...) {
        error = std::current_exception();
      }
      task.work->finish(start, seconds, bytes, std::move(error));
      lock.lock();
      ++finished_;
      cv_.notify_all();
    }
  }

  Transport& transport_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  uint64_t posted_ = 0, finished_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

Communicator::Communicator(Transport& transport, Algorithm default_algorithm)
    : transport_(transport), default_algorithm_(default_algorithm) {}

Communicator::Communicator(std::unique_ptr<Transport> transport, Algorithm default_algorithm)
    : owned_(std::move(transport)), transport_(*owned_), default_algorithm_(default_algorithm) {}

Communicator::~Communicator() { stop_worker(); }

void Communicator::stop_worker() { worker_.reset(); }

void Communicator::settle() {
  if (worker_) worker_->drain();
}

void Communicator::execute(const CollectiveArgs& args, Algorithm algo) {
  run_algorithm(algo, transport_, args, workspace_);
}

Work Communicator::start(const CollectiveArgs& args, const CommCall& call, Ready ready) {
  if (!worker_) worker_ = std::make_unique<Worker>(transport_);
  return worker_->post(std::move(ready), [this, args, call] { perform(args, call); });
}

Work Communicator::all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Algo algo,
                                    Ready ready) {
  const CollectiveArgs args{Collective::all_reduce, send, recv, count, dtype, op, 0};
  const CommCall call = prepare(args, algo);
  return start(args, call, std::move(ready));
}

Work Communicator::all_reduce_async(const Tensor& t, ReduceOp op, Algo algo, Ready ready) {
  check_same(t, t, 1, "all_reduce");
  return all_reduce_async(t.raw(), t.raw(), static_cast<size_t>(t.numel()), t.dtype(), op, algo, std::move(ready));
}

Communicator::CallScope Communicator::begin(const CommCall& call) {
  transport_.begin_call(call);
  return CallScope{transport_};
}

void Communicator::run(const CollectiveArgs& a, Algo algo) {
  settle();
  perform(a, prepare(a, algo));
}

void Communicator::perform(const CollectiveArgs& a, const CommCall& call) {
  auto scope = begin(call);
  execute(a, call.algo);
}

CommCall Communicator::prepare(const CollectiveArgs& a, Algo algo) {
  const std::string_view name = collective_name(a.kind);
  const int n = size(), r = rank();
  const size_t es = dtype_size(a.dtype);
  const bool rooted = is_rooted(a.kind);
  if (rooted && (a.root < 0 || a.root >= n)) fail(name, ": root ", a.root, " is not a rank of this ", n, "-rank group");
  // Per-rank blocks: the side that holds all n of them.
  const bool send_whole = a.kind == Collective::reduce_scatter || a.kind == Collective::scatter ||
                          a.kind == Collective::all_to_all;
  const bool recv_whole = a.kind == Collective::all_gather || a.kind == Collective::gather ||
                          a.kind == Collective::all_to_all;
  const Algorithm chosen = algo ? *algo : algorithm_for(a.kind, default_algorithm_);
  if (!algorithm_applies(chosen, a.kind))
    fail(name, ": the ", algorithm_name(chosen), " algorithm has no schedule for it; use ", algorithm_choices(a.kind));
  if (a.count > 0) {
    const bool needs_send = (a.kind != Collective::broadcast && a.kind != Collective::scatter) || r == a.root;
    const bool needs_recv = (a.kind != Collective::reduce && a.kind != Collective::gather) || r == a.root;
    if (needs_send && !a.send) fail(name, ": rank ", r, " passed no send buffer");
    if (needs_recv && !a.recv) fail(name, ": rank ", r, " passed no receive buffer");
    // Partly overlapping buffers would be read after being overwritten; only NCCL's exact
    // in-place layouts are allowed.
    const size_t send_bytes = a.count * es * (send_whole ? static_cast<size_t>(n) : 1);
    const size_t recv_bytes = a.count * es * (recv_whole ? static_cast<size_t>(n) : 1);
    const size_t block_bytes = a.count * es * static_cast<size_t>(r);
    bool in_place = a.send == a.recv;
    if (a.kind == Collective::all_gather || a.kind == Collective::gather)
      in_place = a.send == static_cast<const std::byte*>(a.recv) + block_bytes;
    if (a.kind == Collective::reduce_scatter || a.kind == Collective::scatter)
      in_place = a.recv == static_cast<const std::byte*>(a.send) + block_bytes;
    if (needs_send && needs_recv && !in_place && overlaps(a.send, send_bytes, a.recv, recv_bytes))
      fail(name, ": the send and receive buffers overlap without being in place (see communicator.hpp)");
  }
  count_call(a.kind);
  CommCall call;
  call.kind = a.kind;
  call.seq = ++seq_;
  call.bytes = a.count * es * (send_whole || recv_whole ? static_cast<size_t>(n) : 1);
  call.dtype = a.dtype;
  call.algo = chosen;
  call.root = rooted ? a.root : -1;
  return call;
}

void Communicator::all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Algo algo) {
  run({Collective::all_reduce, send, recv, count, dtype, op, 0}, algo);
}

void Communicator::broadcast(const void* send, void* recv, size_t count, DType dtype, int root, Algo algo) {
  run({Collective::broadcast, send, recv, count, dtype, ReduceOp::sum, root}, algo);
}

void Communicator::reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root, Algo algo) {
  run({Collective::reduce, send, recv, count, dtype, op, root}, algo);
}

void Communicator::all_gather(const void* send, void* recv, size_t send_count, DType dtype, Algo algo) {
  run({Collective::all_gather, send, recv, send_count, dtype, ReduceOp::sum, 0}, algo);
}

void Communicator::reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                                  Algo algo) {
  run({Collective::reduce_scatter, send, recv, recv_count, dtype, op, 0}, algo);
}

void Communicator::sendrecv(const void* send, void* recv, size_t count, DType dtype, Algo algo) {
  run({Collective::sendrecv, send, recv, count, dtype, ReduceOp::sum, 0}, algo);
}

void Communicator::all_to_all(const void* send, void* recv, size_t count, DType dtype, Algo algo) {
  run({Collective::all_to_all, send, recv, count, dtype, ReduceOp::sum, 0}, algo);
}

void Communicator::gather(const void* send, void* recv, size_t send_count, DType dtype, int root, Algo algo) {
  run({Collective::gather, send, recv, send_count, dtype, ReduceOp::sum, root}, algo);
}

void Communicator::scatter(const void* send, void* recv, size_t recv_count, DType dtype, int root, Algo algo) {
  run({Collective::scatter, send, recv, recv_count, dtype, ReduceOp::sum, root}, algo);
}

void Communicator::barrier() { run_barrier(false); }

void Communicator::barrier_patient(std::string_view why) {
  set_activity(detail::concat("waiting: ", why));
  run_barrier(true);
}

void Communicator::run_barrier(bool patient) {
  settle();
  count_call(Collective::barrier);
  CommCall call;
  call.kind = Collective::barrier;
  call.seq = ++seq_;
  call.patient = patient;
  auto scope = begin(call);
  transport_.barrier();
}

void Communicator::send(const void* data, size_t count, DType dtype, int peer) {
  point_to_point(Collective::send, const_cast<void*>(data), count, dtype, peer);
}

void Communicator::recv(void* data, size_t count, DType dtype, int peer) {
  point_to_point(Collective::recv, data, count, dtype, peer);
}

void Communicator::point_to_point(Collective kind, void* data, size_t count, DType dtype, int peer) {
  const bool sends = kind == Collective::send;
  if (peer < 0 || peer >= size() || peer == rank())
    fail(sends ? "send: rank " : "recv: rank ", rank(), sends ? " cannot send to rank " : " cannot receive from rank ",
         peer, " of ", size());
  settle();
  count_call(kind);
  CommCall call;
  call.kind = kind;
  call.bytes = count * dtype_size(dtype);
  call.dtype = dtype;
  call.peer = peer;
  auto scope = begin(call);
  Exchange x;
  (sends ? x.send_peer : x.recv_peer) = peer;
  (sends ? x.send_bytes : x.recv_bytes) = call.bytes;
  if (sends) x.send = data;
  else x.recv = data;
  x.dtype = dtype;
  transport_.exchange(x);
}

// ---- Tensors ----------------------------------------------------------------------------------

void Communicator::check_tensor(const Tensor& t, const char* what) const {
  if (!t.defined()) fail(what, ": the tensor is undefined");
  if (!transport_.accepts(t.device()))
    fail(what, ": the ", backend(), " backend cannot reach tensors on ", t.device().str());
}

void Communicator::check_same(const Tensor& a, const Tensor& b, int64_t b_per_a, const char* what) const {
  check_tensor(a, what);
  check_tensor(b, what);
  if (a.dtype() != b.dtype())
    fail(what, ": the tensors hold ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()));
  if (b.numel() != a.numel() * b_per_a)
    fail(what, ": ", b.numel(), " elements where ", a.numel() * b_per_a, " are needed (", shape_str(a.shape()),
         " -> ", shape_str(b.shape()), ")");
}

void Communicator::all_reduce(const Tensor& t, ReduceOp op, Algo algo) { all_reduce(t, t, op, algo); }

void Communicator::all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, Algo algo) {
  check_same(in, out, 1, "all_reduce");
  all_reduce(in.raw(), out.raw(), static_cast<size_t>(in.numel()), in.dtype(), op, algo);
}

void Communicator::broadcast(const Tensor& t, int root, Algo algo) { broadcast(t, t, root, algo); }

void Communicator::broadcast(const Tensor& in, const Tensor& out, int root, Algo algo) {
  if (rank() == root) check_same(in, out, 1, "broadcast");
  else check_tensor(out, "broadcast");
  broadcast(rank() == root ? ptr(in) : nullptr, out.raw(), static_cast<size_t>(out.numel()), out.dtype(), root, algo);
}

void Communicator::reduce(const Tensor& t, ReduceOp op, int root, Algo algo) { reduce(t, t, op, root, algo); }

void Communicator::reduce(const Tensor& in, const Tensor& out, ReduceOp op, int root, Algo algo) {
  if (rank() == root) check_same(in, out, 1, "reduce");
  else check_tensor(in, "reduce");
  reduce(in.raw(), rank() == root ? ptr(out) : nullptr, static_cast<size_t>(in.numel()), in.dtype(), op, root, algo);
}

void Communicator::all_gather(const Tensor& in, const Tensor& out, Algo algo) {
  check_same(in, out, size(), "all_gather");
  all_gather(in.raw(), out.raw(), static_cast<size_t>(in.numel()), in.dtype(), algo);
}

void Communicator::reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, Algo algo) {
  check_same(out, in, size(), "reduce_scatter");
  reduce_scatter(in.raw(), out.raw(), static_cast<size_t>(out.numel()), out.dtype(), op, algo);
}

void Communicator::sendrecv(const Tensor& in, const Tensor& out, Algo algo) {
  check_same(in, out, 1, "sendrecv");
  sendrecv(in.raw(), out.raw(), static_cast<size_t>(in.numel()), in.dtype(), algo);
}

void Communicator::all_to_all(const Tensor& in, const Tensor& out, Algo algo) {
  check_same(in, out, 1, "all_to_all");
  if (in.numel() % size() != 0)
    fail("all_to_all: ", in.numel(), " elements are not ", size(), " blocks of one size (", shape_str(in.shape()), ")");
  all_to_all(in.raw(), out.raw(), static_cast<size_t>(in.numel() / size()), in.dtype(), algo);
}

void Communicator::gather(const Tensor& in, const Tensor& out, int root, Algo algo) {
  if (rank() == root) check_same(in, out, size(), "gather");
  else check_tensor(in, "gather");
  gather(in.raw(), rank() == root ? ptr(out) : nullptr, static_cast<size_t>(in.numel()), in.dtype(), root, algo);
}

void Communicator::scatter(const Tensor& in, const Tensor& out, int root, Algo algo) {
  if (rank() == root) check_same(out, in, size(), "scatter");
  else check_tensor(out, "scatter");
  scatter(rank() == root ? ptr(in) : nullptr, out.raw(), static_cast<size_t>(out.numel()), out.dtype(), root, algo);
}

void Communicator::send(const Tensor& t, int peer) {
  check_tensor(t, "send");
  send(t.raw(), static_cast<size_t>(t.numel()), t.dtype(), peer);
}

void Communicator::recv(const Tensor& t, int peer) {
  check_tensor(t, "recv");
  recv(t.raw(), static_cast<size_t>(t.numel()), t.dtype(), peer);
}

// ---- counters ---------------------------------------------------------------------------------

uint64_t Communicator::bytes_sent() const { return transport_.bytes_sent() - sent_mark_; }

CommStats Communicator::stats() const {
  CommStats s;
  s.bytes_sent = bytes_sent();
  s.bytes_received = transport_.bytes_received() - received_mark_;
  s.exchanges = transport_.exchanges() - exchanges_mark_;
  s.step_bytes = transport_.step_bytes() - step_bytes_mark_;
  s.reduced_bytes = transport_.reduced_bytes() - reduced_mark_;
  for (size_t i = 0; i < s.calls_by_kind.size(); ++i) {
    s.calls_by_kind[i] = calls_[i].load(std::memory_order_relaxed);
    s.calls += s.calls_by_kind[i];
  }
  return s;
}

void Communicator::reset_stats() {
  sent_mark_ = transport_.bytes_sent();
  received_mark_ = transport_.bytes_received();
  exchanges_mark_ = transport_.exchanges();
  step_bytes_mark_ = transport_.step_bytes();
  reduced_mark_ = transport_.reduced_bytes();
  for (auto& c : calls_) c.store(0, std::memory_order_relaxed);
}

}  // namespace dpx::parallel
