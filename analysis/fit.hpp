// `dpx fit`: the latency-bandwidth models of collectives fitted to `dpx collective --csv`
// measurements, and the studies' communication-overhead models fitted to `dpx bench` results.
//
// Collectives: T = a alpha + b beta + c gamma with a, b, c the algorithm's cost terms
// (cost_model.hpp), by least squares weighted by 1/T (every size counts alike, as relative
// error), coefficients kept >= 0. One fit per (collective, algorithm, backend, placement) over every size
// and rank count in the files; the library's own collectives (--algo mpi) get T = alpha + n beta
// per rank count, their algorithm being unknown. In a reduction every byte moved is also reduced
// in a fixed proportion, so beta and gamma cannot be told apart from reductions alone: gamma is
// fitted with beta taken from a collective that does not reduce on the same backend (sendrecv
// first, the cleanest alpha-beta measurement), and without one beta holds both (has_gamma false).
//
// Overheads: communication time per step against trainable parameters P, linear (c0 + c1 P) and
// quadratic (c0 + c1 P + c2 P^2), per parallel mode, algorithm, rank count, bucket size and
// accumulation.
//
// A fit is `ok` only with enough points to check it and R^2 >= kMinR2; otherwise `reason` says
// what is missing and no numbers are printed.
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

namespace dpx::analysis {

inline constexpr double kMinR2 = 0.9;

// Least squares of y against the columns of x (rows: points), weighted by w, coefficients >= 0
// (a coefficient that would be negative is held at 0 and the rest refitted). Empty `coef` when
// the columns cannot be told apart (too few distinct points).
struct LeastSquares {
  std::vector<double> coef;
  std::vector<bool> at_zero;     // held at 0 by the bound
  double r2 = 0;                 // 1 - SS_res / SS_tot on y itself
  double max_rel_residual = 0;   // max |y - fit| / y
};
LeastSquares fit_least_squares(const std::vector<std::vector<double>>& x, const std::vector<double>& y,
                               const std::vector<double>& w);

struct CollectivePoint {
  std::string collective, algo, backend;
  bool in_place = false;
  int ranks = 1, nodes = 1;
  double bytes = 0, count = 0, time_s = 0;
  bool memory = false;  // limit_source memcpy: no network, simulated or real, between its ranks
};

struct CollectiveFit {
  std::string collective, algo, backend;
  bool in_place = false;         // buffers in place (what DDP does) or not: fitted apart, times differ
  int ranks = 0;                 // 0: one fit over every rank count; else the library's, for this count
  bool ok = false;
  std::string reason;            // why not ok
  double alpha_s = 0, beta_s_per_byte = 0, gamma_s_per_byte = 0;
  bool has_gamma = false;        // a reduction whose gamma was told apart from beta
  std::string beta_from;         // the fit beta was taken from ("" when fitted here)
  std::string note;              // e.g. a coefficient held at 0
  double r2 = 0, max_rel_residual = 0;
  int points = 0, sizes = 0;
  double bytes_min = 0, bytes_max = 0;
  int ranks_min = 0, ranks_max = 0;
  bool memory_only = false;      // every point moved its bytes through one machine's memory (limit memcpy)
  std::string formula;
  std::string name() const;      // "all_reduce ring (threads, in place)"
};

struct OverheadPoint {
  std::string model, parallel, algo, devices;
  int ranks = 1;
  double bucket_mb = 0;  // DDP's bucket size and --accumulate: runs that differ in them are fitted apart
  int accumulate = 1;
  double params = 0, comm_s = 0, exposed_s = 0;
};

struct OverheadFit {
  std::string parallel, algo;
  int ranks = 1;
  double bucket_mb = 0;
  int accumulate = 1;
  std::string target;            // "comm_total" or "comm_exposed"
  std::string kind;              // "linear" or "quadratic"
  bool ok = false;
  std::string reason;
  std::vector<double> coef;      // c0 (s), c1 (s per parameter), c2 (s per parameter^2)
  std::string note;              // coefficients held at 0 by the bound
  double r2 = 0, max_rel_residual = 0;
  int points = 0, models = 0;
  double params_min = 0, params_max = 0;
};

struct FitResult {
  std::vector<std::string> sources;
  std::vector<CollectiveFit> collectives;
  std::vector<OverheadFit> overheads;
  int skipped_wrong = 0;         // collective rows with wrong values, left out
};

// Reads every file (each a collective CSV or a bench results.csv, told apart by its header) and
// fits. Throws dpx::UsageError for a file that is neither, is empty or holds bad values.
FitResult fit_files(const std::vector<std::string>& paths);
std::vector<CollectiveFit> fit_collectives(const std::vector<CollectivePoint>& points);
std::vector<OverheadFit> fit_overheads(const std::vector<OverheadPoint>& points);

// "10 GB/s" from seconds per byte ("unbounded" for 0); "5 us", "1.2 ms", "3 s" from seconds;
// "1 KiB", "1.5 MiB" from bytes.
std::string size_text(double bytes);
std::string rate_text(double s_per_byte);
std::string time_text(double s);

void print_fits(std::ostream& os, const FitResult& r);
std::string fit_json(const FitResult& r);
// The collective fits of a file that fit_json wrote; throws dpx::UsageError naming `flag` otherwise.
FitResult read_fit_json(const std::string& path, const char* flag);
// Whether `path` holds a file fit_json wrote (so that writing over it loses nothing of the user's).
bool is_fit_json(const std::string& path);

}  // namespace dpx::analysis
