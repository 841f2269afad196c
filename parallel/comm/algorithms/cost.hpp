// The alpha-beta-gamma cost model of dpx's collective algorithms (Hockney's model as Thakur,
// Rabenseifner & Gropp 2005 use it): one call takes
//     T = a * alpha + b * beta + c * gamma
// alpha: the cost of one message (latency), beta: of one byte sent, gamma: of one byte reduced.
// Each algorithm's file counts a, b and c beside each schedule (its Step in schedule.hpp), on the
// critical path: a the point-to-point steps, b the bytes of each step's larger half summed over
// the steps (a step sends and receives at once), c the bytes reduced; dpx fit and dpx predict read
// them through analysis/cost_model.hpp, and tests/analysis/test_cost_model.cpp holds them to the
// counts the transport keeps. Notation of the formulas: n bytes, p ranks, L = ceil(log2 p),
// q = 2^floor(log2 p) the ranks that take part in recursive halving/doubling and l = log2 q, e = 1
// when p is not a power of two, G nodes of g = ceil(p/G) ranks for hier (Lg, LG their ceil(log2)).
#pragma once
#include <algorithm>

namespace dpx::parallel {

struct CostTerms {
  double messages = 0;       // a: multiplies alpha
  double bytes = 0;          // b: multiplies beta
  double reduced_bytes = 0;  // c: multiplies gamma
  double seconds(double alpha, double beta, double gamma) const {
    return messages * alpha + bytes * beta + reduced_bytes * gamma;
  }
  // Adds a phase of `m` messages of `b` bytes in all, `c` of them reduced.
  CostTerms& step(double m, double b, double c = 0) {
    messages += m;
    bytes += b;
    reduced_bytes += c;
    return *this;
  }
};

// One call as `dpx collective` records it: the size column (nccl-tests' bytes: the larger of the
// send and receive buffers), its element count (per rank for all_gather/reduce_scatter, as in
// the count column), the ranks and, for hier, the nodes (ranks split evenly over them).
struct CallShape {
  double bytes = 0;
  double count = 0;  // 0: bytes / 4
  int ranks = 1;
  int nodes = 1;
};

// The quantities the formulas are written in, for a shape of p >= 2 ranks.
struct CostVars {
  explicit CostVars(const CallShape& s)
      : p(std::max(2, s.ranks)), n(s.bytes), P(p), L(ceil_log2(p)), l(floor_log2(p)), q(1 << floor_log2(p)),
        e(p == (1 << floor_log2(p)) ? 0 : 1), G(std::clamp(s.nodes, 1, p)), g((p + G - 1) / G), Lg(ceil_log2(g)),
        LG(ceil_log2(G)), Gd(G), ring((P - 1) / P * n), halving((q - 1) / q * n) {}
  static int ceil_log2(int x) {
    int k = 0;
    while ((1 << k) < x) ++k;
    return k;
  }
  static int floor_log2(int x) {
    int k = 0;
    while ((2 << k) <= x) ++k;
    return k;
  }
  const int p;
  const double n, P, L, l, q, e;
  const int G, g;
  const double Lg, LG, Gd;
  const double ring, halving;  // (p-1)/p n and (q-1)/q n
};

}  // namespace dpx::parallel
