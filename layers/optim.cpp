// SGD and AdamW: torch's argument checks, and a step as a few ops::sgd_step / ops::adamw_step
// calls over runs of trainable parameters in the flat buffers.
#include "layers/optim.hpp"

#include <cstring>
#include <optional>

namespace dpx::nn {

namespace {

bool trainable(const ParamSlot& slot) { return slot.param->requires_grad && slot.numel > 0; }

// Slots are contiguous in registration order, so a run of trainable slots in the same state
// (key) is one range of the flat buffers: one op instead of one per tensor. Calls
// fn(first_slot, end_slot, begin_element, end_element) for each such run.

template <typename Key, typename Fn>
void for_each_trainable_run(const std::vector<ParamSlot>& slots, Key key, Fn fn) {
  size_t i = 0;
  while (i < slots.size()) {
    if (!trainable(slots[i])) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < slots.size() && slots[j].param->requires_grad && key(j) == key(i)) ++j;
    fn(i, j, slots[i].offset, slots[j - 1].offset + slots[j - 1].numel);
    i = j;
  }
}

// A host copy of `t`; the optimizer's own tensors stay where they are.
Tensor host_copy(const Tensor& t) { return t.device().is_cpu() ? t.clone() : t.to(Device::cpu()); }

const Tensor& expect(const std::map<std::string, Tensor>& state, const std::string& name, const char* optimizer,
                     DType dtype, int64_t numel) {
  auto it = state.find(name);
  if (it == state.end()) fail(optimizer, " state: '", name, "' is missing (a checkpoint of another optimizer?)");
  if (it->second.dtype() != dtype || it->second.numel() != numel)
    fail(optimizer, " state: '", name, "' holds ", it->second.numel(), " ", dtype_name(it->second.dtype()),
         " where this model needs ", numel, " ", dtype_name(dtype), " (a checkpoint of another model?)");
  return it->second;
}

Tensor steps_tensor(int64_t steps) {
  Tensor t = Tensor::empty({1}, DType::i64);
  t.data<int64_t>()[0] = steps;
  return t;
}

// Host vector -> i64/u8 tensor and back, for the per-slot bookkeeping.
template <typename T, typename V>
Tensor vector_tensor(const std::vector<V>& v, DType dtype) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, dtype);
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = static_cast<T>(v[i]);
  return t;
}

}  // namespace

std::map<std::string, Tensor> SGD::state() const {
  std::map<std::string, Tensor> out;
  if (momentum_.defined()) out["momentum"] = host_copy(momentum_);
  out["started"] = vector_tensor<uint8_t>(started_, DType::u8);
  out["steps"] = steps_tensor(steps_);
  return out;
}

void SGD::load_state(const std::map<std::string, Tensor>& state) {
  const int64_t slots = static_cast<int64_t>(started_.size());
  const Tensor& started = expect(state, "started", "SGD", DType::u8, slots);
  const Tensor& steps = expect(state, "steps", "SGD", DType::i64, 1);
  if (momentum_.defined())
    momentum_.copy_from(expect(state, "momentum", "SGD", DType::f32, model_->num_parameters()));
  else if (state.count("momentum"))
    fail("SGD state: it has a momentum buffer, but this optimizer has momentum 0 (--momentum differs?)");
  for (int64_t i = 0; i < slots; ++i) started_[static_cast<size_t>(i)] = static_cast<char>(started.data<uint8_t>()[i]);
  steps_ = steps.data<int64_t>()[0];
}

std::map<std::string, Tensor> AdamW::state() const {
  return {{"exp_avg", host_copy(exp_avg_)},
          {"exp_avg_sq", host_copy(exp_avg_sq_)},
          {"slot_steps", vector_tensor<int64_t>(slot_steps_, DType::i64)},
          {"steps", steps_tensor(steps_)}};
}

void AdamW::load_state(const std::map<std::string, Tensor>& state) {
  const int64_t n = model_->num_parameters(), slots = static_cast<int64_t>(slot_steps_.size());
  const Tensor& slot_steps = expect(state, "slot_steps", "AdamW", DType::i64, slots);
  exp_avg_.copy_from(expect(state, "exp_avg", "AdamW", DType::f32, n));
  exp_avg_sq_.copy_from(expect(state, "exp_avg_sq", "AdamW", DType::f32, n));
  for (int64_t i = 0; i < slots; ++i) slot_steps_[static_cast<size_t>(i)] = slot_steps.data<int64_t>()[i];
  steps_ = expect(state, "steps", "AdamW", DType::i64, 1).data<int64_t>()[0];
}

SGD::SGD(Model& model, const ops::SgdParams& params) : model_(&model), p_(params) {
  // The checks torch.optim.SGD makes, with its messages' meaning.
  if (p_.lr < 0.f) fail("SGD: invalid learning rate ", p_.lr, " (must be >= 0)");
  if (p_.momentum < 0.f) fail("SGD: invalid momentum ", p_.momentum, " (must be >= 0)");
  if (p_.weight_decay < 0.f) fail("SGD: invalid weight_decay ", p_.weight_decay, " (must be >= 0)");
  if (p_.nesterov && (p_.momentum <= 0.f || p_.dampening != 0.f))
    fail("SGD: Nesterov momentum requires a momentum > 0 and zero dampening");
  started_.assign(model.slots().size(), 0);
  scalars_ = Tensor::zeros({1}, DType::f32, model.device());
  if (p_.momentum != 0.f)
    momentum_ = Tensor::zeros({model.num_parameters()}, DType::f32, model.device());
}

void SGD::set_lr(float lr) {
  if (lr < 0.f) fail("SGD: invalid learning rate ", lr, " (must be >= 0)");
  p_.lr = lr;
}

void SGD::step(Context& ctx) {
  update(ctx, nullptr, nullptr);
  count_step();
}

void SGD::update(Context& ctx, const Tensor* scalars, const Tensor* skip) const {
  const auto& slots = model_->slots();
  DPX_CHECK(slots.size() == started_.size(), "SGD: the model's parameters changed after the optimizer was made");
  Tensor& params = model_->flat_params();
  Tensor& grads = model_->flat_grads();
  for_each_trainable_run(
      slots, [&](size_t k) { return started_[k]; },
      [&](size_t first, size_t, int64_t begin, int64_t stop) {
        Tensor p = params.view_at(begin, {stop - begin});
        Tensor g = grads.view_at(begin, {stop - begin});
        Tensor m = momentum_.defined() ? momentum_.view_at(begin, {stop - begin}) : Tensor();
        ops::sgd_step(ctx, p, g, m, p_, started_[first] == 0, scalars, skip);
      });
}

// A recorded first step would copy the gradient into the momentum buffer at every replay.
bool SGD::recordable() const {
  if (!momentum_.defined()) return true;
  const auto& slots = model_->slots();
  for (size_t k = 0; k < slots.size(); ++k)
    if (trainable(slots[k]) && !started_[k]) return false;
  return true;
}

void SGD::stage(Context&) { scalars_.copy_from(Tensor::from({1}, {p_.lr})); }

void SGD::record_step(Context& ctx, const Tensor* skip) const { update(ctx, &scalars_, skip); }

// The slots of each run the update made (as it made them: update() leaves started_ alone).
void SGD::count_step() {
  for_each_trainable_run(
      model_->slots(), [&](size_t k) { return started_[k]; },
      [&](size_t first, size_t end, int64_t, int64_t) {
        for (size_t k = first; k < end; ++k) started_[k] = 1;
      });
  ++steps_;
}

AdamW::AdamW(Model& model, const ops::AdamwParams& params) : model_(&model), p_(params) {
  ops::check_adamw_params(p_, "AdamW");
  slot_steps_.assign(model.slots().size(), 0);
  scalars_ = Tensor::zeros({ops::kAdamwScalars}, DType::f32, model.device());
  exp_avg_ = Tensor::zeros({model.num_parameters()}, DType::f32, model.device());
  exp_avg_sq_ = Tensor::zeros({model.num_parameters()}, DType::f32, model.device());
}

void AdamW::set_lr(float lr) {
  ops::AdamwParams p = p_;
  p.lr = lr;
  ops::check_adamw_params(p, "AdamW");
  p_ = p;
}

void AdamW::step(Context& ctx) {
  update(ctx, nullptr, nullptr);
  count_step();
}

void AdamW::update(Context& ctx, const Tensor* scalars, const Tensor* skip) const {
  const auto& slots = model_->slots();
  DPX_CHECK(slots.size() == slot_steps_.size(), "AdamW: the model's parameters changed after the optimizer was made");
  Tensor& params = model_->flat_params();
  Tensor& grads = model_->flat_grads();
  // Every trainable parameter steps together, so there is one run unless some were frozen
  // for a while and have fewer steps (hence another bias correction).
  for_each_trainable_run(
      slots, [&](size_t k) { return slot_steps_[k]; },
      [&](size_t first, size_t, int64_t begin, int64_t stop) {
        Tensor p = params.view_at(begin, {stop - begin});
        Tensor g = grads.view_at(begin, {stop - begin});
        Tensor m = exp_avg_.view_at(begin, {stop - begin});
        Tensor v = exp_avg_sq_.view_at(begin, {stop - begin});
        ops::adamw_step(ctx, p, g, m, v, p_, slot_steps_[first] + 1, scalars, skip);
      });
}

// The updates every trainable parameter has had, where they have had as many: one bias
// correction then serves them all (the scalars stage() writes).
std::optional<int64_t> AdamW::common_steps() const {
  std::optional<int64_t> steps;
  const auto& slots = model_->slots();
  for (size_t k = 0; k < slots.size(); ++k) {
    if (!trainable(slots[k])) continue;
    if (steps && *steps != slot_steps_[k]) return std::nullopt;
    steps = slot_steps_[k];
  }
  return steps.value_or(0);
}

bool AdamW::recordable() const { return common_steps().has_value(); }

void AdamW::stage(Context&) {
  const std::optional<int64_t> steps = common_steps();
  DPX_CHECK(steps, "AdamW: a recorded update needs every parameter at the same step");
  const ops::AdamwScalars s = ops::adamw_scalars(p_, *steps + 1);
  Tensor host = Tensor::empty({ops::kAdamwScalars});
  std::memcpy(host.data<float>(), &s, sizeof s);
  scalars_.copy_from(host);
}

void AdamW::record_step(Context& ctx, const Tensor* skip) const { update(ctx, &scalars_, skip); }

void AdamW::count_step() {
  for_each_trainable_run(
      model_->slots(), [&](size_t k) { return slot_steps_[k]; },
      [&](size_t first, size_t end, int64_t, int64_t) {
        for (size_t k = first; k < end; ++k) ++slot_steps_[k];
      });
  ++steps_;
}

}  // namespace dpx::nn
