// DataParallel's four primitives (see primitives.hpp): replicate, scatter, gather,
// parallel_apply, and the gradients' reduction into the master.
#include "parallel/train/primitives.hpp"

#include <omp.h>

#include <exception>
#include <mutex>

#include "kernels/op_profile.hpp"
#include "kernels/ops.hpp"

namespace dpx::parallel {

std::vector<nn::Model> replicate(const nn::Model& model, int k, Device device) {
  DPX_CHECK(k >= 1, "replicate: need at least one replica (got ", k, ")");
  std::vector<nn::Model> out;
  out.reserve(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) out.push_back(model.clone(device));
  return out;
}

void broadcast_weights(const nn::Model& master, std::vector<nn::Model>& replicas) {
  for (auto& r : replicas) r.copy_state_from(master);
}

std::vector<Tensor> scatter(const Tensor& batch, int k) {
  DPX_CHECK(k >= 1 && batch.dim() >= 1, "scatter: need k >= 1 and a batch with a first dimension");
  int64_t n = batch.size(0);
  DPX_CHECK(n >= k, "scatter: a batch of ", n, " rows cannot feed ", k,
            " replicas; pass a batch size of at least ", k);
  std::vector<Tensor> parts;
  int64_t base = n / k, extra = n % k, begin = 0;
  for (int i = 0; i < k; ++i) {
    int64_t rows = base + (i < extra ? 1 : 0);
    parts.push_back(batch.slice(begin, begin + rows));
    begin += rows;
  }
  return parts;
}

Tensor gather(const std::vector<Tensor>& parts, Device device) {
  DPX_CHECK(!parts.empty(), "gather: nothing to gather");
  Shape shape = parts[0].shape();
  int64_t rows = 0;
  for (const auto& p : parts) {
    DPX_CHECK(p.dim() == static_cast<int>(shape.size()) && p.dtype() == parts[0].dtype(),
              "gather: parts differ in rank or dtype");
    for (int d = 1; d < p.dim(); ++d)
      DPX_CHECK(p.size(d) == shape[d], "gather: part ", shape_str(p.shape()), " does not match ", shape_str(shape));
    rows += p.size(0);
  }
  shape[0] = rows;
  Tensor out = Tensor::empty(shape, parts[0].dtype(), device);
  int64_t begin = 0;
  for (const auto& p : parts) {
    Tensor dst = out.slice(begin, begin + p.size(0));
    dst.copy_from(p);
    begin += p.size(0);
  }
  return out;
}

void parallel_apply(int n, const std::function<void(int)>& fn) {
  if (n == 1) return fn(0);
  std::exception_ptr first;
  std::mutex mu;
  omp_set_dynamic(0);
  omp_set_max_active_levels(4);  // the replicas' kernels may open their own nested regions
  // The op profiler's switches are the caller's; a traced replica's op spans come back to the
  // caller's thread marked with the replica (the trace draws them on its track).
  const bool counting_ops = ops::profile::counting(), tracing_ops = ops::profile::tracing();
  std::vector<std::vector<ops::profile::OpSpan>> spans(static_cast<size_t>(n));
#pragma omp parallel num_threads(n)
  {
    ops::profile::Counting counted(counting_ops);
    ops::profile::Tracing traced(tracing_ops);
    // Normally one thread per replica; the stride keeps it correct if OpenMP gives fewer.
    for (int i = omp_get_thread_num(); i < n; i += omp_get_num_threads()) {
      const std::vector<ops::profile::OpSpan> before = ops::profile::take_spans();  // the caller's, on thread 0
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
      spans[static_cast<size_t>(i)] = ops::profile::take_spans();
      ops::profile::add_spans(before);
    }
  }
  for (int i = 0; i < n; ++i) {
    for (ops::profile::OpSpan& s : spans[static_cast<size_t>(i)]) s.replica = i;
    ops::profile::add_spans(spans[static_cast<size_t>(i)]);
  }
  if (first) std::rethrow_exception(first);
}

void reduce_gradients(Context& ctx, nn::Model& master, std::vector<nn::Model>& replicas) {
  for (auto& r : replicas) {
    DPX_CHECK(r.num_parameters() == master.num_parameters(), "reduce_gradients: replica differs from master");
    Tensor src = r.flat_grads();
    if (!(src.device() == master.device())) src = src.to(master.device());
    ops::axpy(ctx, master.flat_grads(), 1.f, src);
  }
}

}  // namespace dpx::parallel
