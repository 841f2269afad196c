// The alpha-beta-gamma cost model of dpx's collective algorithms (Hockney's model as Thakur,
// Rabenseifner & Gropp 2005 use it): one call takes
//     T = a * alpha + b * beta + c * gamma
// alpha: the cost of one message (latency), beta: of one byte sent, gamma: of one byte reduced.
// a, b and c are counted from each schedule of parallel/algorithms*.cpp, on its critical path:
// a the point-to-point steps, b the bytes of each step's larger half summed over the steps (a
// step sends and receives at once), c the bytes reduced. These counts hold for the schedules as
// written; tests/analysis/test_cost_model.cpp checks them against the counts the transport
// keeps on thread ranks. The vendor path (--algo mpi) picks its own algorithm per size, so no
// formula describes it: it has none here (the fit then takes T = alpha + n * beta per rank count).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace dpx::analysis {

struct CostTerms {
  double messages = 0;       // a: multiplies alpha
  double bytes = 0;          // b: multiplies beta
  double reduced_bytes = 0;  // c: multiplies gamma
  double seconds(double alpha, double beta, double gamma) const {
    return messages * alpha + bytes * beta + reduced_bytes * gamma;
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

// The terms of `collective` run with dpx's `algo`; empty when dpx has no such schedule (the
// names are those of `dpx collective`'s CSV: all_reduce, ..., and ring, tree, naive, rhd, hier).
std::optional<CostTerms> cost_terms(std::string_view collective, std::string_view algo, const CallShape& shape);
// The formula in words, for printing: "2(p-1) a + 2(p-1)/p n b + (p-1)/p n g".
std::string cost_formula(std::string_view collective, std::string_view algo);
// Whether the collective reduces (has a gamma term).
bool reduces(std::string_view collective);

}  // namespace dpx::analysis
