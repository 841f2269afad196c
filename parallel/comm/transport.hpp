// Transport: the point-to-point layer under dpx's collective algorithms. An algorithm is a fixed
// sequence of exchanges (send a chunk to one peer and/or receive a chunk from another, copying it
// or reducing it into place: ReduceOp and reduce_into below); backends (threads, MPI, CUDA p2p)
// only implement exchange().
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "core/device.hpp"
#include "core/dtype.hpp"
#include "parallel/comm/net_sim.hpp"

namespace dpx::parallel {

struct CommCall;  // algorithms.hpp

// The element-wise reductions a reducing exchange applies when a chunk arrives from a peer (the
// host transports call them; p2p has the same on its GPU). Half and bfloat16 are combined in f32
// and rounded back at every step, as NCCL does; integer sums and products wrap around (two's
// complement) instead of overflowing into undefined behaviour.
// avg is computed as sum at every step and divided by the number of ranks once at the end.
enum class ReduceOp : uint8_t { sum, prod, max, min, avg };
std::string_view reduce_op_name(ReduceOp op);

// out[i] = a[i] (op) b[i] for i < count. out may alias a or b (element-wise, so in place is fine).
// op must not be avg: the algorithms reduce with sum and call finish_average.
void reduce_into(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

// data[i] /= ranks: integer division for integer types, f32 division for f16/bf16/f32.
void finish_average(void* data, size_t count, DType dtype, int ranks);


// One step of a schedule. Both halves are optional (peer -1 = none) and proceed concurrently,
// so a ring step (send right, receive left) cannot deadlock. exchange() returns when both are
// complete: the send buffer may then be reused and the received data is in place.
struct Exchange {
  int send_peer = -1;
  const void* send = nullptr;
  size_t send_bytes = 0;

  int recv_peer = -1;
  void* recv = nullptr;
  size_t recv_bytes = 0;  // must equal the peer's send_bytes
  // Null: the incoming bytes are copied to recv. Otherwise recv[i] = reduce_with[i] (op) incoming[i]
  // over recv_bytes / dtype_size(dtype) elements; reduce_with may be recv itself.
  const void* reduce_with = nullptr;
  DType dtype = DType::u8;
  ReduceOp op = ReduceOp::sum;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string_view name() const = 0;
  // Whether buffers on `device` can be passed to exchange().
  virtual bool accepts(Device device) const = 0;

  // What the schedules do to this rank's own buffers between exchanges, on memory this transport
  // accepts: host memory by default (memcpy, finish_average, the communicator's Workspace); a
  // transport of device buffers (p2p) does it on its device, in order with its exchanges.
  virtual void copy_local(void* dst, const void* src, size_t bytes);
  virtual void average_local(void* data, size_t count, DType dtype, int ranks);
  // Scratch of at least `bytes` for slot 0 or 1 (valid until the next call for that slot), or
  // null: the schedules then use the communicator's host Workspace.
  virtual std::byte* scratch(size_t bytes, int slot) { return nullptr; }

  // Runs one step and counts it and its bytes; with a simulated network (set_net_sim), then waits
  // latency + max(sent, received bytes) / rate more, so the step costs at least that.
  void exchange(const Exchange& x);
  // Every later exchange on this transport as on that network (--net-sim); set it alike on
  // every rank. Off by default.
  void set_net_sim(const NetSim& net) { net_sim_ = net; }
  // Every rank waits until all have arrived. Default: a dissemination barrier of log2(n)
  // zero-byte exchanges; backends with a cheaper native barrier override it.
  virtual void barrier();

  // The communicator says which call it runs from here to end_call(), so that a rank that
  // waits too long can say where every rank is (stall_report.hpp). Default: not recorded.
  virtual void begin_call(const CommCall& call) {}
  virtual void end_call() {}
  // What the rank does between calls, in a few words ("training: epoch 1 step 12"), for the
  // same reports. Default: not recorded.
  virtual void set_activity(std::string_view what) {}


  // The node each rank runs on, as any integer (ranks on one node share it): hier reduces
  // inside nodes first. Every rank is on node 0 until set; set it alike on every rank.
  int node_of(int rank) const;
  void set_node_layout(std::vector<int> node_of_rank);

  uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  uint64_t bytes_received() const { return bytes_received_.load(std::memory_order_relaxed); }
  // The terms of the alpha-beta-gamma cost model as this rank saw them (analysis/cost_model.hpp):
  // exchanges made, the sum over them of max(sent, received) bytes (each step costs as much as
  // its larger half, the halves running at once), and the bytes received into a reduction.
  uint64_t exchanges() const { return exchanges_.load(std::memory_order_relaxed); }
  uint64_t step_bytes() const { return step_bytes_.load(std::memory_order_relaxed); }
  uint64_t reduced_bytes() const { return reduced_bytes_.load(std::memory_order_relaxed); }

 protected:
  virtual void do_exchange(const Exchange& x) = 0;
  // A transport whose library moves the bytes itself (nccl) counts what it takes them to be.
  void count_sent(uint64_t bytes) { bytes_sent_.fetch_add(bytes, std::memory_order_relaxed); }

 private:
  // Atomic because DDP's communication thread counts while the rank's thread may read.
  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0};
  std::atomic<uint64_t> exchanges_{0}, step_bytes_{0}, reduced_bytes_{0};
  std::vector<int> node_of_rank_;  // empty: one node
  NetSim net_sim_;
};

}  // namespace dpx::parallel
