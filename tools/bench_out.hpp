// dpx bench's --out holds one run: an earlier run's files there (results.csv, runs.csv, ops.csv,
// command.txt, steps/*.csv, and dpx plot's figures of it) would be read as this run's, so a sweep
// into such a folder is refused, or with --force that run is moved aside, never deleted.
#pragma once
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace dpx {

// The files of an earlier dpx bench run in `dir`, each carrying dpx's signature of its kind;
// files dpx did not write are not among them.
std::vector<std::filesystem::path> earlier_bench_files(const std::string& dir);

// Makes `dir` ready for a new run. Holding an earlier run, it is refused (UsageError naming the
// folder, the earlier command and what to pass), or with `force` that run's files are moved into a
// new folder beside it, DIR.old-N (the first N free), which is said on `log`.
void claim_bench_out(const std::string& dir, bool force, std::ostream& log);

}  // namespace dpx
