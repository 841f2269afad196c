// Ranks as threads of one process, whatever memory their buffers live in: the rendezvous of one
// exchange (a sender posts a pointer, its receiver moves the data straight out of it), the
// abort, what each rank waits for (the process's watchdog times it and sees deadlocks:
// runtime/watchdog.hpp) and the barrier. The threads backend moves host memory
// (threads_backend.cpp); the p2p backend moves GPU memory (parallel/comm/p2p/cuda/p2p_backend.cpp).
#pragma once
#include <functional>
#include <memory>

#include "parallel/comm/communicator.hpp"
#include "parallel/comm/threads/threads_backend.hpp"

namespace dpx::parallel {

class ThreadWorld;  // threads_backend.cpp: the mailboxes and the state of every rank

// One thread rank's transport. Subclasses say how the bytes move: deliver() runs on the
// receiving rank once the sender has posted, and must return only when the sender's buffer may
// be reused (the sender leaves the exchange then).
class ThreadRankTransport : public Transport {
 public:
  ThreadRankTransport(ThreadWorld& world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override;
  void barrier() override;
  void begin_call(const CommCall& call) override;
  void end_call() override;
  void set_activity(std::string_view what) override;

 protected:
  void do_exchange(const Exchange& x) final;
  // Sender's side, before it posts: a token that travels with the message (p2p: an event on
  // the sender's stream after which the send buffer is ready). Default: none.
  virtual const void* before_send(const Exchange& x) { return nullptr; }
  // Receiver's side: x.recv = incoming, or reduce_with (op) incoming, over x.recv_bytes.
  virtual void deliver(const Exchange& x, const void* incoming, const void* token) = 0;

 private:
  void receive(const Exchange& x);
  void check_peer(int peer) const;

  ThreadWorld& world_;
  const int rank_;
};

// Makes rank r's transport over `world` (called on rank r's thread).
using ThreadTransportMaker = std::function<std::unique_ptr<ThreadRankTransport>(ThreadWorld& world, int rank)>;

// run_ranks (threads_backend.hpp) with two communicators per rank, each with mailboxes of its
// own: `host`, the threads backend's (votes, barriers, host buffers), and `data` over the
// transports `make_data` builds (null: the threads backend's too), which `backend` names in stall
// reports; --net-sim (options.net_sim) applies to `data` alone.
void run_thread_ranks(int k, const std::function<void(Communicator& host, Communicator& data)>& fn,
                      const RankOptions& options, const ThreadTransportMaker& make_data, const char* backend);

}  // namespace dpx::parallel
