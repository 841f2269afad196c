// The group of one process, and the start-up agreement every launched group runs: each rank
// sends how its start went and its options; every rank then decides the same thing from the same
// data, so all leave together with one message instead of some waiting forever for the others.
#include "parallel/runtime/process_group.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>

#include "parallel/runtime/stall_report.hpp"

namespace dpx::parallel {

LocalProcessGroup::LocalProcessGroup() {
  info_.hosts = {""};
  info_.pids = {0};
  info_.node_of_rank = {0};
  info_.local_rank = {0};
  info_.clock_offset_s = {0};
  info_.clock_uncertainty_s = {0};
}

Communicator& LocalProcessGroup::world() {
  fail("this process was not started by an MPI launcher (mpirun, srun): it has no world communicator");
}

std::unique_ptr<Communicator> LocalProcessGroup::first(int) {
  fail("this process was not started by an MPI launcher (mpirun, srun): it has no communicators of processes");
}

void LocalProcessGroup::abort(int exit_code) {
  // This process is the whole job: there are no other ranks to end, and library code does not
  // exit; its caller returns the exit code (main does so without calling abort).
  fail("this process was not started by an MPI launcher: it has no other ranks to end (exit code ", exit_code, ")");
}

void ProcessGroup::agree(const StartReport& mine) {
  agreed_ = true;  // whatever the outcome, the ranks have met: later errors are this rank's own
  if (launched()) {
    agree_on_start(world(), mine);
  } else if (mine.code != 0) {
    throw SharedFailure(mine.code, mine.message);
  }
}

namespace {

// One rank's report as text: "code\x1fmessage\x1e" then "flag\x1fvalue\x1e" per option.
std::string encode(const StartReport& r) {
  std::string s = std::to_string(r.code) + '\x1f' + r.message + '\x1e';
  for (const auto& [flag, value] : r.options) s += flag + '\x1f' + value + '\x1e';
  return s;
}

StartReport decode(const std::string& s) {
  StartReport r;
  size_t pos = 0;
  bool first = true;
  while (pos < s.size()) {
    const size_t end = s.find('\x1e', pos);
    const std::string field = s.substr(pos, end - pos);
    const size_t sep = field.find('\x1f');
    const std::string key = field.substr(0, sep), value = sep == std::string::npos ? "" : field.substr(sep + 1);
    if (first) {
      r.code = std::atoi(key.c_str());
      r.message = value;
      first = false;
    } else {
      r.options.emplace_back(key, value);
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return r;
}

// "--seed is 1 on ranks 0, 2-3 and 2 on rank 1"
std::string describe_values(const std::string& flag, const std::map<std::string, std::vector<int>>& by_value) {
  std::string s = flag + " is ";
  size_t i = 0;
  for (const auto& [value, ranks] : by_value) {
    if (i > 0) s += i + 1 == by_value.size() ? " and " : ", ";
    s += (value.empty() ? "(not set)" : value) + " on rank" + (ranks.size() > 1 ? "s " : " ") + rank_list(ranks);
    ++i;
  }
  return s;
}

}  // namespace

void agree_on_start(Communicator& comm, const StartReport& mine) {
  const int n = comm.size();
  const std::string text = encode(mine);
  const int64_t length = static_cast<int64_t>(text.size());
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  comm.all_gather(&length, lengths.data(), 1, DType::i64);
  int64_t longest = 0;
  for (int64_t l : lengths) longest = std::max(longest, l);
  std::string padded = text;
  padded.resize(static_cast<size_t>(longest), '\0');
  std::string all(static_cast<size_t>(longest) * static_cast<size_t>(n), '\0');
  comm.all_gather(padded.data(), all.data(), static_cast<size_t>(longest), DType::u8);
  std::vector<StartReport> reports;
  for (int q = 0; q < n; ++q)
    reports.push_back(decode(all.substr(static_cast<size_t>(q * longest), static_cast<size_t>(lengths[q]))));

  // Ranks that failed: one line per distinct message, with the ranks that gave it.
  std::map<std::string, std::vector<int>> failures;
  bool all_usage = true;
  for (int q = 0; q < n; ++q) {
    if (reports[q].code == 0) continue;
    failures[reports[q].message].push_back(q);
    all_usage = all_usage && reports[q].code == 2;
  }
  if (!failures.empty()) {
    std::string message;
    for (const auto& [text_of, ranks] : failures) {
      if (!message.empty()) message += "\n";
      if (failures.size() == 1 && static_cast<int>(ranks.size()) == n)
        message += text_of;  // every rank said the same: say it once
      else
        message += "rank" + std::string(ranks.size() > 1 ? "s " : " ") + rank_list(ranks) + ": " + text_of;
    }
    throw SharedFailure(all_usage ? 2 : 1, message);
  }

  // Options: every flag any rank has (in the order they first appear), and each rank's value; a
  // flag given twice counts as its values joined.
  std::vector<std::map<std::string, std::string>> given(static_cast<size_t>(n));
  std::vector<std::string> order;
  for (int q = 0; q < n; ++q)
    for (const auto& [flag, value] : reports[q].options) {
      if (std::find(order.begin(), order.end(), flag) == order.end()) order.push_back(flag);
      std::string& joined = given[static_cast<size_t>(q)][flag];
      joined += (joined.empty() ? "" : ",") + value;
    }
  std::string differences;
  for (const std::string& flag : order) {
    std::map<std::string, std::vector<int>> by_value;  // value -> the ranks that hold it
    for (int q = 0; q < n; ++q) {
      const auto it = given[static_cast<size_t>(q)].find(flag);
      by_value[it != given[static_cast<size_t>(q)].end() ? it->second : "(absent)"].push_back(q);
    }
    if (by_value.size() > 1) differences += (differences.empty() ? "" : "; ") + describe_values(flag, by_value);
  }
  if (!differences.empty())
    throw SharedFailure(2, "the ranks were started with different options: " + differences +
                              ". Every rank must run the same command: check the mpirun or srun line (and "
                              "anything that differs between nodes, such as DPX_DATA_DIR)");
}

}  // namespace dpx::parallel
