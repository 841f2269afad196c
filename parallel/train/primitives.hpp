// The four primitives of torch.nn.DataParallel, usable on their own (a "vanilla DataParallel"
// is a few lines of them: benchmarks/vanilla_data_parallel.cpp shows it).
//   replicate: k copies of a model;  scatter: k views of a batch along its first dimension;
//   parallel_apply: run f(i) for every replica at once (one thread each);  gather: concatenate.
#pragma once
#include <functional>
#include <vector>

#include "core/context.hpp"
#include "core/tensor.hpp"
#include "layers/model.hpp"

namespace dpx::parallel {

// k deep copies of `model` on `device` (parameters, buffers and train/eval mode).
std::vector<nn::Model> replicate(const nn::Model& model, int k, Device device = Device::cpu());
// Copies the master's parameters and buffers into existing replicas (what DataParallel does
// at the start of every step: the replicas see the weights of the last optimizer step).
void broadcast_weights(const nn::Model& master, std::vector<nn::Model>& replicas);
// Splits `batch` into k contiguous views along dimension 0, sizes differing by at most one
// (torch.chunk semantics: the first chunks get the extra rows). Zero-copy.
std::vector<Tensor> scatter(const Tensor& batch, int k);
// Concatenates tensors along dimension 0 into a new tensor on `device`.
Tensor gather(const std::vector<Tensor>& parts, Device device = Device::cpu());
// Runs fn(i) for i in [0, n) on n threads at once (one OpenMP thread each) and rethrows the
// first exception after all have finished.
void parallel_apply(int n, const std::function<void(int)>& fn);
// master.flat_grads += sum of every replica's flat_grads (in replica order: deterministic).
void reduce_gradients(Context& ctx, nn::Model& master, std::vector<nn::Model>& replicas);

}  // namespace dpx::parallel
