// Convolutions through cuDNN's graph (backend) API, with the execution plan of each convolution
// built once and kept in its CudaState (conv_plans), as PyTorch's Conv_v8.cpp does. The legacy
// calls (cudnnConvolutionForward and its backward siblings) pick and build a plan inside every
// call: on the H100 (2026-11-27) dpx's convolutions cost 100-200 us of host time a forward call
// and 230-490 us a backward one, against PyTorch's 25-77 and 51-173, so that the host nearly
// bounded the small models (squeezenet1_1 under TF32: 9.1 ms a step issuing ops, 11.8 ms of GPU
// time). Here a call is a variant pack (the three pointers and the workspace) and
// cudnnBackendExecute.
//
// Every failure while building (a descriptor cuDNN refuses, no engine the rule admits, no
// workspace) or at the plan's first run makes the request fall back to the legacy path,
// remembered per request and said on stderr with DPX_CUDNN_LOG=1; DPX_CUDNN_API=legacy turns this
// path off. Engines are admitted by kernels::conv_engine_usable (kernels/determinism.hpp, tested
// on the CPU).
#pragma once
#include <cudnn.h>

#include <cstdint>
#include <vector>

#include "core/cuda/context.hpp"
#include "kernels/determinism.hpp"

namespace dpx::cuda {

enum class ConvPass : int { forward = 1, backward_data = 2, backward_filter = 3 };

// A convolution as the graph API sees it: x (n, c, h, w), w (k, c / groups, kh, kw), y (n, k, oh,
// ow), packed NCHW, or with channels_last packed NHWC (and the filter (k, kh, kw, c / groups)), of
// one data type, computed in fp32.
struct ConvRequest {
  ConvPass pass = ConvPass::forward;
  int64_t n = 0, c = 0, h = 0, w = 0, k = 0, kh = 0, kw = 0, oh = 0, ow = 0, groups = 1;
  int64_t pad[2] = {0, 0}, stride[2] = {1, 1}, dilation[2] = {1, 1};
  cudnnDataType_t data = CUDNN_DATA_FLOAT;
  bool allow_tensor_ops = false;  // TF32 for fp32 data; always for bf16/fp16 data
  bool deterministic = false;
  bool search = false;            // time the admitted engines (--cudnn-algo search), else the heuristics' first
  float beta = 0.f;               // the output is beta * itself + the convolution (0 or 1)
  bool channels_last = false;     // x, y, w packed NHWC (--memory-format channels_last)
};

// A plan kept per request (CudaState::conv_plans); a request the graph API declined holds none.
struct ConvPlan {
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace_bytes = 0;
  bool ran = false;  // has run once: a later failure is an error, a first one a fallback
  std::vector<cudnnBackendDescriptor_t> owned;  // what the plan was built from, destroyed with it
  ConvPlan() = default;
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
  ~ConvPlan();
};

// The most workspace a search (--cudnn-algo search) times a candidate with, on either path: half
// the device's free memory (PyTorch offers what it can allocate). A candidate that needs more is
// passed over; only the one kept grows the state's workspace. (A cap of 1 GiB passed over the
// engines the heuristics themselves pick for vgg16's 224x224 convolutions, 1.65 GB each, and its
// search ran 12 ms a step slower than its heuristics: H200, 2026-11-28.)
size_t search_workspace_limit();

// The rule that admits the graph API's engines (DPX_CUDNN_ENGINES: dpx's, the default, or
// pytorch's; kernels/determinism.hpp; read once).
kernels::EngineRule engine_rule();
// Whether convolutions try the graph API first (DPX_CUDNN_API unset or "graph"; "legacy": never).
bool conv_graph_api_enabled();
// Whether each convolution's choice (plan or legacy algorithm) is said on stderr as it is made
// (DPX_CUDNN_LOG=1; read once).
bool cudnn_log();

// Runs the pass through its cached plan (built on first use; `key` names the request, as the
// legacy path's algorithm cache does, with the output's beta added). x, w, y are the pass's three
// tensors in the order of x, w and y above (for backward-data: dx, w, dy; for backward-filter: x,
// dw, dy), the output among them written with r.beta. Returns false when the graph API declined
// the request or a pointer is not 16-byte aligned: the caller then runs the legacy call.
bool run_conv_plan(CudaState& st, const AlgoKey& key, const ConvRequest& r, const void* x, const void* w,
                   const void* y, const char* what);

}  // namespace dpx::cuda
