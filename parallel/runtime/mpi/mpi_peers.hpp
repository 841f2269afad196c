// The processes of an MPI job as the process's watchdog (runtime/watchdog.hpp) sees them: on a
// communicator of their own, every round of the watchdog's thread
//  - answers other ranks' questions about this one (what its communicators wait in), at any
//    time, even while this rank computes;
//  - notices at once when a rank on its own node vanishes (pidfd), and ends the job saying so;
//  - takes SIGINT, SIGTERM and SIGHUP: the first asks the run to stop at the end of a step
//    (core/stop.hpp; the ranks vote on which), a second ends the rank at once with a line that
//    says where it was and exit code 128 + the signal's number;
// and when the watchdog finds a stall on this rank, asks every rank what it is doing and prints
// the job's one report (rank 0 prints it when it can: a rank that times out asks rank 0 to
// report, as Horovod's coordinator does), then ends the job.
#pragma once
#include <mpi.h>

#include <atomic>
#include <list>
#include <string>
#include <vector>

#include "parallel/runtime/watchdog.hpp"

namespace dpx::parallel::mpi {

// Another rank of the world, as this process sees it.
struct Peer {
  int rank = 0;
  int pid = 0;
  std::string host;
  bool local = false;  // same node and pid namespace: its pid can be watched from here
};

class MpiPeers final : public Peers {
 public:
  // `control` is a communicator for the peers alone (used, not owned). `peers` has one entry per
  // world rank, this one included. Installs the handlers of SIGINT, SIGTERM, SIGHUP.
  MpiPeers(MPI_Comm control, std::vector<Peer> peers, int rank);
  ~MpiPeers() override;
  MpiPeers(const MpiPeers&) = delete;
  MpiPeers& operator=(const MpiPeers&) = delete;

  // The job ends normally from here: a rank that leaves is no fault any more.
  void stop_watching_peers() { watch_peers_.store(false); }

  void serve() override;
  bool stalled(const StallPoint& at) override;

 private:
  struct Outgoing;  // a send MPI may still read (mpi_peers.cpp)
  // Sends `wire`'s bytes to rank `to` without waiting (kept in outgoing_ until MPI is done).
  template <class Wire>
  void post(const Wire& wire, int to, int tag);
  void poll_events(int timeout_ms);
  void serve_requests();
  // Asks every other rank about communicator `label` (replies within `grace_s`) and returns one
  // status per rank, this one's included.
  std::vector<RankStatus> ask_everyone(const std::string& label, double grace_s);
  RankStatus mine(const std::string& label) const;
  [[noreturn]] void report_and_abort(const std::string& text, bool print);
  // Tells every other rank that this one ends the job (it has said why).
  void announce_end();
  [[noreturn]] void on_peer_gone(int rank);
  void on_signal(int signal);  // returns on the first signal, ends the process on a second
  bool speaks_for_node() const;
  // Whether a rank announced that it ends the job (waiting up to wait_s for the notice).
  bool abort_announced(double wait_s);

  MPI_Comm control_;
  std::vector<Peer> peers_;
  const int rank_;
  std::atomic<bool> watch_peers_{true};
  std::vector<int> pidfds_;       // per rank, -1 where not watched
  std::vector<bool> gone_;        // per rank: its process has exited
  std::vector<int> newly_gone_;   // exits not acted on yet (none are while asking everyone)
  bool asking_ = false;
  int signal_fd_ = -1;            // the read end of the pipe the signal handler writes to
  std::vector<char> query_in_;    // an incoming question (QueryWire)
  MPI_Request query_request_ = MPI_REQUEST_NULL;
  std::vector<char> report_in_;   // an incoming request to report a stall (rank 0)
  MPI_Request report_request_ = MPI_REQUEST_NULL;
  int abort_in_ = 0;
  bool aborting_ = false;         // a rank announced that it ends the job
  MPI_Request abort_request_ = MPI_REQUEST_NULL;
  std::list<Outgoing> outgoing_;  // replies and requests in flight (a list: elements never move)
  int next_query_ = 1;
  double patient_until_s_ = 0;    // a patient wait was found healthy until then
};

}  // namespace dpx::parallel::mpi
