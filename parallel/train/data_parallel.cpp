// DataParallel with torch.nn.DataParallel's semantics, in one process: a master scatters the
// global batch, copies its weights into the replicas every step, runs them in parallel
// (one thread each), gathers the outputs, computes the loss, scatters the output gradients,
// runs the replicas' backward in parallel and sums their gradients into itself before its
// optimizer step. One deviation, documented in docs/data-parallelism.md: replica 0's batch-norm running
// statistics are copied back to the master (PyTorch drops every replica's buffer updates).
//
// The master runs the same train_loop and train_step as an SPMD rank (train_step.hpp); what
// differs is here: the step's model (ReplicatedModel: scatter, replicas in parallel, gather)
// and its gradient reduction (SumIntoMaster), and one record per replica. With --devices
// cuda:0,cuda:1 the master lives on the first GPU and replica i on the i-th, with peer copies.
#include <algorithm>
#include <mutex>

#include "core/clock.hpp"
#include "core/data/loader.hpp"
#include "layers/optim.hpp"
#include "parallel/train/primitives.hpp"
#include "parallel/train/train_step.hpp"

namespace dpx::parallel {

namespace {

void copy_buffers(nn::Model& dst, nn::Model& src) {
  auto d = dst.root().named_buffers();
  auto s = src.root().named_buffers();
  for (size_t i = 0; i < d.size(); ++i) d[i].second->copy_from(*s[i].second);
}

// The master's device for DataParallel on GPUs: the master GPU's CudaEnv, every phase timed on
// the host with a wait for the device at its end. DataParallel's copies between GPUs are
// synchronous and each replica's work is waited for before the master goes on, so host times are
// the device's; device events on the master's stream alone would count the replicas' work and
// the copies inside forward.
class WaitingEnv final : public DeviceEnv {
 public:
  explicit WaitingEnv(std::unique_ptr<DeviceEnv> inner) : inner_(std::move(inner)) { ctx_ = inner_->ctx(); }
  Tensor upload(const Tensor& host) override { return inner_->upload(host); }
  void mark(Phase, Edge e) override {
    if (e == Edge::end) inner_->synchronize();
  }
  void finish_step(StepTimes&) override { inner_->synchronize(); }
  void synchronize() override { inner_->synchronize(); }

 private:
  std::unique_ptr<DeviceEnv> inner_;
};

// The master's forward and backward over k replicas, one thread each.
class ReplicatedModel final : public StepModel {
 public:
  // Replica i computes in envs[i]: on the CPU, with a replica's share of the threads; on GPUs on
  // envs[i]'s device with its stream (replica 0 on the master's GPU, as torch.nn.DataParallel's
  // device_ids[0]), the batch scattered from and the outputs gathered to the master's GPU by
  // peer copies.
  ReplicatedModel(nn::Model& master, std::vector<std::unique_ptr<DeviceEnv>> envs, DeviceEnv& master_env)
      : master_(master), envs_(std::move(envs)), master_env_(master_env), fwd_(envs_.size()), bwd_(envs_.size()),
        bwd_end_(envs_.size()) {
    for (auto& env : envs_) {
      ctxs_.push_back(env->ctx());
      replicas_.push_back(master.clone(env->ctx().device));
    }
  }

  nn::Model& master() override { return master_; }
  std::vector<nn::Model>& replicas() { return replicas_; }

  void train() override {
    master_.train();
    for (auto& r : replicas_) r.train();
  }

  Tensor forward(Context&, const Tensor& images, StepPhases& phases) override {
    {
      auto scope = phases.scope(Phase::comm_total);  // replicate + scatter
      master_env_.synchronize();                      // the last optimizer step, before its weights are copied
      broadcast_weights(master_, replicas_);
      inputs_ = to_replicas(scatter(images, k()));
    }
    std::vector<Tensor> outputs(ctxs_.size());
    const double t = now_s();
    parallel_apply(k(), [&](int i) {
      const double s = now_s();
      outputs[i] = replicas_[i].forward(ctxs_[i], inputs_[i]);
      envs_[i]->synchronize();  // the replica's GPU work is its forward time
      fwd_[i] = now_s() - s;
    });
    parallel_fwd_ = now_s() - t;
    auto scope = phases.scope(Phase::comm_total);
    return gather(outputs, master_.device());
  }

  void backward(Context&, const Tensor& dlogits, StepPhases& phases) override {
    std::vector<Tensor> grads;
    {
      auto scope = phases.scope(Phase::comm_total);
      grads = to_replicas(scatter(dlogits, k()));
    }
    const double t = now_s();
    parallel_apply(k(), [&](int i) {
      const double s = now_s();
      replicas_[i].zero_grad(ctxs_[i]);
      replicas_[i].backward(ctxs_[i], grads[i]);
      envs_[i]->synchronize();
      bwd_end_[i] = now_s();
      bwd_[i] = bwd_end_[i] - s;
    });
    parallel_bwd_ = now_s() - t;
  }

  // One record per replica: its share of the batch, its own compute in forward and backward
  // (the master's loss and loss gradient, plus the replica's part of the parallel region), and
  // its end of backward, from which `wait` follows (fill_wait_times).
  std::vector<StepRecord> records(const StepRecord& step) override {
    std::vector<StepRecord> out;
    for (int i = 0; i < k(); ++i) {
      StepRecord r = step;
      r.rank = i;
      r.times[Phase::forward] = step.times[Phase::forward] - parallel_fwd_ + fwd_[i];
      r.times[Phase::backward] = step.times[Phase::backward] - parallel_bwd_ + bwd_[i];
      r.times[Phase::comm_exposed] = step.times[Phase::comm_total];  // nothing overlaps in DataParallel
      r.backward_end_s = bwd_end_[i];
      r.images = inputs_[i].size(0);
      r.memory = memory_peaks(envs_[i]->ctx().device);  // each replica's GPU (the host's on the CPU)
      out.push_back(r);
    }
    return out;
  }

 private:
  int k() const { return static_cast<int>(replicas_.size()); }
  // Each part on its replica's device: a peer copy from the master's GPU (views on the CPU).
  std::vector<Tensor> to_replicas(std::vector<Tensor> parts) const {
    for (size_t i = 0; i < parts.size(); ++i)
      if (!(parts[i].device() == ctxs_[i].device)) parts[i] = parts[i].to(ctxs_[i].device);
    return parts;
  }

  nn::Model& master_;
  std::vector<std::unique_ptr<DeviceEnv>> envs_;
  DeviceEnv& master_env_;
  std::vector<nn::Model> replicas_;
  std::vector<Context> ctxs_;
  std::vector<Tensor> inputs_;                  // this step's scattered batch
  std::vector<double> fwd_, bwd_, bwd_end_;     // per replica: compute time, end of backward
  double parallel_fwd_ = 0, parallel_bwd_ = 0;  // the parallel regions' wall times
};

// The gradient reduction: every step, the replicas' gradients are summed into the master's
// (which accumulates them over the micro-steps of --accumulate).
class SumIntoMaster final : public GradSync {
 public:
  explicit SumIntoMaster(ReplicatedModel& model) : model_(model) {}
  void finish(Context& ctx, StepPhases& phases) override {
    auto scope = phases.scope(Phase::comm_total);
    reduce_gradients(ctx, model_.master(), model_.replicas());
    copy_buffers(model_.master(), model_.replicas()[0]);
  }

 private:
  ReplicatedModel& model_;
};

}  // namespace

void run_data_parallel(Job& job, TrainReport& report, const TrainHooks& hooks) {
  const int k = job.ranks;
  const TrainOptions& o = job.options;
  const std::vector<int> gpus = o.cuda_devices();
  std::unique_ptr<DeviceEnv> env =
      gpus.empty() ? make_device_env(Device::cpu(), job.threads_per_rank * k, o.reference_kernels())
                   : std::make_unique<WaitingEnv>(make_device_env(Device::cuda(gpus[0]), 1, false));
  apply_math(env->ctx(), o);
  nn::Model master = job.copy_initial(env->ctx().device, 1);
  if (!gpus.empty()) enable_peer_access(gpus);
  std::vector<std::unique_ptr<DeviceEnv>> envs;
  for (int i = 0; i < k; ++i) {
    envs.push_back(gpus.empty() ? make_device_env(Device::cpu(), job.threads_per_rank, o.reference_kernels())
                                : make_device_env(Device::cuda(gpus[static_cast<size_t>(i)]), 1, false));
    apply_math(envs.back()->ctx(), o);
  }
  ReplicatedModel model(master, std::move(envs), *env);
  SumIntoMaster sync(model);
  std::unique_ptr<nn::Optimizer> optimizer = job.make_optimizer(master);
  data::DataLoader loader(job.train_set, job.train_loader(0, 1, job.rank_batch * k));  // the global batch
  Rank r(job, 0, *env, model, sync, *optimizer, loader);
  std::mutex report_mu;
  train_loop(r, nullptr, nullptr, report, report_mu, hooks);
  report.loader.add(loader.stats());
}

}  // namespace dpx::parallel
