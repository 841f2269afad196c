// What other processes took of the cores a run used: the cores' busy time from /proc/stat (user,
// nice, system, irq, softirq and steal: a VM's neighbours count too) against the run's own
// processes' CPU time from /proc/PID/stat, between two samples. A run on a busy machine measures
// that machine, not dpx (docs/commands.md, "A busy machine"); dpx bench marks such runs disturbed.
#pragma once
#include <string>
#include <vector>

namespace dpx {

struct CpuSample {
  bool valid = false;     // /proc could be read
  double wall_s = 0;      // steady clock
  double cores_busy_s = 0;  // busy time of the cores the processes may run on, summed
  double own_s = 0;       // CPU time of the run's processes (user + system), summed
  int cores = 0;          // how many cores that is
};

// Samples the cores that `pids` may run on (the union of their affinity masks) and their CPU time:
// this process and, under MPI, the other ranks on its node (a pid that is gone counts 0).
CpuSample sample_cpu(const std::vector<int>& pids);

// The share of the cores' time between `a` and `b` that other processes took, 0 to 1; -1 when
// either sample is invalid or the window is shorter than 0.2 s (the kernel counts in ticks of
// 10 ms: a shorter window says little).
double other_cpu_share(const CpuSample& a, const CpuSample& b);

// OMP_WAIT_POLICY as this process was loaded, when the OpenMP library read it ("default" where it
// was unset): the policy OpenMP's threads wait by, whatever the environment says later.
const std::string& omp_wait_policy();

// A run whose other_cpu_share exceeds this is marked disturbed (bench's table and results.csv,
// train's summary, the report).
constexpr double kDisturbedShare = 0.10;
inline bool disturbed(double other_cpu_share) { return other_cpu_share > kDisturbedShare; }

// The parsers, for tests: the busy clock ticks of the listed cores in /proc/stat's text (`cpuN`
// lines; a core missing there counts 0), and the user + system clock ticks of a /proc/PID/stat line.
double busy_ticks(const std::string& proc_stat, const std::vector<int>& cpus);
double process_ticks(const std::string& pid_stat);

}  // namespace dpx
