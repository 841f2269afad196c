// The cost terms of every (collective, algorithm) of dpx's own, from the algorithm registry (see
// cost_model.hpp).
#include "analysis/cost_model.hpp"

#include "parallel/comm/algorithms/schedule.hpp"

namespace dpx::analysis {

namespace {

// dpx's step of `collective` under `algo`, or null where it has none (or the names are not dpx's).
const parallel::impl::Step* step_of(std::string_view collective, std::string_view algo) {
  for (parallel::Collective c : parallel::kBenchCollectives) {
    if (parallel::collective_name(c) != collective) continue;
    for (parallel::Algorithm a : parallel::kAlgorithms) {
      if (parallel::algorithm_name(a) != algo) continue;
      const parallel::impl::Step* step = parallel::impl::step_for(*parallel::algorithm_info(a).schedules, c);
      return step && step->run ? step : nullptr;
    }
  }
  return nullptr;
}

}  // namespace

bool reduces(std::string_view c) { return c == "all_reduce" || c == "reduce" || c == "reduce_scatter"; }

std::optional<CostTerms> cost_terms(std::string_view collective, std::string_view algo, const CallShape& shape) {
  const parallel::impl::Step* step = step_of(collective, algo);
  if (!step) return std::nullopt;
  if (shape.ranks <= 1) return CostTerms{};  // nothing moves
  return step->cost(shape);
}

std::string cost_formula(std::string_view collective, std::string_view algo) {
  const parallel::impl::Step* step = step_of(collective, algo);
  return step ? step->formula : "a + n b (per rank count: the library chooses its own algorithm)";
}

}  // namespace dpx::analysis
