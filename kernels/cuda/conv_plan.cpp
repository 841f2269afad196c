// Convolutions through cuDNN's graph API with cached execution plans (see conv_plan.hpp).
// The sequence, as cuDNN's backend guide gives it: tensor and convolution descriptors, the
// convolution operation, an operation graph of that one operation, the heuristics' engine
// configurations (instant mode, then the fallback list), and the first admitted one (or, under
// --cudnn-algo search, the fastest of up to kTimed admitted ones) finalized as the plan.
#include "kernels/cuda/conv_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/capture.hpp"
#include "core/cuda/check.hpp"
#include "core/cuda/event.hpp"
#include "core/error.hpp"
#include "kernels/cuda/scratch.hpp"
#include "kernels/determinism.hpp"

// The operation graph and the plan still take the handle through attributes cuDNN 9.19 marks
// deprecated (for its device-properties descriptor); they work, and PyTorch's frontend sets them.
// (Pushed and popped: under DPX_UNITY this file shares a unit with others.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace dpx::cuda {

namespace {

constexpr int kTimed = 8;            // the most engines a search times (cudnnFind times about as many)
constexpr int64_t kAlignment = 16;   // the byte alignment the plans assume of every pointer

// One backend descriptor, destroyed with this unless released. `ok` turns false at the first
// call cuDNN refuses; later calls are skipped, so a builder checks once at its end.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { ok_ = cudnnBackendCreateDescriptor(type, &d_) == CUDNN_STATUS_SUCCESS; }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    if (ok_) ok_ = cudnnBackendSetAttribute(d_, name, type, count, const_cast<void*>(values)) == CUDNN_STATUS_SUCCESS;
  }
  void finalize() {
    if (ok_) ok_ = cudnnBackendFinalize(d_) == CUDNN_STATUS_SUCCESS;
  }
  bool ok() const { return ok_; }
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t release() {
    cudnnBackendDescriptor_t d = d_;
    d_ = nullptr;
    return d;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  bool ok_ = false;
};

// The three tensors' unique ids, in the order of ConvRequest's x, w, y.
constexpr int64_t kUids[3] = {1, 2, 3};

// A 4-d tensor of sizes (a, b, c, d) in n, c, h, w order, packed in that order or, channels_last,
// as (a, c, d, b): NHWC (a filter: (k, kh, kw, c)).
void tensor(Desc& t, int64_t uid, cudnnDataType_t type, int64_t a, int64_t b, int64_t c, int64_t d,
            bool channels_last) {
  const int64_t dims[4] = {a, b, c, d};
  int64_t strides[4] = {b * c * d, c * d, d, 1};
  if (channels_last) {
    strides[1] = 1;
    strides[2] = d * b;
    strides[3] = b;
  }
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment);
  t.finalize();
}

// The operation's attribute names for the pass's x, w, y, descriptor, alpha and beta.
struct OpNames {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};
OpNames op_names(ConvPass pass) {
  switch (pass) {
    case ConvPass::forward:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
    case ConvPass::backward_data:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
    case ConvPass::backward_filter:
      return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
              CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
  }
  return op_names(ConvPass::forward);
}

// Which of x, w, y the pass writes.
int output_of(ConvPass pass) { return pass == ConvPass::forward ? 2 : pass == ConvPass::backward_data ? 0 : 1; }

// The notes of the engine behind an engine configuration; nullopt if cuDNN will not say.
std::optional<kernels::EngineNotes> notes_of(cudnnBackendDescriptor_t config, int64_t* global_index) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  if (!engine.ok()) return std::nullopt;
  int64_t n = 0;
  cudnnBackendDescriptor_t e = engine.get();
  if (cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) !=
      CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  kernels::EngineNotes notes;
  cudnnBackendNumericalNote_t numerical[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, numerical) != CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  for (int64_t i = 0; i < n && i < CUDNN_NUMERICAL_NOTE_TYPE_COUNT; ++i) {
    notes.tensor_core |= numerical[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
    notes.down_convert |= numerical[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
    notes.reduced_reduction |= numerical[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
    notes.nondeterministic |= numerical[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
  }
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behavior) != CUDNN_STATUS_SUCCESS)
    return std::nullopt;
  for (int64_t i = 0; i < n && i < CUDNN_BEHAVIOR_NOTE_TYPE_COUNT; ++i)
    notes.runtime_compiled |= behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  *global_index = -1;
  cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, global_index);
  return notes;
}

// Runs `plan` on the three pointers and the workspace.
cudnnStatus_t execute(const CudaState& st, cudnnBackendDescriptor_t plan, void* const ptrs[3], void* workspace) {
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, kUids);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  if (!pack.ok()) return CUDNN_STATUS_BAD_PARAM;
  return cudnnBackendExecute(st.cudnn, plan, pack.get());
}

// A finalized plan of one engine configuration (destroyed with it unless released), with its
// workspace size.
struct Candidate {
  std::unique_ptr<Desc> plan;
  int64_t workspace_bytes = 0, global_index = -1;
  float ms = 0.f;
};

// GPU time of two runs of a candidate after a warm-up one, into `ptrs` (the output among them a
// scratch copy); nullopt if a run fails.
std::optional<float> time_candidate(CudaState& st, const Candidate& c, void* const ptrs[3], void* workspace) {
  if (execute(st, c.plan->get(), ptrs, workspace) != CUDNN_STATUS_SUCCESS) return std::nullopt;
  StreamTimer timer(st.device);
  timer.start(st.stream);
  const bool ran = execute(st, c.plan->get(), ptrs, workspace) == CUDNN_STATUS_SUCCESS &&
                   execute(st, c.plan->get(), ptrs, workspace) == CUDNN_STATUS_SUCCESS;
  timer.stop(st.stream);
  const float ms = timer.elapsed_ms();
  if (!ran) return std::nullopt;
  return ms / 2;
}

void say(const ConvRequest& r, const char* what, const std::string& result) {
  if (!cudnn_log()) return;
  std::fprintf(stderr,
               "dpx cudnn graph: %s x %lldx%lldx%lldx%lld w %lldx%lldx%lldx%lld stride %lld,%lld pad %lld,%lld "
               "dilation %lld,%lld groups %lld, beta %g%s: %s\n",
               what, (long long)r.n, (long long)r.c, (long long)r.h, (long long)r.w, (long long)r.k,
               (long long)(r.c / r.groups), (long long)r.kh, (long long)r.kw, (long long)r.stride[0],
               (long long)r.stride[1], (long long)r.pad[0], (long long)r.pad[1], (long long)r.dilation[0],
               (long long)r.dilation[1], (long long)r.groups, double(r.beta), r.channels_last ? ", channels_last" : "",
               result.c_str());
}

// Builds the request's plan, or returns null (with the reason on DPX_CUDNN_LOG) when the graph
// API declines it. `ptrs`: the call's x, w, y, which a search reads (its output goes to scratch).
std::shared_ptr<ConvPlan> build(CudaState& st, const ConvRequest& r, void* const ptrs[3], const char* what) {
  auto declined = [&](const std::string& why) -> std::shared_ptr<ConvPlan> {
    say(r, what, "declined (" + why + "): the legacy call runs");
    return nullptr;
  };
  Desc x(CUDNN_BACKEND_TENSOR_DESCRIPTOR), w(CUDNN_BACKEND_TENSOR_DESCRIPTOR), y(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  tensor(x, kUids[0], r.data, r.n, r.c, r.h, r.w, r.channels_last);
  tensor(w, kUids[1], r.data, r.k, r.c / r.groups, r.kh, r.kw, r.channels_last);
  tensor(y, kUids[2], r.data, r.n, r.k, r.oh, r.ow, r.channels_last);
  if (!x.ok() || !w.ok() || !y.ok()) return declined("tensor descriptors");

  Desc conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;  // PyTorch's conv2d
  const int64_t spatial = 2;
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, r.pad);
  conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, r.pad);
  conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, r.dilation);
  conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, r.stride);
  conv.finalize();
  if (!conv.ok()) return declined("convolution descriptor");

  const OpNames names = op_names(r.pass);
  Desc op(names.type);
  const float alpha = 1.f, beta = r.beta;
  const cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = y.get(), cd = conv.get();
  op.set(names.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd);
  op.set(names.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd);
  op.set(names.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd);
  op.set(names.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
  op.set(names.alpha, CUDNN_TYPE_FLOAT, 1, &alpha);
  op.set(names.beta, CUDNN_TYPE_FLOAT, 1, &beta);
  op.finalize();
  if (!op.ok()) return declined("operation");

  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const cudnnBackendDescriptor_t od = op.get();
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &st.cudnn);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &od);
  graph.finalize();
  if (!graph.ok()) return declined("operation graph");

  // The admitted configurations' plans, in the heuristics' order: the first one, or under a
  // search up to kTimed.
  std::vector<Candidate> candidates;
  const size_t wanted = r.search ? kTimed : 1;
  const size_t limit = r.search ? search_workspace_limit() : 0;
  std::string refused;
  for (cudnnBackendHeurMode_t heur_mode : {CUDNN_HEUR_MODE_INSTANT, CUDNN_HEUR_MODE_FALLBACK}) {
    if (candidates.size() >= wanted) break;
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendDescriptor_t gd = graph.get();
    heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gd);
    heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
    heur.finalize();
    if (!heur.ok()) continue;
    int64_t count = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr) != CUDNN_STATUS_SUCCESS ||
        count <= 0)
      continue;
    std::vector<std::unique_ptr<Desc>> configs;
    std::vector<cudnnBackendDescriptor_t> handles;
    for (int64_t i = 0; i < count; ++i) {
      configs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      if (!configs.back()->ok()) return declined("engine configurations");
      handles.push_back(configs.back()->get());
    }
    int64_t got = 0;
    if (cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                 handles.data()) != CUDNN_STATUS_SUCCESS)
      continue;
    for (int64_t i = 0; i < got && candidates.size() < wanted; ++i) {
      int64_t index = -1;
      const std::optional<kernels::EngineNotes> notes = notes_of(handles[static_cast<size_t>(i)], &index);
      if (!notes) continue;
      if (const char* why = kernels::conv_engine_refusal(*notes, r.deterministic, r.allow_tensor_ops, engine_rule())) {
        refused += " engine " + std::to_string(index) + " " + why + ";";
        continue;
      }
      bool seen = false;
      for (const Candidate& c : candidates) seen = seen || (index >= 0 && c.global_index == index);
      if (seen) continue;
      auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      const cudnnBackendDescriptor_t config = handles[static_cast<size_t>(i)];
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &st.cudnn);
      plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config);
      plan->finalize();
      if (!plan->ok()) continue;
      int64_t n = 0, bytes = 0;
      if (cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                   &bytes) != CUDNN_STATUS_SUCCESS ||
          bytes < 0)
        continue;
      // A search times its candidates in scratch of at most its limit; the heuristics' choice
      // runs in the state's workspace, which must then hold it.
      bool fits = !r.search || static_cast<size_t>(bytes) <= limit;
      if (fits && !r.search) {
        try {
          st.workspace(static_cast<size_t>(bytes));
        } catch (const Error&) {  // too large to allocate now: the next configuration may fit
          fits = false;
        }
      }
      if (!fits) {
        refused += " engine " + std::to_string(index) + " needs " + std::to_string(bytes) + " bytes;";
        continue;
      }
      candidates.push_back({std::move(plan), bytes, index, 0.f});
    }
  }
  if (candidates.empty()) return declined("no engine the rule admits" + refused);

  size_t best = 0;
  if (r.search && candidates.size() > 1) {
    capture::not_capturable("cuDNN's engine search (--cudnn-algo search) for a convolution first seen in the capture "
                            "(every shape should have run in an eager step before it)");
    // Timed into scratch of the output's size, so the real output (which may accumulate) is left alone.
    const int out = output_of(r.pass);
    const int64_t out_elements = out == 0 ? r.n * r.c * r.h * r.w : out == 1 ? r.k * (r.c / r.groups) * r.kh * r.kw
                                                                              : r.n * r.k * r.oh * r.ow;
    const detail::Scratch scratch(st, static_cast<size_t>(out_elements) * (r.data == CUDNN_DATA_FLOAT ? 4 : 2));
    void* timed[3] = {ptrs[0], ptrs[1], ptrs[2]};
    timed[out] = scratch.as<void>();
    // One workspace for them all, of the largest one's size; where that cannot be allocated now,
    // the candidates that need the most are passed over until it can (PyTorch's rule).
    std::optional<detail::Scratch> workspace;
    while (!workspace && !candidates.empty()) {
      int64_t most = 0;
      for (const Candidate& c : candidates) most = std::max(most, c.workspace_bytes);
      try {
        workspace.emplace(st, static_cast<size_t>(most));
      } catch (const Error&) {
        std::erase_if(candidates, [most](const Candidate& c) { return c.workspace_bytes == most; });
      }
    }
    if (!workspace) return declined("no memory for any candidate's workspace");
    float best_ms = -1.f;
    for (size_t i = 0; i < candidates.size(); ++i) {
      const std::optional<float> ms = time_candidate(st, candidates[i], timed, workspace->as<void>());
      if (!ms) continue;
      candidates[i].ms = *ms;
      if (best_ms < 0 || *ms < best_ms) {
        best_ms = *ms;
        best = i;
      }
    }
    if (best_ms < 0) return declined("every timed engine failed to run");
  }
  auto plan = std::make_shared<ConvPlan>();
  plan->plan = candidates[best].plan->release();
  plan->workspace_bytes = candidates[best].workspace_bytes;
  plan->owned = {x.release(), w.release(), y.release(), conv.release(), op.release(), graph.release()};
  char timed_text[48] = "";
  if (r.search && candidates.size() > 1)
    std::snprintf(timed_text, sizeof timed_text, ", %.3f ms", double(candidates[best].ms));
  say(r, what,
      "engine " + std::to_string(candidates[best].global_index) + ", workspace " +
          std::to_string(plan->workspace_bytes) + " bytes, by " + (r.search ? "search" : "heuristic") +
          " (candidate " + std::to_string(best + 1) + " of " + std::to_string(candidates.size()) + timed_text + ")" +
          (refused.empty() ? "" : "; passed over:" + refused));
  return plan;
}

}  // namespace

ConvPlan::~ConvPlan() {
  if (plan) cudnnBackendDestroyDescriptor(plan);
  for (cudnnBackendDescriptor_t d : owned)
    if (d) cudnnBackendDestroyDescriptor(d);
}

size_t search_workspace_limit() {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    free_bytes = 0;
  }
  return free_bytes / 2;
}

kernels::EngineRule engine_rule() {
  static const kernels::EngineRule rule = kernels::parse_engine_rule(std::getenv("DPX_CUDNN_ENGINES"));
  return rule;
}

bool cudnn_log() {
  static const bool on = [] {
    const char* v = std::getenv("DPX_CUDNN_LOG");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

bool conv_graph_api_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("DPX_CUDNN_API");
    if (!v || !*v || std::string(v) == "graph") return true;
    if (std::string(v) == "legacy") return false;
    fail("DPX_CUDNN_API='", v, "': use graph (the default) or legacy");
  }();
  return on;
}

bool run_conv_plan(CudaState& st, const AlgoKey& key, const ConvRequest& r, const void* x, const void* w,
                   const void* y, const char* what) {
  if (!conv_graph_api_enabled()) return false;
  // One of the three is the pass's output (conv_plan.hpp): cuDNN takes them all as void*.
  void* const ptrs[3] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y)};
  for (void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % kAlignment != 0) return false;
  AlgoKey plan_key = key;
  plan_key.v.back() = r.beta == 0.f ? 1 : 2;  // the plan holds beta; the legacy key leaves this slot 0
  auto it = st.conv_plans.find(plan_key);
  if (it == st.conv_plans.end()) it = st.conv_plans.emplace(plan_key, build(st, r, ptrs, what)).first;
  ConvPlan* plan = it->second.get();
  if (!plan) return false;
  void* workspace = st.workspace(static_cast<size_t>(plan->workspace_bytes));
  const cudnnStatus_t status = execute(st, plan->plan, ptrs, workspace);
  const int category = CUDNN_STATUS_CATEGORY(status);
  if (!plan->ran && (category == CUDNN_STATUS_BAD_PARAM || category == CUDNN_STATUS_NOT_SUPPORTED)) {
    // Refused at its first run, before it launched anything: the legacy call from now on. A
    // failure while running (internal, execution) may have written part of the output, which the
    // legacy call would then add to: that is an error.
    say(r, what, std::string("declined at its first run (") + cudnnGetErrorString(status) + "): the legacy call runs");
    it->second = nullptr;
    return false;
  }
  DPX_CUDNN_CHECK(status);
  plan->ran = true;
  return true;
}

}  // namespace dpx::cuda

#pragma GCC diagnostic pop
