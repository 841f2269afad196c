// CPU convolutions through oneDNN (Debian's libdnnl): the implementations "onednn" (its direct
// convolution) and "winograd" (its Winograd F(4x4, 3x3)) of kernels/cpu/conv2d_algos.hpp. oneDNN picks its own layouts (format_tag::any: blocked nChw16c
// and OIhw16i16o on AVX-512); dpx's tensors stay NCHW / OIHW, so each call reorders into those
// layouts and back, as PyTorch's NCHW convolutions on the CPU do. Gradients are accumulated as
// dpx's ops require (dx += ..., dW += ...): oneDNN writes them into scratch, and the reorder
// back adds them to dx / dW (a sum post-op). Primitives are made once per shape, thread count and
// algorithm and kept; scratch (blocked copies, oneDNN's scratchpad) comes from dpx's host allocator, so a
// steady-state step allocates nothing new.
#include <omp.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "kernels/cpu/conv2d_algos.hpp"
#include "kernels/cpu/cpu_common.hpp"

#ifdef DPX_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace dpx::cpu {

#ifndef DPX_WITH_ONEDNN

std::string onednn_version() { return ""; }

bool conv2d_forward_onednn(const Context&, Tensor&, const Tensor&, const Tensor&, const Tensor*,
                           const ops::Conv2dParams&, bool, std::string* why) {
  if (why) *why = "this dpx was built without oneDNN";
  return false;
}
bool conv2d_backward_onednn(const Context&, Tensor*, Tensor*, const Tensor&, const Tensor&,
                            const Tensor&, const ops::Conv2dParams&, bool, ops::DxMode,
                            std::string* why) {
  if (why) *why = "this dpx was built without oneDNN";
  return false;
}

#else

namespace {

using detail::OmpThreads;
using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

const dnnl::engine& engine() {
  static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::primitive_attr scratch_attr(bool accumulate = false) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.f);
    attr.set_post_ops(sum);
  }
  return attr;
}

// A reorder between two layouts of one tensor, or none where they are the same.
struct Reorder {
  std::optional<dnnl::reorder::primitive_desc> pd;
  std::optional<dnnl::reorder> prim;
  // from -> to; `always` makes one even for equal layouts (to add into `to`).
  void make(const memory::desc& from, const memory::desc& to, bool accumulate = false) {
    if (from == to && !accumulate) return;
    pd.emplace(engine(), from, engine(), to, scratch_attr(accumulate));
    prim.emplace(*pd);
  }
  size_t scratch_bytes() const { return pd ? pd->scratchpad_desc().get_size() : 0; }
};

// Everything made for one shape and thread count. Forward parts at the first forward, backward
// parts at the first backward.
struct Entry {
  memory::desc x, w, y;  // dpx's layouts: NCHW, OIHW (GOIHW when grouped), NCHW
  memory::dims strides, dilates, pad_l, pad_r;
  dnnl::algorithm algorithm = dnnl::algorithm::convolution_direct;
  std::optional<dnnl::convolution_forward::primitive_desc> fwd_pd;
  std::optional<dnnl::convolution_forward> fwd;
  Reorder fwd_x, fwd_w, fwd_y;  // x -> src, w -> weights, dst -> y
  bool has_bias = false;

  bool backward_made = false;
  std::optional<dnnl::convolution_backward_data::primitive_desc> bd_pd;
  std::optional<dnnl::convolution_backward_data> bd;
  Reorder bd_dy, bd_w, bd_dx;  // dy -> diff_dst, w -> weights, diff_src -> dx (adding)
  Reorder bd_dx_over;          // diff_src -> dx (writing over; none where the layouts agree)
  std::optional<dnnl::convolution_backward_weights::primitive_desc> bw_pd;
  std::optional<dnnl::convolution_backward_weights> bw;
  Reorder bw_x, bw_dy, bw_dw;  // x -> src, dy -> diff_dst, diff_weights -> dW (adding)
};

// An entry's key: the shape, then the thread count and the algorithm.
using EntryKey = std::pair<ConvShapeKey, std::array<int64_t, 2>>;

EntryKey entry_key(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p, bool bias, int threads,
           bool winograd) {
  return {conv_shape_key(x, w, p, bias), {threads, winograd ? 1 : 0}};
}

std::mutex g_entries_mutex;
std::map<EntryKey, std::unique_ptr<Entry>> g_entries;  // guarded by g_entries_mutex; entries never move

// oneDNN's OpenMP build runs one thread inside a parallel region (dpx's thread ranks are one):
// a primitive made for more would wait at its barriers for threads that never come.
int threads_of(const Context& ctx) { return omp_in_parallel() ? 1 : ctx.threads; }

memory::desc plain(const memory::dims& d, Tag tag) { return memory::desc(d, kF32, tag); }
memory::desc any(const memory::dims& d) { return memory::desc(d, kF32, Tag::any); }

// The entry of a shape with its forward made. Throws dnnl::error where oneDNN refuses it.
Entry& forward_entry(const Tensor& x, const Tensor& w, const ops::Conv2dParams& p, bool bias,
                     int threads, bool winograd) {
  std::lock_guard<std::mutex> lock(g_entries_mutex);
  std::unique_ptr<Entry>& slot = g_entries[entry_key(x, w, p, bias, threads, winograd)];
  if (slot && slot->fwd) return *slot;
  auto e = std::make_unique<Entry>();
  if (winograd) e->algorithm = dnnl::algorithm::convolution_winograd;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t K = w.size(0), kh = w.size(2), kw = w.size(3), G = p.groups;
  const int64_t OH = ops::conv_out_size(H, static_cast<int>(kh), p.stride_h, p.pad_h, p.dilation_h);
  const int64_t OW = ops::conv_out_size(W, static_cast<int>(kw), p.stride_w, p.pad_w, p.dilation_w);
  e->x = plain({N, C, H, W}, Tag::nchw);
  e->y = plain({N, K, OH, OW}, Tag::nchw);
  const memory::dims wd = G > 1 ? memory::dims{G, K / G, C / G, kh, kw} : memory::dims{K, C, kh, kw};
  e->w = plain(wd, G > 1 ? Tag::goihw : Tag::oihw);
  e->strides = {p.stride_h, p.stride_w};
  e->dilates = {p.dilation_h - 1, p.dilation_w - 1};  // oneDNN counts the gaps
  e->pad_l = {p.pad_h, p.pad_w};
  // The right padding that makes oneDNN's output size dpx's (PyTorch's) floor rule.
  e->pad_r = {(OH - 1) * p.stride_h + (kh - 1) * p.dilation_h + 1 - H - p.pad_h,
              (OW - 1) * p.stride_w + (kw - 1) * p.dilation_w + 1 - W - p.pad_w};
  e->has_bias = bias;
  const memory::desc b_md = bias ? plain({K}, Tag::x) : memory::desc();
  const OmpThreads omp(threads);
  const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                          e->algorithm, any(e->x.dims()),
                                          any(wd), b_md, any(e->y.dims()), e->strides, e->dilates,
                                          e->pad_l, e->pad_r);
  e->fwd_pd.emplace(d, scratch_attr(), engine());
  e->fwd.emplace(*e->fwd_pd);
  e->fwd_x.make(e->x, e->fwd_pd->src_desc());
  e->fwd_w.make(e->w, e->fwd_pd->weights_desc());
  e->fwd_y.make(e->fwd_pd->dst_desc(), e->y);
  slot = std::move(e);
  return *slot;
}

void make_backward(Entry& e, int threads) {
  std::lock_guard<std::mutex> lock(g_entries_mutex);
  if (e.backward_made) return;
  const OmpThreads omp(threads);
  const memory::dims wd = e.w.dims();
  const dnnl::convolution_backward_data::desc dd(e.algorithm,
                                                 any(e.x.dims()), any(wd), any(e.y.dims()),
                                                 e.strides, e.dilates, e.pad_l, e.pad_r);
  e.bd_pd.emplace(dd, scratch_attr(), engine(), *e.fwd_pd);
  e.bd.emplace(*e.bd_pd);
  e.bd_dy.make(e.y, e.bd_pd->diff_dst_desc());
  e.bd_w.make(e.w, e.bd_pd->weights_desc());
  e.bd_dx.make(e.bd_pd->diff_src_desc(), e.x, /*accumulate=*/true);
  e.bd_dx_over.make(e.bd_pd->diff_src_desc(), e.x);
  const dnnl::convolution_backward_weights::desc wdsc(e.algorithm,
                                                      any(e.x.dims()), any(wd), any(e.y.dims()),
                                                      e.strides, e.dilates, e.pad_l, e.pad_r);
  e.bw_pd.emplace(wdsc, scratch_attr(), engine(), *e.fwd_pd);
  e.bw.emplace(*e.bw_pd);
  e.bw_x.make(e.x, e.bw_pd->src_desc());
  e.bw_dy.make(e.y, e.bw_pd->diff_dst_desc());
  e.bw_dw.make(e.bw_pd->diff_weights_desc(), e.w, /*accumulate=*/true);
  e.backward_made = true;
}

// Host scratch for one call, from dpx's host block cache, carved into 64-byte aligned pieces.
class Pieces {
 public:
  explicit Pieces(size_t bytes) {
    if (bytes) storage_ = allocate_storage(bytes, Device::cpu());
  }
  static size_t round(size_t bytes) { return (bytes + 63) / 64 * 64; }
  void* take(size_t bytes) {
    if (!bytes) return nullptr;
    void* p = static_cast<char*>(storage_->data) + used_;
    used_ += round(bytes);
    return p;
  }

 private:
  std::shared_ptr<Storage> storage_;
  size_t used_ = 0;
};

size_t bytes_of(const memory::desc& d) { return Pieces::round(d.get_size()); }

// Runs a reorder from -> to (both user pointers); nothing where no reorder is needed.
void run(const Reorder& r, dnnl::stream& s, Pieces& scratch, const memory::desc& from_md,
         void* from, const memory::desc& to_md, void* to) {
  if (!r.prim) return;
  memory src(from_md, engine(), from), dst(to_md, engine(), to);
  std::unordered_map<int, memory> args{{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
  if (const size_t n = r.scratch_bytes())
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(r.pd->scratchpad_desc(), engine(), scratch.take(n)));
  r.prim->execute(s, args);
}

// A layout's buffer: the user's pointer where no reorder is needed, else a piece of scratch.
void* staged(const Reorder& r, const memory::desc& md, Pieces& scratch, void* user) {
  return r.prim ? scratch.take(md.get_size()) : user;
}

template <class F>
bool guarded(std::string* why, F&& f) {
  try {
    f();
    return true;
  } catch (const dnnl::error& err) {
    if (why)
      *why = err.status == dnnl_unimplemented ? std::string("oneDNN has no implementation for this shape here")
                                              : std::string("oneDNN refused it: ") + err.what();
    return false;
  }
}

// Winograd's scratchpad past the workspace limit (conv2d_algos.hpp): refused, saying so.
bool over_workspace_limit(size_t scratch, std::string* why) {
  const size_t limit = conv_workspace_limit();
  if (limit == 0 || scratch <= limit) return false;
  if (why)
    *why = "its scratch of " + std::to_string(scratch >> 20) + " MiB is over the workspace limit of " +
           std::to_string(limit >> 20) + " MiB (--memory-budget / 8)";
  return true;
}

}  // namespace

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

bool conv2d_forward_onednn(const Context& ctx, Tensor& y, const Tensor& x, const Tensor& w,
                           const Tensor* b, const ops::Conv2dParams& p, bool winograd,
                           std::string* why) {
  if (x.size(0) == 0) return true;  // no images: nothing to write
  const bool bias = b && b->defined();
  const int threads = threads_of(ctx);
  Entry* entry = nullptr;
  if (!guarded(why, [&] { entry = &forward_entry(x, w, p, bias, threads, winograd); })) return false;
  Entry& e = *entry;
  const auto& pd = *e.fwd_pd;
  if (winograd && over_workspace_limit(pd.scratchpad_desc().get_size(), why)) return false;
  const OmpThreads omp(threads);
  Pieces scratch((e.fwd_x.prim ? bytes_of(pd.src_desc()) : 0) +
                  (e.fwd_w.prim ? bytes_of(pd.weights_desc()) : 0) +
                  (e.fwd_y.prim ? bytes_of(pd.dst_desc()) : 0) +
                  Pieces::round(pd.scratchpad_desc().get_size()) +
                  Pieces::round(e.fwd_x.scratch_bytes()) + Pieces::round(e.fwd_w.scratch_bytes()) +
                  Pieces::round(e.fwd_y.scratch_bytes()));
  dnnl::stream s(engine());
  void* src = staged(e.fwd_x, pd.src_desc(), scratch, x.raw());
  void* wts = staged(e.fwd_w, pd.weights_desc(), scratch, w.raw());
  void* dst = staged(e.fwd_y, pd.dst_desc(), scratch, y.raw());
  run(e.fwd_x, s, scratch, e.x, x.raw(), pd.src_desc(), src);
  run(e.fwd_w, s, scratch, e.w, w.raw(), pd.weights_desc(), wts);
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, memory(pd.src_desc(), engine(), src)},
      {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), engine(), wts)},
      {DNNL_ARG_DST, memory(pd.dst_desc(), engine(), dst)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(pd.bias_desc(), engine(), b->raw()));
  if (const size_t n = pd.scratchpad_desc().get_size())
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), engine(), scratch.take(n)));
  e.fwd->execute(s, args);
  run(e.fwd_y, s, scratch, pd.dst_desc(), dst, e.y, y.raw());
  s.wait();
  apply_epilogue(ctx, y, p);
  return true;
}

bool conv2d_backward_onednn(const Context& ctx, Tensor* dx, Tensor* dw, const Tensor& dy,
                            const Tensor& x, const Tensor& w, const ops::Conv2dParams& p,
                            bool winograd, ops::DxMode dx_mode, std::string* why) {
  if (x.size(0) == 0 || (!dx && !dw)) return true;  // nothing to add
  const int threads = threads_of(ctx);
  Entry* entry = nullptr;
  if (!guarded(why, [&] {
        entry = &forward_entry(x, w, p, /*bias=*/false, threads, winograd);
        make_backward(*entry, threads);
      }))
    return false;
  Entry& e = *entry;
  if (winograd && over_workspace_limit(std::max(dx ? e.bd_pd->scratchpad_desc().get_size() : 0,
                                                dw ? e.bw_pd->scratchpad_desc().get_size() : 0),
                                       why))
    return false;  // before anything is written
  const OmpThreads omp(threads);
  dnnl::stream s(engine());
  void* dy_raw = dy.raw();
  // dy in the blocked layout both backward primitives read, made once where they read the same.
  const bool share_dy = dx && dw && e.bd_dy.prim && e.bw_dy.prim &&
                        e.bd_pd->diff_dst_desc() == e.bw_pd->diff_dst_desc();
  const memory::desc& dy_md = e.bd_pd->diff_dst_desc();
  Pieces shared(share_dy ? bytes_of(dy_md) + Pieces::round(e.bd_dy.scratch_bytes()) : 0);
  void* dy_blocked = share_dy ? shared.take(dy_md.get_size()) : nullptr;
  if (share_dy) run(e.bd_dy, s, shared, e.y, dy_raw, dy_md, dy_blocked);
  if (dx) {
    const auto& pd = *e.bd_pd;
    // Added into dx through a summing reorder; written over it through a plain one, or by the
    // primitive itself where its layout is dx's.
    const Reorder& out = dx_mode == ops::DxMode::overwrite ? e.bd_dx_over : e.bd_dx;
    Pieces scratch((e.bd_dy.prim && !share_dy ? bytes_of(pd.diff_dst_desc()) : 0) +
                    (e.bd_w.prim ? bytes_of(pd.weights_desc()) : 0) +
                    (out.prim ? bytes_of(pd.diff_src_desc()) : 0) +
                    Pieces::round(pd.scratchpad_desc().get_size()) +
                    Pieces::round(e.bd_dy.scratch_bytes()) + Pieces::round(e.bd_w.scratch_bytes()) +
                    Pieces::round(out.scratch_bytes()));
    void* ddst = share_dy ? dy_blocked : staged(e.bd_dy, pd.diff_dst_desc(), scratch, dy_raw);
    void* wts = staged(e.bd_w, pd.weights_desc(), scratch, w.raw());
    void* dsrc = staged(out, pd.diff_src_desc(), scratch, dx->raw());
    if (!share_dy) run(e.bd_dy, s, scratch, e.y, dy_raw, pd.diff_dst_desc(), ddst);
    run(e.bd_w, s, scratch, e.w, w.raw(), pd.weights_desc(), wts);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_DIFF_DST, memory(pd.diff_dst_desc(), engine(), ddst)},
        {DNNL_ARG_WEIGHTS, memory(pd.weights_desc(), engine(), wts)},
        {DNNL_ARG_DIFF_SRC, memory(pd.diff_src_desc(), engine(), dsrc)}};
    if (const size_t n = pd.scratchpad_desc().get_size())
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), engine(), scratch.take(n)));
    e.bd->execute(s, args);
    run(out, s, scratch, pd.diff_src_desc(), dsrc, e.x, dx->raw());
  }
  if (dw) {
    const auto& pd = *e.bw_pd;
    Pieces scratch((e.bw_x.prim ? bytes_of(pd.src_desc()) : 0) +
                    (e.bw_dy.prim && !share_dy ? bytes_of(pd.diff_dst_desc()) : 0) +
                    bytes_of(pd.diff_weights_desc()) +
                    Pieces::round(pd.scratchpad_desc().get_size()) +
                    Pieces::round(e.bw_x.scratch_bytes()) + Pieces::round(e.bw_dy.scratch_bytes()) +
                    Pieces::round(e.bw_dw.scratch_bytes()));
    void* src = staged(e.bw_x, pd.src_desc(), scratch, x.raw());
    void* ddst = share_dy ? dy_blocked : staged(e.bw_dy, pd.diff_dst_desc(), scratch, dy_raw);
    void* dwts = scratch.take(pd.diff_weights_desc().get_size());  // always: it is added to dW
    run(e.bw_x, s, scratch, e.x, x.raw(), pd.src_desc(), src);
    if (!share_dy) run(e.bw_dy, s, scratch, e.y, dy_raw, pd.diff_dst_desc(), ddst);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, memory(pd.src_desc(), engine(), src)},
        {DNNL_ARG_DIFF_DST, memory(pd.diff_dst_desc(), engine(), ddst)},
        {DNNL_ARG_DIFF_WEIGHTS, memory(pd.diff_weights_desc(), engine(), dwts)}};
    if (const size_t n = pd.scratchpad_desc().get_size())
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(pd.scratchpad_desc(), engine(), scratch.take(n)));
    e.bw->execute(s, args);
    run(e.bw_dw, s, scratch, pd.diff_weights_desc(), dwts, e.w, dw->raw());
  }
  s.wait();
  return true;
}

#endif  // DPX_WITH_ONEDNN

}  // namespace dpx::cpu
