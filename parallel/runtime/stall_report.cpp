// Stall reports (see stall_report.hpp): one text for every backend, so a user reads the same
// report whether the ranks were threads or processes on many nodes.
#include "parallel/runtime/stall_report.hpp"

#include <cstdio>
#include <sstream>

namespace dpx::parallel {

namespace {

std::string bytes_text(size_t bytes) {
  char buf[32];
  if (bytes >= (size_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else if (bytes >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

bool same_call(const RankStatus& q, const StallPoint& at) {
  return q.state == RankStatus::State::in_call && q.comm == at.comm && q.call.seq == at.call.seq &&
         q.call.kind == at.call.kind;
}

std::string who(const RankStatus& q) {
  std::string s = "rank " + std::to_string(q.rank);
  if (q.pid > 0) s += " (pid " + std::to_string(q.pid) + (q.host.empty() ? "" : " on " + q.host) + ")";
  return s;
}

// "rank 3", "ranks 3, 5": the subject of a sentence.
std::string ranks_subject(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(ranks[i]);
    if (j > i) s += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

std::string describe_call(const CommCall& call) {
  std::ostringstream os;
  os << collective_name(call.kind);
  if (call.kind == Collective::send || call.kind == Collective::recv) {
    os << (call.kind == Collective::send ? " to" : " from") << " rank " << call.peer << " (" << bytes_text(call.bytes)
       << ")";
    return os.str();
  }
  os << " #" << call.seq;
  if (call.kind != Collective::barrier) {
    os << " (" << bytes_text(call.bytes) << " of " << dtype_name(call.dtype) << ", " << algorithm_name(call.algo);
    if (call.root >= 0) os << ", root " << call.root;
    os << ")";
  }
  return os.str();
}

std::string describe_status(const RankStatus& q) {
  std::ostringstream os;
  os << who(q) << ": ";
  switch (q.state) {
    case RankStatus::State::busy: os << "busy outside communication for " << seconds(q.for_s); break;
    case RankStatus::State::in_call:
      os << "in " << describe_call(q.call) << " on the " << q.comm << " communicator, for " << seconds(q.for_s);
      break;
    case RankStatus::State::finished: os << "finished its work"; break;
    case RankStatus::State::no_answer: os << "did not answer: hung, stopped, or unreachable"; break;
    case RankStatus::State::gone: os << "gone: its process no longer exists (killed, or crashed)"; break;
  }
  if (!q.activity.empty()) os << " [last said: " << q.activity << "]";
  return os.str();
}

std::string stall_report(const StallPoint& at, const std::vector<RankStatus>& ranks) {
  std::ostringstream os;
  os << "stall: rank " << at.rank << " has waited " << seconds(at.waited_s) << " (--comm-timeout "
     << seconds(at.timeout_s) << ") in " << describe_call(at.call) << " on the " << at.comm << " communicator";
  if (at.waiting_for >= 0) os << ", for rank " << at.waiting_for;
  os << "\n";
  std::vector<int> reached, busy, silent, gone, mismatched;
  std::ostringstream others;
  for (const RankStatus& q : ranks) {
    if (same_call(q, at)) {
      reached.push_back(q.rank);
      continue;
    }
    others << "    " << describe_status(q);
    if (q.state == RankStatus::State::in_call && q.comm == at.comm) {
      mismatched.push_back(q.rank);
      others << (q.call.seq == at.call.seq ? " (a different collective with the same number)"
                 : q.call.seq < at.call.seq ? " (an earlier collective)"
                                            : " (a later collective)");
    }
    if (q.state == RankStatus::State::busy) busy.push_back(q.rank);
    if (q.state == RankStatus::State::no_answer) silent.push_back(q.rank);
    if (q.state == RankStatus::State::gone) gone.push_back(q.rank);
    others << "\n";
  }
  os << "  reached " << describe_call(at.call) << ": " << (reached.empty() ? "none" : "ranks " + rank_list(reached))
     << "\n";
  if (reached.size() < ranks.size()) os << "  not reached:\n" << others.str();
  if (!gone.empty())
    os << "  " << ranks_subject(gone) << " vanished: look for the launcher's message and their last output.\n";
  if (!silent.empty())
    os << "  " << ranks_subject(silent) << " did not answer: a hang, a stopped process, or a network failure.\n";
  if (!mismatched.empty())
    os << "  " << ranks_subject(mismatched) << (mismatched.size() == 1 ? " waits" : " wait")
       << " in other collectives: the ranks did not call the same sequence of collectives.\n";
  if (!busy.empty())
    os << "  " << ranks_subject(busy) << (busy.size() == 1 ? " is" : " are")
       << " still computing: a hang outside communication, or work slower than the timeout allows "
          "(raise --comm-timeout).\n";
  std::string text = os.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace dpx::parallel
