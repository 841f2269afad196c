// `dpx predict`'s step model (see predict.hpp): one replica's measured computation plus DDP's
// bucketed all-reduce over a network of alpha, beta and gamma, at each rank count.
#include "analysis/predict.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "analysis/cost_model.hpp"
#include "core/error.hpp"

namespace dpx::analysis {

namespace {

constexpr int kMaxRanks = 1 << 20;

// The computation on the line through two measured batches. More images never cost less: a
// smaller batch measured slower than a larger one is the machine's noise (a busy core), so the
// slope is at least 0 and beyond the larger batch the time stays at its measurement.
double line(double x0, double y0, double x1, double y1, double x) {
  if (x1 == x0) return y0;
  const double slope = std::max(0.0, (y1 - y0) / (x1 - x0));
  return std::max(0.0, y1 + slope * (x - x1));
}

int parse_int(const std::string& s, const char* flag) {
  size_t pos = 0;
  long v = 0;
  try {
    v = std::stol(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != s.size() || v < 1 || v > kMaxRanks)
    usage_fail(flag, ": '", excerpt(s), "' is not a number of ranks from 1 to ", kMaxRanks);
  return static_cast<int>(v);
}

}  // namespace

double all_reduce_s(const Network& net, double bytes, int ranks) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double count = bytes / 4;
  if (net.algo == "hier") {  // a tree inside each node on its own links, a ring of the node leaders
    const int g = std::clamp(net.ranks_per_node, 1, ranks), nodes = (ranks + g - 1) / g;
    const CostTerms in = *cost_terms("all_reduce", "tree", CallShape{bytes, count, g, 1});
    const CostTerms across = *cost_terms("all_reduce", "ring", CallShape{bytes, count, nodes, 1});
    return in.seconds(net.intra_alpha_s, net.intra_beta_s_per_byte, net.gamma_s_per_byte) +
           across.seconds(net.alpha_s, net.beta_s_per_byte, net.gamma_s_per_byte);
  }
  const auto terms = cost_terms("all_reduce", net.algo, CallShape{bytes, count, ranks, 1});
  if (!terms) usage_fail("--algo ", net.algo, ": dpx predicts its own all-reduce algorithms: ring, tree, naive, rhd, hier");
  return terms->seconds(net.alpha_s, net.beta_s_per_byte, net.gamma_s_per_byte);
}

Phases ComputeModel::at(double b) const {
  Phases p;
  p.load = line(batch_lo, lo.load, batch_hi, hi.load, b);
  p.forward = line(batch_lo, lo.forward, batch_hi, hi.forward, b);
  p.backward = line(batch_lo, lo.backward, batch_hi, hi.backward, b);
  p.optimizer = line(batch_lo, lo.optimizer, batch_hi, hi.optimizer, b);
  return p;
}

double exposed_comm_s(const std::vector<BucketPlan>& buckets, const Network& net, int ranks, double backward_s,
                      bool overlap, double* total_comm_s) {
  double end = 0, total = 0;
  for (const BucketPlan& b : buckets) {
    const double ready = overlap ? b.ready_fraction * backward_s : backward_s;
    const double t = all_reduce_s(net, b.bytes, ranks);
    end = std::max(end, ready) + t;
    total += t;
  }
  if (total_comm_s) *total_comm_s = total;
  return buckets.empty() ? 0 : std::max(0.0, end - backward_s);
}

std::vector<Prediction> predict(const ComputeModel& compute, const std::vector<BucketPlan>& buckets,
                                const Network& net, const PredictOptions& o, const std::vector<int64_t>& batches,
                                const std::vector<int>& ranks) {
  std::vector<Prediction> out;
  for (int64_t batch : batches) {
    // The baseline: one rank with the whole batch, computed even when 1 is not in the list.
    const double scale = o.compute_scale > 0 ? o.compute_scale : 1;
    const double one_rank_s = compute.at(static_cast<double>(batch)).total() / scale;
    const double base_ips = one_rank_s > 0 ? static_cast<double>(batch) / one_rank_s : 0;
    for (int k : ranks) {
      Prediction p;
      p.batch = batch;
      p.ranks = k;
      const bool strong = o.scaling == "strong";
      if (strong && batch % k != 0) {
        p.possible = false;
        p.why = k > batch ? "fewer images than ranks" : "the batch does not split evenly";
        out.push_back(p);
        continue;
      }
      p.rank_batch = strong ? static_cast<double>(batch / k) : static_cast<double>(batch);
      Phases c = compute.at(p.rank_batch);
      c.load /= scale, c.forward /= scale, c.backward /= scale, c.optimizer /= scale;
      p.compute = c;
      p.exposed_s = exposed_comm_s(buckets, net, k, c.backward, o.overlap, &p.comm_s);
      p.step_s = c.total() + p.exposed_s;
      const double global = strong ? static_cast<double>(batch) : static_cast<double>(batch) * k;
      p.images_per_s = p.step_s > 0 ? global / p.step_s : 0;
      p.speedup = base_ips > 0 ? p.images_per_s / base_ips : 0;
      p.efficiency = p.speedup / k;
      out.push_back(p);
    }
  }
  return out;
}

std::vector<int> parse_rank_list(const std::string& text, const char* flag) {
  std::vector<int> out;
  const size_t dots = text.find("..");
  if (dots != std::string::npos) {
    const int lo = parse_int(text.substr(0, dots), flag), hi = parse_int(text.substr(dots + 2), flag);
    if (lo > hi) usage_fail(flag, ": '", text, "' runs backwards (write LOW..HIGH, e.g. 1..1024)");
    out.push_back(lo);
    for (int k = 1; k <= hi; k *= 2)
      if (k > lo) out.push_back(k);
    out.push_back(hi);
  } else {
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const int k = parse_int(item, flag);
      if (std::find(out.begin(), out.end(), k) != out.end())
        usage_fail(flag, ": ", k, " is given twice in '", text, "': list each rank count once");
      out.push_back(k);
    }
    if (out.empty()) usage_fail(flag, ": give rank counts, e.g. 1..1024 or 1,2,4,8");
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace dpx::analysis
