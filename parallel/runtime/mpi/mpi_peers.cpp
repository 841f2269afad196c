// The MPI job's peers (see mpi_peers.hpp). Their messages travel on a communicator of their own:
//   query  (tag 101): a QueryWire, the asker's query number and communicator -> reply (tag 102): a StatusWire
//   report (tag 103): a StallWire, asking rank 0 to report a stall and end the job
//   abort  (tag 104): an int, sent to every rank by the rank that has reported and ends the job,
//                     so that the others stay quiet while the launcher takes them down
// The process's watchdog thread calls serve() every 20 ms.
#include "parallel/runtime/mpi/mpi_peers.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <thread>
#include <type_traits>

#include "core/atomic_file.hpp"
#include "core/clock.hpp"
#include "core/error.hpp"
#include "core/stop.hpp"
#include "parallel/comm/mpi/mpi_util.hpp"
#include "parallel/runtime/stall_report.hpp"
#include "parallel/runtime/watchdog.hpp"

namespace dpx::parallel::mpi {

namespace {

constexpr int kQueryTag = 101, kReplyTag = 102, kReportTag = 103, kAbortTag = 104;

template <size_t N>
void copy_text(char (&dst)[N], const std::string& src) {
  std::snprintf(dst, N, "%s", src.c_str());
}

// How long the other ranks get to answer a question about a stall of a call with this timeout.
double answer_grace_s(double timeout_s) { return std::min(5.0, std::max(1.0, timeout_s / 4)); }

// The messages below travel as their bytes between processes of one dpx binary.
static_assert(std::is_trivially_copyable_v<CommCall>);

// A question to another rank: what do you do on the communicator `label`?
struct QueryWire {
  int32_t query = 0;
  char label[32] = {};
};

// One rank's answer to a query.
struct StatusWire {
  int32_t query = 0;
  uint8_t state = 0;  // RankStatus::State
  CommCall call;
  double for_s = 0;
  char comm[32] = {};
  char activity[96] = {};
};

// A rank that timed out asks rank 0 to report: where it waits.
struct StallWire {
  int32_t rank = 0, waiting_for = -1;
  CommCall call;
  double waited_s = 0, timeout_s = 0;
  char comm[32] = {};
};

StatusWire status_of(const RankStatus& s) {
  StatusWire w;
  w.state = static_cast<uint8_t>(s.state);
  w.call = s.call;
  w.for_s = s.for_s;
  copy_text(w.comm, s.comm);
  copy_text(w.activity, s.activity);
  return w;
}

RankStatus status_from(const StatusWire& w, const Peer& peer) {
  RankStatus r;
  r.rank = peer.rank;
  r.pid = peer.pid;
  r.host = peer.host;
  r.state = static_cast<RankStatus::State>(w.state);
  r.call = w.call;
  r.for_s = w.for_s;
  r.comm = w.comm;
  r.activity = w.activity;
  return r;
}

// A signal handler can only do async-signal-safe things: it writes the signal's number into a
// pipe, whose other end the watchdog polls. The write end is the one process-wide value a
// handler can reach.
int signal_pipe_write = -1;

void forward_signal(int signal) {
  const unsigned char byte = static_cast<unsigned char>(signal);
  const int saved = errno;
  if (signal_pipe_write >= 0) (void)!write(signal_pipe_write, &byte, 1);
  errno = saved;
}

int open_pidfd(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

}  // namespace

// A reply or request in flight: MPI reads its bytes until it completes.
struct MpiPeers::Outgoing {
  std::vector<char> bytes;
  MPI_Request request = MPI_REQUEST_NULL;
};

template <class Wire>
void MpiPeers::post(const Wire& wire, int to, int tag) {
  Outgoing& o = outgoing_.emplace_back();
  o.bytes.assign(reinterpret_cast<const char*>(&wire), reinterpret_cast<const char*>(&wire) + sizeof wire);
  DPX_MPI_CHECK(MPI_Isend(o.bytes.data(), static_cast<int>(o.bytes.size()), MPI_BYTE, to, tag, control_, &o.request));
}

MpiPeers::MpiPeers(MPI_Comm control, std::vector<Peer> peers, int rank)
    : control_(control), peers_(std::move(peers)), rank_(rank), pidfds_(peers_.size(), -1), gone_(peers_.size(), false),
      query_in_(sizeof(QueryWire)), report_in_(sizeof(StallWire)) {
  for (const Peer& p : peers_)
    if (p.local && p.rank != rank_) pidfds_[static_cast<size_t>(p.rank)] = open_pidfd(p.pid);
  // Installed after MPI_Init, so that these handlers are dpx's whatever the library set up; the
  // signal thread of core/stop.cpp calls them, serve() acts on what they forward.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
    signal_fd_ = fds[0];
    signal_pipe_write = fds[1];
    struct sigaction action {};
    action.sa_handler = forward_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &action, nullptr);
  }
  DPX_MPI_CHECK(MPI_Irecv(query_in_.data(), static_cast<int>(query_in_.size()), MPI_BYTE, MPI_ANY_SOURCE, kQueryTag,
                          control_, &query_request_));
  DPX_MPI_CHECK(MPI_Irecv(report_in_.data(), static_cast<int>(report_in_.size()), MPI_BYTE, MPI_ANY_SOURCE, kReportTag,
                          control_, &report_request_));
  DPX_MPI_CHECK(MPI_Irecv(&abort_in_, 1, MPI_INT, MPI_ANY_SOURCE, kAbortTag, control_, &abort_request_));
}

MpiPeers::~MpiPeers() {
  // Replies still in flight complete once their askers receive them, or are let go.
  for (int i = 0; i < 50 && !outgoing_.empty(); ++i) {
    serve_requests();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (Outgoing& o : outgoing_) MPI_Request_free(&o.request);
  outgoing_.clear();
  for (MPI_Request* r : {&query_request_, &report_request_, &abort_request_}) {
    if (*r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(r);
    MPI_Wait(r, MPI_STATUS_IGNORE);
  }
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);
  if (signal_pipe_write >= 0) close(signal_pipe_write);
  signal_pipe_write = -1;
  if (signal_fd_ >= 0) close(signal_fd_);
}

void MpiPeers::serve() {
  try {
    poll_events(0);
    serve_requests();
    if (aborting_) report_and_abort("", false);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpx: error: rank %d: the watchdog failed: %s\n", rank_, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

void MpiPeers::poll_events(int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<int> owner;  // rank per entry; -1: the signal fd
  if (signal_fd_ >= 0) {
    fds.push_back({signal_fd_, POLLIN, 0});
    owner.push_back(-1);
  }
  for (size_t q = 0; q < pidfds_.size(); ++q)
    if (pidfds_[q] >= 0 && !gone_[q]) {
      fds.push_back({pidfds_[q], POLLIN, 0});
      owner.push_back(static_cast<int>(q));
    }
  if (fds.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  } else if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
    return;
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    if (owner[i] < 0) {
      unsigned char signal = 0;
      if (read(signal_fd_, &signal, 1) == 1) on_signal(signal);
      continue;
    }
    gone_[static_cast<size_t>(owner[i])] = true;
    newly_gone_.push_back(owner[i]);
  }
  // Where pidfds are missing (old kernels), a peer on this node is checked by its pid.
  for (const Peer& p : peers_)
    if (p.local && p.rank != rank_ && pidfds_[static_cast<size_t>(p.rank)] < 0 && !gone_[static_cast<size_t>(p.rank)] &&
        kill(p.pid, 0) != 0 && errno == ESRCH) {
      gone_[static_cast<size_t>(p.rank)] = true;
      newly_gone_.push_back(p.rank);
    }
  if (!newly_gone_.empty() && !asking_) {
    const int q = newly_gone_.front();
    newly_gone_.clear();
    if (watch_peers_.load()) on_peer_gone(q);
  }
}

bool MpiPeers::abort_announced(double wait_s) {
  const double until = now_s() + wait_s;
  for (;;) {
    int done = 0;
    if (aborting_) return true;
    if (abort_request_ != MPI_REQUEST_NULL && MPI_Test(&abort_request_, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done)
      return aborting_ = true;
    if (now_s() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void MpiPeers::serve_requests() {
  if (abort_announced(0)) return;  // another rank reported and ends the job: stay quiet
  for (;;) {  // status queries: answered from the rank's state, whatever it is doing
    int done = 0;
    MPI_Status st;
    DPX_MPI_CHECK(MPI_Test(&query_request_, &done, &st));
    if (!done) break;
    QueryWire q;
    std::memcpy(&q, query_in_.data(), sizeof q);
    q.label[sizeof q.label - 1] = 0;
    StatusWire w = status_of(mine(q.label));
    w.query = q.query;
    post(w, st.MPI_SOURCE, kReplyTag);
    DPX_MPI_CHECK(MPI_Irecv(query_in_.data(), static_cast<int>(query_in_.size()), MPI_BYTE, MPI_ANY_SOURCE, kQueryTag,
                            control_, &query_request_));
  }
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    int done = 0;
    DPX_MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    it = done ? outgoing_.erase(it) : std::next(it);
  }
  if (rank_ != 0 || report_request_ == MPI_REQUEST_NULL) return;
  int done = 0;
  DPX_MPI_CHECK(MPI_Test(&report_request_, &done, MPI_STATUS_IGNORE));
  if (!done) return;
  // Another rank gave up waiting: rank 0 asks everyone and reports for the job.
  StallWire w;
  std::memcpy(&w, report_in_.data(), sizeof w);
  StallPoint at;
  at.rank = w.rank;
  at.call = w.call;
  at.comm = w.comm;
  at.waited_s = w.waited_s;
  at.timeout_s = w.timeout_s;
  at.waiting_for = w.waiting_for;
  report_and_abort("dpx: error: " + stall_report(at, ask_everyone(at.comm, answer_grace_s(at.timeout_s))), true);
}

RankStatus MpiPeers::mine(const std::string& label) const {
  RankStatus s = Watchdog::of_process().status_for(label);
  const Peer& me = peers_[static_cast<size_t>(rank_)];
  s.rank = rank_;
  s.pid = me.pid;
  s.host = me.host;
  return s;
}

std::vector<RankStatus> MpiPeers::ask_everyone(const std::string& label, double grace_s) {
  const RankStatus me = mine(label);  // as the question goes out
  // Requests for reports are not served meanwhile: this rank is reporting already.
  MPI_Request saved_report = report_request_;
  report_request_ = MPI_REQUEST_NULL;
  asking_ = true;
  const int n = static_cast<int>(peers_.size()), query = next_query_++;
  std::vector<StatusWire> replies(static_cast<size_t>(n));
  std::vector<MPI_Request> receives(static_cast<size_t>(n), MPI_REQUEST_NULL);
  std::vector<bool> answered(static_cast<size_t>(n), false);
  for (int q = 0; q < n; ++q) {
    if (q == rank_) continue;
    DPX_MPI_CHECK(MPI_Irecv(&replies[q], sizeof(StatusWire), MPI_BYTE, q, kReplyTag, control_, &receives[q]));
    QueryWire wire;
    wire.query = query;
    copy_text(wire.label, label);
    post(wire, q, kQueryTag);
  }
  const double deadline = now_s() + grace_s;
  int missing = n - 1;
  while (missing > 0 && now_s() < deadline) {
    poll_events(2);
    serve_requests();
    for (int q = 0; q < n; ++q) {
      if (q == rank_ || answered[q]) continue;
      int done = 0;
      DPX_MPI_CHECK(MPI_Test(&receives[q], &done, MPI_STATUS_IGNORE));
      if (!done) continue;
      if (replies[q].query == query) {
        answered[q] = true;
        --missing;
      } else {  // a late answer to an earlier query: wait for this one's
        DPX_MPI_CHECK(MPI_Irecv(&replies[q], sizeof(StatusWire), MPI_BYTE, q, kReplyTag, control_, &receives[q]));
      }
    }
  }
  std::vector<RankStatus> all(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) {
    RankStatus& s = all[static_cast<size_t>(q)];
    const Peer& peer = peers_[static_cast<size_t>(q)];
    if (q == rank_) {
      s = me;
    } else if (answered[q]) {
      s = status_from(replies[q], peer);
    } else {
      MPI_Cancel(&receives[q]);
      MPI_Wait(&receives[q], MPI_STATUS_IGNORE);
      s.rank = q;
      s.pid = peer.pid;
      s.host = peer.host;
      s.state = gone_[static_cast<size_t>(q)] ? RankStatus::State::gone : RankStatus::State::no_answer;
    }
  }
  report_request_ = saved_report;
  asking_ = false;
  return all;
}

bool MpiPeers::stalled(const StallPoint& at) {
  const double grace = answer_grace_s(at.timeout_s);
  if (at.call.patient) {
    // Waiting for ranks that work long outside communication is fine while all of them answer.
    if (now_s() < patient_until_s_) return true;
    std::vector<RankStatus> all = ask_everyone(at.comm, grace);
    bool healthy = true;
    for (const RankStatus& q : all)
      healthy = healthy && q.state != RankStatus::State::no_answer && q.state != RankStatus::State::gone;
    if (healthy) {
      patient_until_s_ = now_s() + at.timeout_s;
      return true;
    }
    report_and_abort("dpx: error: " + stall_report(at, all), true);
  }
  if (rank_ != 0 && !gone_[0]) {
    // Rank 0 reports for the job when it can: ask it, and give it time to end the job.
    StallWire w;
    w.rank = rank_;
    w.waiting_for = at.waiting_for;
    w.call = at.call;
    w.waited_s = at.waited_s;
    w.timeout_s = at.timeout_s;
    copy_text(w.comm, at.comm);
    post(w, 0, kReportTag);
    const double until = now_s() + 3 * grace + 2;
    while (now_s() < until) {
      poll_events(10);
      serve_requests();
    }
  }
  report_and_abort("dpx: error: " + stall_report(at, ask_everyone(at.comm, grace)), true);
}

void MpiPeers::announce_end() {
  static const int notice = 1;  // MPI may read it after this returns
  for (int q = 0; q < static_cast<int>(peers_.size()); ++q) {
    if (q == rank_) continue;
    MPI_Request r;
    if (MPI_Isend(&notice, 1, MPI_INT, q, kAbortTag, control_, &r) == MPI_SUCCESS) MPI_Request_free(&r);
  }
}

void MpiPeers::report_and_abort(const std::string& text, bool print) {
  if (print && !text.empty()) {
    std::fprintf(stderr, "%s\n", text.c_str());
    std::fflush(stderr);
    announce_end();
    // Let the notices go out, and the launcher take the report from this process's pipe.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } else {
    // The rank that prints may still ask this one: keep answering until it ends the job.
    const double until = now_s() + 3;
    while (now_s() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (!abort_announced(0)) serve_requests();
    }
  }
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

// The rank that speaks for the job about a rank that vanished: rank 0 if it can see it (same
// node) and is alive, else the lowest surviving rank of this node.
bool MpiPeers::speaks_for_node() const {
  if (rank_ == 0) return true;
  if (peers_[0].local && !gone_[0]) return false;
  for (const Peer& p : peers_)
    if (p.local && p.rank < rank_ && !gone_[static_cast<size_t>(p.rank)]) return false;
  return true;
}

void MpiPeers::on_peer_gone(int q) {
  const Peer& peer = peers_[static_cast<size_t>(q)];
  // A rank that ends the job says so first: then q's exit is that ending, not news.
  if (!speaks_for_node() || abort_announced(0.05)) report_and_abort("", false);
  // Said at once: the launcher may end this process any moment now.
  std::fprintf(stderr,
               "dpx: error: rank %d (pid %d on %s) vanished: its process no longer exists (killed, or crashed before "
               "it could say why; look for the launcher's message and its last output)\n",
               q, peer.pid, peer.host.c_str());
  std::fflush(stderr);
  std::string text = "  where the ranks were:";
  for (const RankStatus& s : ask_everyone("world", 1.0)) text += "\n    " + describe_status(s);
  report_and_abort(text, true);
}

void MpiPeers::on_signal(int signal) {
  if (stop::requested() == 0 && stop::graceful()) {  // the first, in training: stop after an agreed step
    stop::request(signal, /*announce=*/speaks_for_node());
    return;
  }
  remove_temporaries_in_progress();
  const RankStatus s = mine("world");
  std::string where = s.state == RankStatus::State::in_call ? "in " + describe_call(s.call) : "outside communication";
  if (!s.activity.empty()) where += " (" + s.activity + ")";
  std::string vanished;
  for (const Peer& p : peers_)
    if (gone_[static_cast<size_t>(p.rank)]) vanished += detail::concat(vanished.empty() ? "" : ", ", p.rank);
  if (speaks_for_node() && !abort_announced(0.05)) {
    const char* name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : signal == SIGHUP ? "SIGHUP" : "a signal";
    std::fprintf(stderr, "dpx: rank %d: stopped by %s (from the launcher, the batch system or a user) %s%s\n", rank_,
                 name, where.c_str(), vanished.empty() ? "" : ("; ranks that had vanished: " + vanished).c_str());
    std::fflush(stderr);
    announce_end();  // the others then take this process's exit for what it is, and stay quiet
    // The launcher forwards this process's output through a pipe it stops reading once the
    // process is gone: give it a moment to take the line.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::_Exit(128 + signal);
}

}  // namespace dpx::parallel::mpi
