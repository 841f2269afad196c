// The CPU convolution's implementations and how one is chosen per shape and pass
// (kernels/cpu/conv2d_select.cpp):
//   dpx       dpx's own kernels: im2col + a single-threaded sgemm per work unit (conv2d.cpp), the
//             direct depthwise kernel (depthwise_conv.cpp). Bitwise independent of the thread count.
//   onednn    oneDNN's direct convolution (conv2d_onednn.cpp; Debian's libdnnl), in the blocked
//             layouts it picks, with the reorders to and from dpx's NCHW around it. With
//             AVX-512 forward and dx do not depend on the thread count (on AVX2 its GEMM-based
//             fallback for some grouped shapes splits the sums by thread); dW does everywhere
//             (oneDNN splits its sum over images by thread).
//   winograd  oneDNN's Winograd F(4x4, 3x3): 3x3 stride-1 convolutions in about half the time on
//             planes of 14x14 and more, rounding more (5e-4 relative in the kernel tests). Only
//             on CPUs with AVX-512; elsewhere oneDNN refuses it and the direct convolution runs.
// --conv-algo picks the rule: auto (Winograd for 3x3 stride-1 shapes on planes of 7x7 and more,
// direct for the others; dpx's kernels for 1x1 convolutions on planes of 14x14 and more, 3x3
// stems, depthwise ones, one backward shape where they are faster, and inside thread ranks of
// several threads; conv2d_select.cpp says why: the same choice every run), search (time the
// candidates on the first call of each shape and keep the fastest, as cuDNN's benchmark mode
// does: two runs may choose differently), onednn, winograd (the direct convolution where
// Winograd does not apply), or dpx everywhere.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.hpp"

namespace dpx::cpu {

enum class ConvAlgo { automatic, search, onednn, winograd, dpx };

const char* conv_algo_name(ConvAlgo algo);  // "auto", "search", "onednn", "winograd", "dpx"
// False (out unchanged) for a name that is none of those.
bool parse_conv_algo(const std::string& name, ConvAlgo& out);
// Process-wide; set before the first convolution runs (later shapes use the new rule, shapes
// already seen keep their choice). Throws std::runtime_error for an oneDNN rule (search, onednn,
// winograd) in a dpx built without oneDNN.
void set_conv_algo(ConvAlgo algo);
ConvAlgo conv_algo();
// The most scratch oneDNN's Winograd convolution may take for one call (0, the default: no
// limit), as cuDNN's algorithms are held to a workspace limit: past it a shape runs the direct
// convolution instead (its choice's why says so). Winograd's scratch grows with the images (VGG-16
// at 224x224, 64 channels: about 60 MB an image), so under a memory budget it would cap the batch
// before the activations do. `--memory-budget` sets it to an eighth of the budget. Process-wide;
// set before the first convolution runs, as set_conv_algo.
void set_conv_workspace_limit(size_t bytes);
size_t conv_workspace_limit();
bool onednn_available();     // this dpx was built with oneDNN
std::string onednn_version();  // the loaded library's, "2.6.3"; empty without oneDNN

// A convolution's shape as numbers: x's sizes, w's output channels and kernel, strides, padding,
// dilation, groups and whether it has a bias. The choices (conv2d_select.cpp) and oneDNN's
// primitives (conv2d_onednn.cpp) are kept under it and what else they depend on.
using ConvShapeKey = std::array<int64_t, 15>;
ConvShapeKey conv_shape_key(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p, bool bias);

// What was chosen for one shape and pass, first-seen order.
struct ConvChoice {
  std::string shape;  // "8x64x56x56 -> 64 3x3 s1 p1 d1 g1"
  std::string pass;   // "forward" or "backward"
  std::string algo;   // "dpx", "onednn" (direct) or "winograd" (oneDNN's)
  std::string why;    // "rule", "only", "search: onednn 1.21 ms, dpx 2.30 ms", "oneDNN refused: ..."
  int threads = 1;
  bool nested = false;  // called inside a parallel region (a thread rank)
};
std::vector<ConvChoice> conv_choices();
void clear_conv_choices();  // tests: forget every choice (the next call chooses again)

// The algorithms themselves; same contract as ops::conv2d_forward / conv2d_backward (the forward's
// p.epilogue included: dpx's GEMM paths fold the ReLU into the pass that places each output and
// adds its bias, the others run apply_epilogue after).
void conv2d_forward_dpx(const Context& ctx, Tensor& y, const Tensor& x, const Tensor& w,
                        const Tensor* b, const ops::Conv2dParams& p);
void conv2d_backward_dpx(const Context& ctx, Tensor* dx, Tensor* dw, Tensor* db, const Tensor& dy,
                         const Tensor& x, const Tensor& w, const ops::Conv2dParams& p,
                         ops::DxMode dx_mode);
// y = max(y, 0) in place where p.epilogue is Epilogue::relu (NaN passes, as relu_forward).
void apply_epilogue(const Context& ctx, Tensor& y, const ops::Conv2dParams& p);
// False, with nothing written and the reason in *why, where oneDNN has no implementation for the
// shape (or dpx was built without it). db is dpx's own sum (in double) on both paths.
// winograd: oneDNN's Winograd convolution (3x3, stride 1) instead of its direct one.
bool conv2d_forward_onednn(const Context& ctx, Tensor& y, const Tensor& x, const Tensor& w,
                           const Tensor* b, const ops::Conv2dParams& p, bool winograd,
                           std::string* why);
bool conv2d_backward_onednn(const Context& ctx, Tensor* dx, Tensor* dw, const Tensor& dy,
                            const Tensor& x, const Tensor& w, const ops::Conv2dParams& p,
                            bool winograd, ops::DxMode dx_mode, std::string* why);

}  // namespace dpx::cpu
