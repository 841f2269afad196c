// The thread's capture scope and its labels (see capture.hpp).
#include "core/capture.hpp"

#include <optional>
#include <vector>

namespace dpx::capture {

namespace {

struct State {
  std::optional<std::string> purpose;  // set while a Scope lives
  std::vector<const char*> where;      // outermost first
};

State& state() {
  thread_local State s;
  return s;
}

}  // namespace

Scope::Scope(std::string purpose) {
  State& s = state();
  DPX_CHECK(!s.purpose, "a capture scope (", *s.purpose, ") is already active on this thread");
  s.purpose = std::move(purpose);
  s.where.clear();
}

Scope::~Scope() {
  State& s = state();
  s.purpose.reset();
  s.where.clear();
}

bool active() { return state().purpose.has_value(); }

Where::Where(const char* label) : pushed_(active()) {
  if (pushed_) state().where.push_back(label);
}

Where::~Where() {
  if (pushed_ && !state().where.empty()) state().where.pop_back();
}

void not_capturable(const char* what) {
  const State& s = state();
  if (!s.purpose) return;
  std::string where;
  for (auto it = s.where.rbegin(); it != s.where.rend(); ++it) where.append(where.empty() ? " in " : ", in ").append(*it);
  throw CaptureError(detail::concat(*s.purpose, ": the step cannot be captured into a CUDA graph: ", what, where,
                                    ". A captured step runs without the host, so nothing in it may wait for the "
                                    "device or read its results"));
}

}  // namespace dpx::capture
