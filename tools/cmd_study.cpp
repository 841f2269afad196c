// `dpx study NAME`: the studies dpx reproduces, as named sweeps of dpx bench and dpx collective that
// run on whatever machine is at hand (devices 1..its cores) and end in figures (dpx plot) and one
// page (dpx report, report.html). Each step is this same binary run as a child process with a command line the
// study prints first and writes to commands.sh, so every figure can be remade by hand.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "analysis/gnuplot.hpp"
#include "core/children.hpp"
#include "core/error.hpp"
#include "core/quote.hpp"
#include "core/stop.hpp"
#include "tools/commands.hpp"

namespace dpx::tools {

namespace {

namespace fs = std::filesystem;

// One run of the study: the dpx subcommand's words (without "dpx"), and what it writes.
struct Step {
  std::vector<std::string> words;
  std::string output;  // a bench folder or a collective CSV, relative to the study's folder
  bool drawn = true;   // false: what the step makes is an input of the next (a data set), not a result
};

struct Study {
  std::string_view name;
  std::string_view question;
};

const std::vector<Study>& studies() {
  static const std::vector<Study> all = {
      {"devices", "throughput, step phases and scaling efficiency against devices, one line per batch size, "
                  "weak and strong scaling; the best device count per batch size"},
      {"dp-vs-ddp", "the hand-written DataParallel (replicate, scatter, parallel_apply, gather) against DDP "
                    "(bucketed all-reduce overlapping backward) on the same models and devices"},
      {"frozen-backbone", "torchvision backbones as frozen feature extractors with the 4096-wide head on "
                          "Fashion-MNIST resized to 224 (3 channels): bytes per epoch, steps to a loss threshold"},
      {"accumulation", "synchronous DDP against synchronising every 4 steps, on a simulated slow network "
                       "(--net-sim 1gbit,50us)"},
      {"loading", "NEF's question on a made image folder: the time a step waits for its batch (decode and "
                  "augment) against its computation and communication, as loader workers, devices and batch sizes "
                  "vary"},
      {"collectives", "every all-reduce algorithm of the threads backend over message sizes, and the other "
                      "patterns (broadcast, all_gather, reduce_scatter, all_to_all), against the memcpy limit"},
  };
  return all;
}

std::string question_of(std::string_view name) {
  for (const Study& s : studies())
    if (s.name == name) return std::string(s.question);
  return "";
}

struct StudyFlags {
  std::string name;
  std::string out;
  bool quick = false;
  bool list = false;
  bool dry_run = false;
  int max_devices = 0;
  std::string gnuplot = "gnuplot";
};

// 1, 2, 4, ... up to k, and k itself.
std::string device_list(int k) {
  std::string s = "cpu:";
  for (int d = 1; d < k; d *= 2) s += std::to_string(d) + ",";
  return s + std::to_string(k);
}

std::vector<Step> steps_of(const StudyFlags& f, int k) {
  const std::string devices = device_list(k);
  // What every bench of a study shares: synthetic data unless said, no evaluation pass (the
  // studies time training), progress lines rarely.
  auto bench = [](std::string out, std::vector<std::string> words) {
    std::vector<std::string> w = {"bench"};
    w.insert(w.end(), words.begin(), words.end());
    w.insert(w.end(), {"--no-eval", "--log-interval", "30", "--out", out});
    return Step{w, out};
  };
  const bool q = f.quick;
  if (f.name == "devices") {
    return {bench("bench", {"--models", q ? "lenet5,squeezenet1_1" : "resnet18,resnet50,vgg16,densenet121,squeezenet1_1",
                            "--image-size", q ? "32" : "64", "--channels", "3", "--dataset", "synthetic",
                            "--batch-sizes", "16,32,64", "--devices", devices, "--scaling", "weak,strong",
                            "--steps", q ? "6" : "20", "--warmup", q ? "2" : "3", "--repeat", "3"})};
  }
  if (f.name == "dp-vs-ddp") {
    return {bench("bench", {"--models", q ? "lenet5,squeezenet1_1" : "resnet18,squeezenet1_1,alexnet",
                            "--image-size", q ? "32" : "64", "--channels", "3", "--dataset", "synthetic",
                            "--batch-sizes", "32,64", "--devices", devices, "--parallel", "dp,ddp", "--steps",
                            q ? "8" : "20", "--warmup", q ? "2" : "3", "--repeat", "3"})};
  }
  if (f.name == "frozen-backbone") {
    return {bench("bench", {"--models", q ? "squeezenet1_1,resnet18" : "alexnet,vgg16,resnet18,densenet121,squeezenet1_1",
                            "--head", "mlp4096", "--freeze-backbone", "--dataset", "fashion-mnist", "--channels", "3",
                            "--image-size", q ? "64" : "224", "--batch-sizes", q ? "16" : "32", "--devices", devices,
                            "--steps", q ? "16" : "200", "--warmup", "2", "--loss-threshold", q ? "2.2" : "0.5",
                            "--lr-schedule", "constant", "--lr", "0.01"})};
  }
  if (f.name == "accumulation") {
    return {bench("bench", {"--models", q ? "lenet5,squeezenet1_1" : "resnet18,squeezenet1_1", "--image-size",
                            q ? "32" : "64", "--channels", "3", "--dataset", "synthetic", "--batch-sizes", "32,64",
                            "--devices", devices, "--accumulate", "1,4", "--net-sim", "1gbit,50us", "--steps",
                            q ? "8" : "40", "--warmup", q ? "4" : "8", "--repeat", "3"})};
  }
  if (f.name == "loading") {
    // A JPEG folder (a few PNGs) big enough that no rank reads an image twice in the measured
    // epoch: steps x the largest batch x k ranks, over the classes.
    const int classes = q ? 4 : 10, steps = q ? 6 : 12, largest_batch = q ? 32 : 64;
    const int per_class = (steps * largest_batch * k + classes - 1) / classes;
    return {{{"data", "make-imagefolder", "data", "--classes", std::to_string(classes), "--per-class",
              std::to_string(per_class), "--size", q ? "200x150" : "500x375"},
             "data",
             false},
            bench("bench", {"--models", q ? "squeezenet1_1" : "resnet18,squeezenet1_1", "--dataset", "imagefolder",
                            "--data-dir", "data", "--image-size", q ? "64" : "128", "--batch-sizes",
                            q ? "16,32" : "32,64", "--devices", devices, "--workers", q ? "0,1,2" : "0,1,2,4",
                            "--steps", std::to_string(steps), "--warmup", "2", "--repeat", q ? "2" : "3"})};
  }
  if (f.name == "collectives") {
    const std::string ranks = std::to_string(std::max(k, 2));
    std::vector<Step> s;
    s.push_back({{"collective", "-t", "all_reduce", "--algo", "all", "--ranks", ranks, "-b", q ? "4K" : "1K", "-e",
                  q ? "4M" : "64M", "-f", q ? "4" : "2", "-n", q ? "5" : "20", "-w", q ? "1" : "5", "--csv",
                  "all_reduce.csv"},
                 "all_reduce.csv"});
    for (const char* t : {"broadcast", "all_gather", "reduce_scatter", "all_to_all"})
      s.push_back({{"collective", "-t", t, "--algo", "all", "--ranks", ranks, "-b", q ? "16K" : "1K", "-e",
                    q ? "1M" : "64M", "-f", q ? "8" : "2", "-n", q ? "5" : "20", "-w", q ? "1" : "5", "--csv",
                    std::string(t) + ".csv"},
                   std::string(t) + ".csv"});
    return s;
  }
  usage_fail("dpx study: no study named '", f.name, "' (dpx study --list names them)");
}

std::string shell_line(const std::vector<std::string>& words) {
  std::string line = "dpx";
  for (const std::string& w : words) line += " " + shell_quote(w);
  return line;
}

// Runs this binary with `words` in `dir`; returns its exit status (128 + N for signal N).
int run_dpx(const std::string& self, const std::string& dir, const std::vector<std::string>& words) {
  std::vector<std::string> argv_s = {"dpx"};
  argv_s.insert(argv_s.end(), words.begin(), words.end());
  std::vector<char*> argv;
  for (std::string& w : argv_s) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  if (pid < 0) fail("dpx study: cannot start a step: ", std::strerror(errno));
  if (pid == 0) {
    dpx::stop::unblock_signals_in_child();
    become_group_leader();  // a signal that ends the study ends this step with it (core/children.hpp)
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    ::execv(self.c_str(), argv.data());
    ::_exit(127);
  }
  const ChildProcess listed(pid);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    dpx::stop::wait_while_stopping();  // ECHILD: reaped by stop::now, which ends dpx
    if (errno != EINTR) fail("dpx study: waiting for a step: ", std::strerror(errno));
  }
  dpx::stop::wait_while_stopping();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

void run(StudyFlags& f) {
  if (f.list) {
    for (const Study& s : studies()) std::cout << s.name << ": " << s.question << "\n";
    std::cout << "(each with --quick: the same questions on small models and few steps, under 2 minutes on 2 cores)\n";
    return;
  }
  if (f.name.empty()) usage_fail("dpx study: name a study (dpx study --list)");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // 1024: the most thread ranks dpx collective takes (dpx bench stops earlier: 16 per hardware thread)
  if (f.max_devices < 0 || f.max_devices > 1024)
    usage_fail("--max-devices ", f.max_devices, ": give 1 to 1024 CPU ranks (0: every core, ", cores, " here)");
  const int k = f.max_devices > 0 ? f.max_devices : cores;
  const std::vector<Step> steps = steps_of(f, k);
  if (f.out.empty()) f.out = "study-" + f.name + (f.quick ? "-quick" : "");
  if (f.dry_run) {
    for (const Step& s : steps) std::cout << shell_line(s.words) << "\n";
    return;
  }
  std::error_code ec;
  if (fs::exists(f.out, ec) && !(fs::is_directory(f.out, ec) && fs::is_empty(f.out, ec)))
    usage_fail("--out ", f.out, ": exists and is not an empty folder; a study writes a new one (choose another "
               "--out, or remove it)");
  fs::create_directories(f.out, ec);
  if (ec) usage_fail("--out ", f.out, ": cannot create it: ", ec.message());
  const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) fail("dpx study: cannot find this program (/proc/self/exe): ", ec.message());

  // The commands, written before they run: the study's record and a script that remakes it.
  {
    std::ofstream sh(fs::path(f.out) / "commands.sh");
    // The command line is a comment: shown with its control characters escaped, so that none
    // of them ends the comment (a newline in --out would start a command of its own).
    sh << "#!/bin/sh\n# " << printable(command_line())
       << "\n# Run in this folder to remake the study (dpx on PATH).\nset -e\n";
    for (const Step& s : steps) sh << shell_line(s.words) << "\n";
  }
  std::vector<std::string> outputs;
  for (size_t i = 0; i < steps.size(); ++i) {
    std::cout << "== dpx study " << f.name << ": step " << i + 1 << " of " << steps.size() << ": "
              << shell_line(steps[i].words) << std::endl;
    const int code = run_dpx(self, f.out, steps[i].words);
    if (code != 0)
      fail("dpx study ", f.name, ": step ", i + 1, " failed (exit ", code, "): ", shell_line(steps[i].words),
           " (in ", f.out, "; its message is above)");
    if (steps[i].drawn) outputs.push_back(steps[i].output);
  }
  // Figures and the page, when gnuplot is here (the data stays useful without them).
  if (analysis::find_executable(f.gnuplot).empty()) {
    std::cout << "dpx study: no gnuplot (" << f.gnuplot << "): no figures or report; install gnuplot-nox, then run "
              << "in " << f.out << ": dpx plot " << outputs.front() << " ... --out figures\n";
    return;
  }
  std::vector<std::string> plot = {"plot"}, report = {"report"};
  plot.insert(plot.end(), outputs.begin(), outputs.end());
  plot.insert(plot.end(), {"--out", "figures", "--gnuplot", f.gnuplot});
  report.insert(report.end(), outputs.begin(), outputs.end());
  report.insert(report.end(), {"--out", "report.html", "--title", "dpx study " + f.name + (f.quick ? " --quick" : ""),
                               "--question", question_of(f.name), "--gnuplot", f.gnuplot});
  for (const auto& [what, words] : {std::pair{"figures", plot}, std::pair{"report", report}}) {
    std::cout << "== dpx study " << f.name << ": " << what << ": " << shell_line(words) << std::endl;
    {
      std::ofstream sh(fs::path(f.out) / "commands.sh", std::ios::app);
      sh << shell_line(words) << "\n";
    }
    if (const int code = run_dpx(self, f.out, words); code != 0)
      fail("dpx study ", f.name, ": the ", what, " failed (exit ", code, "): ", shell_line(words));
  }
  std::cout << "dpx study " << f.name << ": done: " << (fs::path(f.out) / "report.html").string() << " holds the "
            << "tables and figures; " << f.out << "/commands.sh remakes it\n";
}

}  // namespace

void add_study_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("study",
                                 "run a named study (devices, dp-vs-ddp, frozen-backbone, accumulation, loading, collectives) "
                                 "on this machine: its sweeps, then its figures and report");
  auto f = std::make_shared<StudyFlags>();
  cmd->add_option("name", f->name, "the study (dpx study --list)");
  cmd->add_flag("--quick", f->quick, "small models and few steps: the same questions in under 2 minutes on 2 cores");
  cmd->add_option("-o,--out", f->out, "a new folder for the study (default: study-NAME, or study-NAME-quick)");
  cmd->add_option("--max-devices", f->max_devices, "most CPU ranks to sweep to (0: every core)")->capture_default_str();
  cmd->add_flag("--dry-run", f->dry_run, "print the commands the study would run, then stop");
  cmd->add_flag("--list", f->list, "name every study and its question, then stop");
  cmd->add_option("--gnuplot", f->gnuplot, "the gnuplot to draw with (a name on PATH or a path)")->capture_default_str();
  cmd->callback([f] { run(*f); });
}

}  // namespace dpx::tools
