// The alpha-beta-gamma cost model of dpx's collective algorithms (Hockney's model as Thakur,
// Rabenseifner & Gropp 2005 use it): T = a * alpha + b * beta + c * gamma per call, the terms
// counted by each algorithm's own file beside its schedules (parallel/comm/algorithms/cost.hpp
// says how) and read here through the algorithm registry by the names of `dpx collective`'s CSV.
// The vendor path (--algo mpi) picks its own algorithm per size, so no formula describes it: it
// has none here (the fit then takes T = alpha + n * beta per rank count).
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "parallel/comm/algorithms/cost.hpp"

namespace dpx::analysis {

using parallel::CallShape;
using parallel::CostTerms;

// The terms of `collective` run with dpx's `algo`; empty when dpx has no such schedule (the
// names are those of `dpx collective`'s CSV: all_reduce, ..., and ring, tree, naive, rhd, hier).
std::optional<CostTerms> cost_terms(std::string_view collective, std::string_view algo, const CallShape& shape);
// The formula in words, for printing: "2(p-1) a + 2(p-1)/p n b + (p-1)/p n g".
std::string cost_formula(std::string_view collective, std::string_view algo);
// Whether the collective reduces (has a gamma term).
bool reduces(std::string_view collective);

}  // namespace dpx::analysis
