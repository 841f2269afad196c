// Communicator: the collectives every backend offers (all_reduce, broadcast, reduce, all_gather,
// reduce_scatter, sendrecv, all_to_all, gather, scatter, barrier, send/recv) on raw buffers and
// on Tensors, with byte, exchange and call counters.
// dpx's own algorithms (ring, tree, naive, rhd, hier) run over a point-to-point Transport
// (transport.hpp); a vendor backend (mpi) may run the library's own instead (--algo mpi).
// A call may also be started asynchronously (all_reduce_async), returning a Work (work.hpp).
// Every collective is numbered, so that a rank that waits too long can say which one it is in.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/dtype.hpp"
#include "core/tensor.hpp"
#include "parallel/comm/algorithms/algorithms.hpp"
#include "parallel/comm/transport.hpp"
#include "parallel/comm/work.hpp"

namespace dpx::parallel {

// What a communicator has done since it was made (or since reset_stats).
struct CommStats {
  uint64_t bytes_sent = 0;      // payload this rank sent in point-to-point steps
  uint64_t bytes_received = 0;  // payload this rank received
  uint64_t exchanges = 0;       // point-to-point steps (the cost model's alpha terms)
  uint64_t step_bytes = 0;      // sum over the steps of max(sent, received) bytes (its beta terms)
  uint64_t reduced_bytes = 0;   // bytes received into a reduction (its gamma terms)
  uint64_t calls = 0;           // collective, barrier and send/recv calls
  std::array<uint64_t, kCollectiveKinds> calls_by_kind{};
};

// One rank's handle on a group of ranks. Not thread-safe: one thread of a rank calls it.
// Buffers follow NCCL's conventions: in-place is send == recv for all_reduce, broadcast, reduce,
// sendrecv and all_to_all; send == recv + rank * count for all_gather and gather; recv == send +
// rank * count for reduce_scatter and scatter. Every collective of the host backends is blocking:
// buffers may be reused when it returns; the nccl backend's are queued on its GPU stream, ordered
// with later calls, and done after synchronize(). An asynchronous call returns at once with a
// Work: the host backends run it on the communicator's communication thread (started at the
// first such call), in the order the calls were made; a blocking call first waits for every
// asynchronous one before it, so the order is the same on every rank. A call without its own
// algorithm runs the communicator's default, or where that has no schedule for the collective
// the first of kAlgorithms that has (algorithm_for: tree for gather and scatter under a ring
// default).
class Communicator {
 public:
  explicit Communicator(Transport& transport, Algorithm default_algorithm = Algorithm::ring);
  // Owning its transport (the mpi and nccl backends' communicators).
  explicit Communicator(std::unique_ptr<Transport> transport, Algorithm default_algorithm = Algorithm::ring);
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }
  std::string_view backend() const { return transport_.name(); }

  using Algo = std::optional<Algorithm>;  // empty: the communicator's default

  // ---- raw buffers (host memory for the threads backend) ----
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Algo algo = {});
  // recv gets root's send on every rank; send is read on the root only (may be null elsewhere).
  void broadcast(const void* send, void* recv, size_t count, DType dtype, int root, Algo algo = {});
  // recv (written on the root only; may be null elsewhere) gets the reduction of every send.
  void reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, int root, Algo algo = {});
  // recv (size() * send_count elements) gets every rank's send, in rank order.
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype, Algo algo = {});
  // send holds size() * recv_count elements; rank r gets the reduction of block r.
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op, Algo algo = {});
  // recv gets rank (rank()-1) mod size()'s send; send goes to rank (rank()+1) mod size().
  // In place (send == recv) the buffer is replaced, as by MPI_Sendrecv_replace.
  void sendrecv(const void* send, void* recv, size_t count, DType dtype, Algo algo = {});
  // send and recv hold size() blocks of count elements: block q of send goes to rank q, block q of
  // recv comes from rank q (MPI_Alltoall; in place as MPI_IN_PLACE).
  void all_to_all(const void* send, void* recv, size_t count, DType dtype, Algo algo = {});
  // recv (size() * send_count elements, on the root only; may be null elsewhere) gets every
  // rank's send, in rank order.
  void gather(const void* send, void* recv, size_t send_count, DType dtype, int root, Algo algo = {});
  // send (size() * recv_count elements, read on the root only; may be null elsewhere): rank r
  // gets block r.
  void scatter(const void* send, void* recv, size_t recv_count, DType dtype, int root, Algo algo = {});
  void barrier();
  // A barrier that waits as long as it takes for ranks known to be busy outside communication
  // (rank 0 evaluating the test set; ranks left out of a bench configuration): the backends'
  // --comm-timeout does not apply, but a rank that is gone or never answers still ends it.
  // `why` is said in stall reports.
  void barrier_patient(std::string_view why);
  // Point-to-point. A send returns once the peer has received the data (a rendezvous), so two
  // ranks that both send to each other first deadlock; every send must meet a recv of its size.
  void send(const void* data, size_t count, DType dtype, int peer);
  void recv(void* data, size_t count, DType dtype, int peer);

  // ---- Tensors: the tensor handle is const, its elements are written ----
  void all_reduce(const Tensor& t, ReduceOp op, Algo algo = {});  // in place
  void all_reduce(const Tensor& in, const Tensor& out, ReduceOp op, Algo algo = {});
  void broadcast(const Tensor& t, int root, Algo algo = {});  // in place
  void broadcast(const Tensor& in, const Tensor& out, int root, Algo algo = {});
  void reduce(const Tensor& t, ReduceOp op, int root, Algo algo = {});  // in place (result on root)
  void reduce(const Tensor& in, const Tensor& out, ReduceOp op, int root, Algo algo = {});
  // out.numel() == size() * in.numel(); in_place all_gather is out's block rank() passed as in.
  void all_gather(const Tensor& in, const Tensor& out, Algo algo = {});
  // in.numel() == size() * out.numel().
  void reduce_scatter(const Tensor& in, const Tensor& out, ReduceOp op, Algo algo = {});
  // in and out of one size (the same tensor: in place).
  void sendrecv(const Tensor& in, const Tensor& out, Algo algo = {});
  // in and out of one size, a multiple of size(): size() blocks (the same tensor: in place).
  void all_to_all(const Tensor& in, const Tensor& out, Algo algo = {});
  // On the root out.numel() == size() * in.numel(); elsewhere out is not used (may be undefined).
  void gather(const Tensor& in, const Tensor& out, int root, Algo algo = {});
  // On the root in.numel() == size() * out.numel(); elsewhere in is not used (may be undefined).
  void scatter(const Tensor& in, const Tensor& out, int root, Algo algo = {});
  void send(const Tensor& t, int peer);
  void recv(const Tensor& t, int peer);

  // ---- asynchronous (PyTorch's async_op=True) ----
  // What must happen before an asynchronous call reads its buffers (a GPU fence: the gradients
  // queued on a compute stream). Host backends run it on the communication thread just before
  // the call; the nccl backend at once, on the caller's thread (it makes its stream wait).
  using Ready = std::function<void()>;
  // The same all-reduce as above, started: wait() on the Work before touching the buffers.
  Work all_reduce_async(const void* send, void* recv, size_t count, DType dtype, ReduceOp op, Algo algo = {},
                        Ready ready = {});
  Work all_reduce_async(const Tensor& t, ReduceOp op, Algo algo = {}, Ready ready = {});  // in place
  // The GPU stream this communicator queues its calls on, for a fence to make it wait (nccl);
  // null where calls run on a host thread, which a fence blocks instead.
  virtual cuda::Stream call_stream() const { return nullptr; }

  // Waits until every call made so far has finished. Host backends finish a call before it
  // returns (nothing to wait for); the nccl backend queues its calls on a GPU stream, and this is
  // where it waits for them, with --comm-timeout (parallel/comm/nccl/nccl_backend.hpp).
  virtual void synchronize() {}

  // What this rank does until its next call, for stall reports ("training: epoch 1 step 12").
  void set_activity(std::string_view what) { transport_.set_activity(what); }
  // Collectives called so far (the number of the last one).
  uint64_t calls_made() const { return seq_; }
  // Which node each rank runs on (hier groups ranks by node); set alike on every rank.
  void set_node_layout(std::vector<int> node_of_rank) { transport_.set_node_layout(std::move(node_of_rank)); }
  // Every later exchange of this communicator as on that network (--net-sim; net_sim.hpp).
  void set_net_sim(const NetSim& net) { transport_.set_net_sim(net); }
  int node_of(int rank) const { return transport_.node_of(rank); }

  // ---- counters ("bytes communicated as counted"), since construction or reset_stats() ----
  uint64_t bytes_sent() const;
  CommStats stats() const;
  void reset_stats();

 protected:
  // Runs one validated call. Vendor backends (NCCL, MPI) override this with their own library
  // call; the default runs dpx's algorithm over the transport.
  virtual void execute(const CollectiveArgs& args, Algorithm algo);
  // Starts a call that prepare() has validated and numbered: by default on the communication
  // thread (`ready` first, there); the nccl backend queues it on its stream.
  virtual Work start(const CollectiveArgs& args, const CommCall& call, Ready ready);
  // Checks a call's arguments and numbers it (the CommCall the stall reports show).
  CommCall prepare(const CollectiveArgs& args, Algo algo);
  // Runs a prepared call on this thread, the transport told which one it is.
  void perform(const CollectiveArgs& args, const CommCall& call);
  Transport& transport() { return transport_; }
  // Waits for the asynchronous calls and ends the communication thread: a derived communicator
  // calls it first in its destructor, before it frees what the calls use.
  void stop_worker();

 private:
  class Worker;  // the communication thread (communicator.cpp)
  void run(const CollectiveArgs& args, Algo algo);
  // Before a blocking call: every asynchronous call made before it has finished.
  void settle();
  // Tells the transport which call runs until the returned guard is destroyed.
  struct CallScope {
    Transport& t;
    ~CallScope() { t.end_call(); }
  };
  CallScope begin(const CommCall& call);
  void run_barrier(bool patient);
  void point_to_point(Collective kind, void* data, size_t count, DType dtype, int peer);
  void count_call(Collective kind) { calls_[static_cast<size_t>(kind)].fetch_add(1, std::memory_order_relaxed); }
  void check_tensor(const Tensor& t, const char* what) const;
  void check_same(const Tensor& a, const Tensor& b, int64_t b_per_a, const char* what) const;

  std::unique_ptr<Transport> owned_;  // when the communicator owns its transport
  Transport& transport_;
  Algorithm default_algorithm_;
  Workspace workspace_;
  std::array<std::atomic<uint64_t>, kCollectiveKinds> calls_{};
  uint64_t sent_mark_ = 0, received_mark_ = 0, exchanges_mark_ = 0, step_bytes_mark_ = 0, reduced_mark_ = 0;
  uint64_t seq_ = 0;  // collectives called so far
  std::unique_ptr<Worker> worker_;  // last: its thread stops before the members above go
};

}  // namespace dpx::parallel
