// CPU time of the cores and of the run's processes (core/cpu_use.hpp), from /proc.
#include "core/cpu_use.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/clock.hpp"

namespace dpx {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The cores process `pid` may run on, from its Cpus_allowed_list ("0-3,8").
std::vector<int> allowed_cpus(int pid) {
  std::vector<int> cpus;
  std::istringstream lines(read_text("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
    std::istringstream ranges(line.substr(18));
    for (std::string range; std::getline(ranges, range, ',');) {
      int lo = -1, hi = -1;
      if (std::sscanf(range.c_str(), "%d-%d", &lo, &hi) == 1) hi = lo;
      for (int c = lo; lo >= 0 && c <= hi && c < 65536; ++c) cpus.push_back(c);
    }
  }
  return cpus;
}

// Read during static initialisation, as the OpenMP library reads it as it loads.
const std::string kWaitPolicyAtLoad = [] {
  const char* p = std::getenv("OMP_WAIT_POLICY");
  return p && *p ? std::string(p) : std::string("default");
}();

}  // namespace

const std::string& omp_wait_policy() { return kWaitPolicyAtLoad; }

double busy_ticks(const std::string& proc_stat, const std::vector<int>& cpus) {
  double total = 0;
  std::istringstream lines(proc_stat);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    // user nice system idle iowait irq softirq steal (guest time is inside user already)
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (!(fields >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq)) continue;
    fields >> steal;  // absent on old kernels
    for (int c : cpus)
      if (c == cpu) total += user + nice + system + irq + softirq + steal;
  }
  return total;
}

double process_ticks(const std::string& pid_stat) {
  // pid (comm) state ppid ... : utime and stime are fields 14 and 15, the 12th and 13th after the
  // comm's closing parenthesis (a comm may hold spaces and parentheses).
  const size_t close = pid_stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(pid_stat.substr(close + 1));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 1; i <= 13 && fields >> field; ++i) {
    if (i == 12) utime = std::strtod(field.c_str(), nullptr);
    if (i == 13) stime = std::strtod(field.c_str(), nullptr);
  }
  return utime + stime;
}

CpuSample sample_cpu(const std::vector<int>& pids) {
  CpuSample s;
  const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  // The union of the processes' cores: ranks bound to a core each, or all free to move.
  std::vector<int> cpus;
  for (int pid : pids)
    for (int c : allowed_cpus(pid))
      if (std::find(cpus.begin(), cpus.end(), c) == cpus.end()) cpus.push_back(c);
  const std::string stat = read_text("/proc/stat");
  if (hz <= 0 || cpus.empty() || stat.empty()) return s;
  s.wall_s = now_s();
  s.cores = static_cast<int>(cpus.size());
  s.cores_busy_s = busy_ticks(stat, cpus) / hz;
  for (int pid : pids) s.own_s += process_ticks(read_text("/proc/" + std::to_string(pid) + "/stat")) / hz;
  s.valid = true;
  return s;
}

double other_cpu_share(const CpuSample& a, const CpuSample& b) {
  const double wall = b.wall_s - a.wall_s;
  if (!a.valid || !b.valid || a.cores != b.cores || wall < 0.2) return -1;
  const double others = (b.cores_busy_s - a.cores_busy_s) - (b.own_s - a.own_s);
  const double share = others / (wall * a.cores);
  return share < 0 ? 0 : share > 1 ? 1 : share;
}

}  // namespace dpx
