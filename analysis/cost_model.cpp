// The cost terms of every (collective, algorithm) of dpx's own (see cost_model.hpp). Notation:
// n bytes, p ranks, L = ceil(log2 p), q = 2^floor(log2 p) the ranks that take part in recursive
// halving/doubling and l = log2 q, e = 1 when p is not a power of two (the extra ranks fold
// their data into a partner first and get the result back last), G nodes of g = ceil(p/G) ranks
// for hier (Lg = ceil(log2 g), LG = ceil(log2 G)).
#include "analysis/cost_model.hpp"

#include <algorithm>
#include <cmath>

namespace dpx::analysis {

namespace {

int ceil_log2(int p) {
  int l = 0;
  while ((1 << l) < p) ++l;
  return l;
}

int floor_log2(int p) {
  int l = 0;
  while ((2 << l) <= p) ++l;
  return l;
}

// parallel/comm/algorithms/ring.cpp's pipelined broadcast: chunks of about 1 MiB, at most 64, at least 1.
double broadcast_chunks(const CallShape& s) {
  const double count = s.count > 0 ? s.count : s.bytes / 4;
  return std::max(1.0, std::min({count, 64.0, std::max(1.0, std::floor(s.bytes / (1 << 20)))}));
}

struct Terms {
  CostTerms t;
  Terms& step(double messages, double bytes, double reduced = 0) {
    t.messages += messages;
    t.bytes += bytes;
    t.reduced_bytes += reduced;
    return *this;
  }
};

// Recursive doubling all-gather (and halving reduce-scatter) over rank groups when p is not a
// power of two: participants 0 .. rem-1 stand for two ranks, the others for one, so the busiest
// participant's ranges grow by 2^k + min(2^k, rem) blocks at step k. In blocks of n / p.
double group_doubling_blocks(int p) {
  const int q = 1 << floor_log2(p), rem = p - q;
  double blocks = 0;
  for (int k = 1; k < q; k *= 2) blocks += k + std::min(k, rem);
  return blocks;
}

}  // namespace

bool reduces(std::string_view c) { return c == "all_reduce" || c == "reduce" || c == "reduce_scatter"; }

std::optional<CostTerms> cost_terms(std::string_view c, std::string_view algo, const CallShape& s) {
  const int p = std::max(1, s.ranks);
  const double n = s.bytes, P = p, L = ceil_log2(p), l = floor_log2(p), q = 1 << floor_log2(p);
  const double e = p == (1 << floor_log2(p)) ? 0 : 1;
  const int G = std::clamp(s.nodes, 1, p), g = (p + G - 1) / G;
  const double Lg = ceil_log2(g), LG = ceil_log2(G), Gd = G;
  const double ring = (P - 1) / P * n, halving = (q - 1) / q * n;
  Terms x;
  if (p == 1) return x.t;  // nothing moves
  if (c == "all_reduce") {
    if (algo == "ring") return x.step(2 * (P - 1), 2 * ring, ring).t;
    if (algo == "tree") return x.step(2 * L, 2 * L * n, L * n).t;
    if (algo == "naive") return x.step(2 * (P - 1), 2 * (P - 1) * n, (P - 1) * n).t;
    if (algo == "rhd") return x.step(2 * l, 2 * halving, halving).step(2 * e, 2 * e * n, e * n).t;
    if (algo == "hier")  // tree to the node leaders, ring among them, tree back
      return x.step(2 * Lg, 2 * Lg * n, Lg * n).step(2 * (Gd - 1), 2 * (Gd - 1) / Gd * n, (Gd - 1) / Gd * n).t;
  } else if (c == "broadcast") {
    if (algo == "ring") {  // a chain of C chunks: p - 2 + C steps of n / C
      const double C = broadcast_chunks(s);
      return x.step(P - 2 + C, (P - 2 + C) * n / C).t;
    }
    if (algo == "tree") return x.step(L, L * n).t;
    if (algo == "naive") return x.step(P - 1, (P - 1) * n).t;
    if (algo == "rhd") return x.step(2 * l, 2 * halving).step(e, e * n).t;  // scatter + all-gather
    if (algo == "hier") return x.step(LG + Lg, (LG + Lg) * n).t;
  } else if (c == "reduce") {
    if (algo == "ring") return x.step(2 * (P - 1), 2 * ring, ring).t;  // reduce-scatter + gather
    if (algo == "tree") return x.step(L, L * n, L * n).t;
    if (algo == "naive") return x.step(P - 1, (P - 1) * n, (P - 1) * n).t;
    if (algo == "rhd") return x.step(2 * l, 2 * halving, halving).step(e, e * n, e * n).t;
    if (algo == "hier") return x.step(Lg + LG, (Lg + LG) * n, (Lg + LG) * n).t;
  } else if (c == "all_gather") {  // n: the gathered buffer
    if (algo == "ring") return x.step(P - 1, ring).t;
    if (algo == "tree") return x.step(2 * L, ring + L * n).t;  // gather to rank 0, then broadcast
    if (algo == "naive") return x.step(2 * (P - 1), ring + (P - 1) * n).t;
    if (algo == "rhd") return x.step(l, group_doubling_blocks(p) * n / P).step(2 * e, e * (n / P + n)).t;
    if (algo == "hier")  // members to their leader one by one, leaders' ring block by block, tree back
      return x.step(g - 1 + (Gd - 1) * g, ring).step(Lg, Lg * n).t;
  } else if (c == "reduce_scatter") {  // n: the input buffer
    if (algo == "ring") return x.step(P - 1, ring, ring).t;
    if (algo == "tree") return x.step(2 * L, L * n + ring, L * n).t;  // reduce to rank 0, then scatter
    if (algo == "naive") return x.step(2 * (P - 1), (P - 1) * n + ring, (P - 1) * n).t;
    if (algo == "rhd") {
      const double halving_bytes = group_doubling_blocks(p) * n / P;
      return x.step(l, halving_bytes, halving_bytes).step(2 * e, e * (n + n / P), e * n).t;
    }
    if (algo == "hier")  // tree to the leaders, leaders' ring block by block, leader to members
      return x.step(Lg, Lg * n, Lg * n).step((Gd - 1) * g, (Gd - 1) / Gd * n, (Gd - 1) / Gd * n).step(g - 1, (g - 1) / P * n).t;
  } else if (c == "sendrecv") {  // one exchange with each neighbour at once
    if (algo == "ring") return x.step(1, n).t;
  } else if (c == "all_to_all") {  // pairwise exchange: p - 1 steps of one block
    if (algo == "ring") return x.step(P - 1, ring).t;
  } else if (c == "gather" || c == "scatter") {  // n: the root's buffer
    if (algo == "naive") return x.step(P - 1, ring).t;
    if (algo == "tree" || algo == "rhd") return x.step(L, ring).t;  // rhd: l steps + the extra's block
  }
  return std::nullopt;
}

std::string cost_formula(std::string_view c, std::string_view algo) {
  // Written as the terms above are; a = alpha, b = beta, g = gamma.
  struct Row {
    std::string_view coll, algo, text;
  };
  static constexpr Row kRows[] = {
      {"all_reduce", "ring", "2(p-1) a + 2(p-1)/p n b + (p-1)/p n g"},
      {"all_reduce", "tree", "2L a + 2L n b + L n g"},
      {"all_reduce", "naive", "2(p-1) a + 2(p-1) n b + (p-1) n g"},
      {"all_reduce", "rhd", "2(l+e) a + 2((q-1)/q + e) n b + ((q-1)/q + e) n g"},
      {"all_reduce", "hier", "2(Lg+G-1) a + 2(Lg + (G-1)/G) n b + (Lg + (G-1)/G) n g"},
      {"broadcast", "ring", "(p-2+C) a + (p-2+C)/C n b"},
      {"broadcast", "tree", "L a + L n b"},
      {"broadcast", "naive", "(p-1) a + (p-1) n b"},
      {"broadcast", "rhd", "(2l+e) a + (2(q-1)/q + e) n b"},
      {"broadcast", "hier", "(LG+Lg) a + (LG+Lg) n b"},
      {"reduce", "ring", "2(p-1) a + 2(p-1)/p n b + (p-1)/p n g"},
      {"reduce", "tree", "L a + L n b + L n g"},
      {"reduce", "naive", "(p-1) a + (p-1) n b + (p-1) n g"},
      {"reduce", "rhd", "(2l+e) a + (2(q-1)/q + e) n b + ((q-1)/q + e) n g"},
      {"reduce", "hier", "(Lg+LG) a + (Lg+LG) n b + (Lg+LG) n g"},
      {"all_gather", "ring", "(p-1) a + (p-1)/p n b"},
      {"all_gather", "tree", "2L a + ((p-1)/p + L) n b"},
      {"all_gather", "naive", "2(p-1) a + ((p-1)/p + p-1) n b"},
      {"all_gather", "rhd", "(l+2e) a + (D/p + e(1/p + 1)) n b, D = sum over k<l of 2^k + min(2^k, p-q)"},
      {"all_gather", "hier", "(g-1 + (G-1)g + Lg) a + ((p-1)/p + Lg) n b"},
      {"reduce_scatter", "ring", "(p-1) a + (p-1)/p n b + (p-1)/p n g"},
      {"reduce_scatter", "tree", "2L a + (L + (p-1)/p) n b + L n g"},
      {"reduce_scatter", "naive", "2(p-1) a + (p-1 + (p-1)/p) n b + (p-1) n g"},
      {"reduce_scatter", "rhd", "(l+2e) a + (D/p + e(1 + 1/p)) n b + (D/p + e) n g, D as all_gather's"},
      {"reduce_scatter", "hier", "(Lg + (G-1)g + g-1) a + (Lg + (p-1)/p) n b + (Lg + (G-1)/G) n g"},
      {"sendrecv", "ring", "a + n b"},
      {"all_to_all", "ring", "(p-1) a + (p-1)/p n b"},
      {"gather", "naive", "(p-1) a + (p-1)/p n b"},
      {"gather", "tree", "L a + (p-1)/p n b"},
      {"gather", "rhd", "L a + (p-1)/p n b"},
      {"scatter", "naive", "(p-1) a + (p-1)/p n b"},
      {"scatter", "tree", "L a + (p-1)/p n b"},
      {"scatter", "rhd", "L a + (p-1)/p n b"},
  };
  for (const Row& r : kRows)
    if (r.coll == c && r.algo == algo) return std::string(r.text);
  return "a + n b (per rank count: the library chooses its own algorithm)";
}

}  // namespace dpx::analysis
