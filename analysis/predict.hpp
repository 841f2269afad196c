// `dpx predict`'s model of a data-parallel training step at k ranks: the measured computation of
// one replica at its per-rank batch, plus DDP's bucketed all-reduce of the gradients over a
// network given as alpha-beta-gamma (a `dpx fit`, or a link's latency and rate). Buckets are
// all-reduced one after another, each as soon as its gradients are ready during backward (the
// moments measured on this machine) and the previous bucket is done; what runs past the end of
// backward is the exposed communication:
//     step(k) = load + forward + backward + exposed(k) + optimizer
//     exposed(k) = max(0, end of the last bucket's all-reduce - end of backward)
// The computation is assumed to be the same on every rank, as on identical devices, and the
// all-reduces not to slow it down (on a CPU they share its cores: see docs/predicting.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dpx::analysis {

struct Network {
  double alpha_s = 0, beta_s_per_byte = 0, gamma_s_per_byte = 0;  // between nodes (all ranks without hier)
  std::string algo = "ring";     // dpx's all-reduce: ring, tree, naive, rhd, hier
  int ranks_per_node = 1;        // hier: tree inside each node of this many ranks, ring across nodes
  double intra_alpha_s = 0, intra_beta_s_per_byte = 0;  // hier: the links inside a node
  std::string source;            // where the numbers came from, for printing
  double fit_bytes_min = 0, fit_bytes_max = 0;  // the sizes the fit was valid for (0: not from a fit)
};

// One all-reduce of `bytes` over `ranks` ranks on `net`.
double all_reduce_s(const Network& net, double bytes, int ranks);

// One replica's phases (seconds per step).
struct Phases {
  double load = 0, forward = 0, backward = 0, optimizer = 0;
  double total() const { return load + forward + backward + optimizer; }
};

// The phases as a function of the per-rank batch: measured at one or two batches, a straight
// line through them (per phase) elsewhere.
struct ComputeModel {
  double batch_lo = 0, batch_hi = 0;
  Phases lo, hi;
  Phases at(double batch) const;
};

struct BucketPlan {
  double bytes = 0;
  double ready_fraction = 1;  // of backward
};

struct PredictOptions {
  std::string scaling = "strong";  // strong: the global batch is split over k; weak: each rank has it
  bool overlap = true;             // false: every bucket after backward (--no-overlap)
  double compute_scale = 1;        // computation this many times faster than measured (another device)
};

struct Prediction {
  int64_t batch = 0;             // as given: global (strong) or per rank (weak)
  int ranks = 1;
  double rank_batch = 0;
  bool possible = true;
  std::string why;               // when not possible
  Phases compute;
  double comm_s = 0, exposed_s = 0, step_s = 0, images_per_s = 0, speedup = 0, efficiency = 0;
};

// Every (batch, ranks) pair, batches outer. Speedup and efficiency are against one rank of the
// same batch, as dpx bench reports them.
std::vector<Prediction> predict(const ComputeModel& compute, const std::vector<BucketPlan>& buckets,
                                const Network& net, const PredictOptions& options,
                                const std::vector<int64_t>& batches, const std::vector<int>& ranks);

// The exposed communication of one step: buckets all-reduced in order, each once ready and once
// the one before is done (or all after backward without overlap).
double exposed_comm_s(const std::vector<BucketPlan>& buckets, const Network& net, int ranks, double backward_s,
                      bool overlap, double* total_comm_s = nullptr);

// "1..1024" (powers of two from 1 to 1024, and the ends), "1,2,3,8", or "64": sorted, unique.
// Throws dpx::UsageError naming `flag`.
std::vector<int> parse_rank_list(const std::string& text, const char* flag);

}  // namespace dpx::analysis
