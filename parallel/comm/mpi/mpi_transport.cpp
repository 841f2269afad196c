// The mpi backend's transport and communicator (see mpi_transport.hpp). An exchange is one
// MPI_Irecv and one MPI_Isend (split into 1 GiB messages: MPI counts are ints), waited for
// together, so a ring step cannot deadlock; received data that must be reduced lands in a
// staging buffer first and is combined exactly as the threads backend combines it.
#include "parallel/comm/mpi/mpi_transport.hpp"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "parallel/comm/mpi/mpi_util.hpp"

namespace dpx::parallel::mpi {

namespace {

constexpr size_t kMaxMessageBytes = size_t{1} << 30;
constexpr int kPointToPointTag = 1;  // send/recv; collectives use 2 + their number mod 32000
constexpr int kLibrarySendrecvTag = 0;  // MPI_Sendrecv of --algo mpi: a tag dpx's own messages never use

const std::byte* at(const void* p, size_t bytes) { return static_cast<const std::byte*>(p) + bytes; }
std::byte* at(void* p, size_t bytes) { return static_cast<std::byte*>(p) + bytes; }

// A wait, published to the watchdog while it lasts.
struct Waiting {
  Waiting(CommWatch& watch, int rank, int peer) : watch(watch), rank(rank) { watch.begin_wait(rank, peer); }
  ~Waiting() { watch.end_wait(rank); }
  CommWatch& watch;
  int rank;
};

// Waits for requests, polling: spinning first (latency), then yielding the CPU between polls,
// sleeping between them only after a second; the wait is published as rank `rank`'s, on `peer`.
// Throws on an MPI error.
void wait_all(int count, MPI_Request* requests, MPI_Status* statuses, CommWatch& watch, int rank, int peer) {
  Waiting waiting(watch, rank, peer);
  std::vector<bool> done(static_cast<size_t>(count), false);
  int left = count;
  const double start = now_s();
  for (long polls = 0; left > 0; ++polls) {
    for (int i = 0; i < count; ++i) {
      if (done[static_cast<size_t>(i)]) continue;
      int flag = 0;
      DPX_MPI_CHECK(MPI_Test(&requests[i], &flag, &statuses[i]));
      if (flag) {
        done[static_cast<size_t>(i)] = true;
        --left;
      }
    }
    if (left == 0 || polls < 2000) continue;
    // Past the first polls, yield the CPU between polls to this rank's other threads (its
    // training thread, while DDP's communication thread waits) and to other ranks sharing the
    // core. Sleeping instead starves the TCP transport, which moves data only inside MPI calls:
    // 20 us naps cost resnet18's all-reduce at 1 Gbit/s up to 2x (benchmarks/RESULTS.md). Only a
    // wait of more than a second (a rank that evaluates, idles in a sweep) sleeps between polls.
    const double waited = now_s() - start;
    if (waited < 1.0) sched_yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm, std::string label, double timeout_s) : comm_(comm) {
  DPX_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  DPX_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  // A stall ends the job through the MPI peers (runtime/mpi/mpi_peers.hpp): no waits to end here.
  watch_ = std::make_shared<CommWatch>(std::move(label), size_, std::vector<int>{rank_}, timeout_s, nullptr);
  Watchdog::of_process().watch(watch_);
}

MpiTransport::~MpiTransport() { Watchdog::of_process().forget(watch_.get()); }

void MpiTransport::begin_call(const CommCall& call) {
  const bool point_to_point = call.kind == Collective::send || call.kind == Collective::recv;
  tag_ = point_to_point ? kPointToPointTag : 2 + static_cast<int>(call.seq % 32000);
  watch_->begin_call(rank_, call);
}

void MpiTransport::do_exchange(const Exchange& x) {
  void* dst = x.recv;
  if (x.recv_peer >= 0 && x.reduce_with && x.recv_bytes > 0) dst = staging_.get(x.recv_bytes);
  std::vector<MPI_Request> requests;
  std::vector<size_t> recv_lengths;  // expected bytes of each receive, in posting order
  // Every half posts at least one message, so zero-byte exchanges (the barrier) still meet.
  if (x.recv_peer >= 0)
    for (size_t off = 0; off == 0 || off < x.recv_bytes; off += kMaxMessageBytes) {
      const size_t len = std::min(kMaxMessageBytes, x.recv_bytes - off);
      requests.emplace_back();
      recv_lengths.push_back(len);
      DPX_MPI_CHECK(MPI_Irecv(at(dst, off), static_cast<int>(len), MPI_BYTE, x.recv_peer, tag_, comm_, &requests.back()));
    }
  if (x.send_peer >= 0)
    for (size_t off = 0; off == 0 || off < x.send_bytes; off += kMaxMessageBytes) {
      const size_t len = std::min(kMaxMessageBytes, x.send_bytes - off);
      requests.emplace_back();
      DPX_MPI_CHECK(MPI_Isend(at(x.send, off), static_cast<int>(len), MPI_BYTE, x.send_peer, tag_, comm_,
                              &requests.back()));
    }
  std::vector<MPI_Status> statuses(requests.size());
  try {
    wait_all(static_cast<int>(requests.size()), requests.data(), statuses.data(), *watch_, rank_,
             x.recv_peer >= 0 ? x.recv_peer : x.send_peer);
  } catch (const Error& e) {
    fail("rank ", rank_, " exchanging with rank ", x.recv_peer >= 0 ? x.recv_peer : x.send_peer, ": ", e.what(),
         " (a message longer than expected means the ranks called different collectives or passed different "
         "counts)");
  }
  for (size_t i = 0; i < recv_lengths.size(); ++i) {
    int got = 0;
    DPX_MPI_CHECK(MPI_Get_count(&statuses[i], MPI_BYTE, &got));
    if (static_cast<size_t>(got) != recv_lengths[i])
      fail("rank ", rank_, " expected ", x.recv_bytes, " bytes from rank ", x.recv_peer, ", which sent fewer: ",
           "the ranks called different collectives or passed different counts");
  }
  if (dst != x.recv) reduce_into(x.recv, x.reduce_with, dst, x.recv_bytes / dtype_size(x.dtype), x.dtype, x.op);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string label, double timeout_s)
    : Communicator(std::make_unique<MpiTransport>(comm, std::move(label), timeout_s)),
      transport_(&static_cast<MpiTransport&>(Communicator::transport())) {}

std::unique_ptr<MpiCommunicator> MpiCommunicator::duplicate(const std::string& label) {
  MPI_Comm dup = MPI_COMM_NULL;
  DPX_MPI_CHECK(MPI_Comm_dup(comm(), &dup));
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  auto copy = std::make_unique<MpiCommunicator>(dup, label, transport_->watch().timeout_s());
  std::vector<int> nodes;
  for (int r = 0; r < size(); ++r) nodes.push_back(node_of(r));
  copy->set_node_layout(std::move(nodes));
  return copy;
}

MpiCommunicator::~MpiCommunicator() {
  stop_worker();  // before the MPI communicator its calls use is freed
  MPI_Comm c = transport_->comm();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&c);
}

void MpiCommunicator::execute(const CollectiveArgs& args, Algorithm algo) {
  if (algo == Algorithm::mpi) return library_collective(args);
  Communicator::execute(args, algo);
}

void MpiCommunicator::library_collective(const CollectiveArgs& a) {
  const MPI_Comm c = comm();
  const MPI_Datatype type = mpi_type(a.dtype);
  const MPI_Op op = mpi_op(a.dtype, a.op);
  const size_t es = dtype_size(a.dtype);
  const int n = size(), r = rank();
  constexpr size_t kMaxCount = size_t{1} << 30;  // elements per MPI call (counts are ints)
  auto in_chunks = [&](auto&& call) {
    for (size_t off = 0; off < a.count; off += kMaxCount) call(off * es, static_cast<int>(std::min(kMaxCount, a.count - off)));
  };
  // The collectives with per-rank blocks make one call, whose count is an int.
  const bool blocks = a.kind == Collective::all_gather || a.kind == Collective::reduce_scatter ||
                      a.kind == Collective::all_to_all || a.kind == Collective::gather || a.kind == Collective::scatter;
  if (blocks && a.count > static_cast<size_t>(INT_MAX))
    fail(collective_name(a.kind), " --algo mpi: ", a.count, " elements per rank is more than one MPI call takes (", INT_MAX, ")");
  Waiting waiting(transport_->watch(), r, -1);
  switch (a.kind) {
    case Collective::all_reduce:
      in_chunks([&](size_t off, int len) {
        DPX_MPI_CHECK(MPI_Allreduce(a.send == a.recv ? MPI_IN_PLACE : at(a.send, off), at(a.recv, off), len, type, op, c));
      });
      if (a.op == ReduceOp::avg) finish_average(a.recv, a.count, a.dtype, n);
      return;
    case Collective::broadcast:
      if (r == a.root && a.send != a.recv) std::memcpy(a.recv, a.send, a.count * es);
      in_chunks([&](size_t off, int len) { DPX_MPI_CHECK(MPI_Bcast(at(a.recv, off), len, type, a.root, c)); });
      return;
    case Collective::reduce:
      in_chunks([&](size_t off, int len) {
        const bool in_place = r == a.root && a.send == a.recv;
#ifdef MPICH
        // MPICH 4.0.2 (Debian's) crashes in MPI_Reduce with MPI_IN_PLACE at a root other than 0 from
        // 512 doubles on (a 15-line C program does it too): the root's own data goes in from a copy.
        if (in_place && a.root != 0) {
          std::vector<std::byte> mine(at(a.recv, off), at(a.recv, off) + static_cast<size_t>(len) * es);
          DPX_MPI_CHECK(MPI_Reduce(mine.data(), at(a.recv, off), len, type, op, a.root, c));
          return;
        }
#endif
        DPX_MPI_CHECK(MPI_Reduce(in_place ? MPI_IN_PLACE : at(a.send, off), r == a.root ? at(a.recv, off) : nullptr, len,
                                 type, op, a.root, c));
      });
      if (r == a.root && a.op == ReduceOp::avg) finish_average(a.recv, a.count, a.dtype, n);
      return;
    case Collective::all_gather: {
      const bool in_place = a.send == at(a.recv, static_cast<size_t>(r) * a.count * es);
      DPX_MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : a.send, static_cast<int>(a.count), type, a.recv,
                                  static_cast<int>(a.count), type, c));
      return;
    }
    case Collective::reduce_scatter: {
      // In place, MPI reads the whole buffer and leaves the result at its start; NCCL's layout
      // (which dpx follows) wants it at block r.
      const bool in_place = a.recv == at(a.send, static_cast<size_t>(r) * a.count * es);
      void* whole = const_cast<void*>(a.send);
      DPX_MPI_CHECK(MPI_Reduce_scatter_block(in_place ? MPI_IN_PLACE : a.send, in_place ? whole : a.recv,
                                             static_cast<int>(a.count), type, op, c));
      if (in_place && r != 0) std::memmove(a.recv, whole, a.count * es);
      if (a.op == ReduceOp::avg) finish_average(a.recv, a.count, a.dtype, n);
      return;
    }
    case Collective::sendrecv: {
      const int right = (r + 1) % n, left = (r - 1 + n) % n;
      in_chunks([&](size_t off, int len) {
        if (a.send == a.recv)
          DPX_MPI_CHECK(MPI_Sendrecv_replace(at(a.recv, off), len, type, right, kLibrarySendrecvTag, left,
                                             kLibrarySendrecvTag, c, MPI_STATUS_IGNORE));
        else
          DPX_MPI_CHECK(MPI_Sendrecv(at(a.send, off), len, type, right, kLibrarySendrecvTag, at(a.recv, off), len, type,
                                     left, kLibrarySendrecvTag, c, MPI_STATUS_IGNORE));
      });
      return;
    }
    case Collective::all_to_all: {
      DPX_MPI_CHECK(MPI_Alltoall(a.send == a.recv ? MPI_IN_PLACE : a.send, static_cast<int>(a.count), type, a.recv,
                                 static_cast<int>(a.count), type, c));
      return;
    }
    case Collective::gather: {
      // In place on the root, MPI takes the root's block where it already is in recv.
      const bool in_place = r == a.root && a.send == at(a.recv, static_cast<size_t>(r) * a.count * es);
      DPX_MPI_CHECK(MPI_Gather(in_place ? MPI_IN_PLACE : a.send, static_cast<int>(a.count), type, a.recv,
                               static_cast<int>(a.count), type, a.root, c));
      return;
    }
    case Collective::scatter: {
      const bool in_place = r == a.root && a.recv == at(a.send, static_cast<size_t>(r) * a.count * es);
      DPX_MPI_CHECK(MPI_Scatter(a.send, static_cast<int>(a.count), type, in_place ? MPI_IN_PLACE : a.recv,
                                static_cast<int>(a.count), type, a.root, c));
      return;
    }
    default: fail("--algo mpi: ", collective_name(a.kind), " is not a collective");
  }
}

}  // namespace dpx::parallel::mpi
