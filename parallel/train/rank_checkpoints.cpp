// RankCheckpoints (see rank_checkpoints.hpp). What each rank hands to rank 0 is one byte
// string: its random streams (a count, then name length, name, seed, stream and draws each),
// then its step records since the last checkpoint, as raw StepRecords.
#include "parallel/train/rank_checkpoints.hpp"

#include <cstring>

#include "core/clock.hpp"
#include "core/error.hpp"
#include "parallel/comm/gather.hpp"

namespace dpx::parallel {

namespace {

void put_bytes(std::vector<std::byte>& out, const void* p, size_t n) {
  const size_t at = out.size();
  out.resize(at + n);
  if (n > 0) std::memcpy(out.data() + at, p, n);
}

template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  put_bytes(out, &v, sizeof v);
}

template <typename T>
T take(const std::vector<std::byte>& in, size_t& at) {
  DPX_CHECK(at + sizeof(T) <= in.size(), "a checkpoint part ended early");
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

std::vector<std::byte> encode(const RandomStreams& streams, const StepRecord* records, size_t count) {
  std::vector<std::byte> out;
  put(out, static_cast<uint64_t>(streams.size()));
  for (const auto& [name, s] : streams) {
    put(out, static_cast<uint64_t>(name.size()));
    put_bytes(out, name.data(), name.size());
    put(out, s.seed);
    put(out, s.stream);
    put(out, s.draws);
  }
  for (size_t i = 0; i < count; ++i) put(out, records[i]);
  return out;
}

void decode(const std::vector<std::byte>& in, RandomStreams& streams, std::vector<StepRecord>& records) {
  size_t at = 0;
  const auto layers = take<uint64_t>(in, at);
  for (uint64_t i = 0; i < layers; ++i) {
    const auto length = take<uint64_t>(in, at);
    DPX_CHECK(at + length <= in.size(), "a checkpoint part ended early");
    std::string name(reinterpret_cast<const char*>(in.data() + at), length);
    at += length;
    nn::RandomState s;
    s.seed = take<uint64_t>(in, at);
    s.stream = take<uint64_t>(in, at);
    s.draws = take<uint64_t>(in, at);
    streams.emplace_back(std::move(name), s);
  }
  while (at < in.size()) records.push_back(take<StepRecord>(in, at));
}

}  // namespace

RankCheckpoints::RankCheckpoints(const Job& job, int rank, double origin_s)
    : job_(job), rank_(rank), origin_s_(origin_s), last_update_(job.resume ? job.resume->progress.global_step : 0) {
  if (job.resume && rank == 0) records_ = job.resume->steps;
}

bool RankCheckpoints::due_after_update(int64_t steps_done) {
  const int64_t every = job_.options.checkpoint_every, before = last_update_;
  last_update_ = steps_done;
  // A multiple of `every` passed since the last update: with --accumulate the updates come every
  // few steps, and each multiple is checkpointed once, at the update that covers it.
  return enabled() && every > 0 && steps_done / every > before / every;
}

std::string RankCheckpoints::save(Communicator* comm, nn::Model& model, const nn::Optimizer& optimizer,
                                  const RunProgress& at, const std::vector<StepRecord>& mine,
                                  const std::vector<EpochRecord>& epochs, const data::DataLoader& loader) {
  std::vector<std::byte> part = encode(random_streams(model), mine.data() + saved_, mine.size() - saved_);
  saved_ = mine.size();
  std::vector<std::vector<std::byte>> parts;
  if (comm) parts = gather_bytes(*comm, part);
  else parts.push_back(std::move(part));
  if (rank_ != 0) return "";

  Checkpoint c;
  c.options = job_.options.flag_values();
  c.ranks = job_.ranks;
  c.progress = at;
  c.progress.elapsed_s = now_s() - origin_s_;  // origin is on rank 0's clock, which is this one's
  for (auto& [name, t] : model.state_dict()) c.model[name] = t;
  c.optimizer = optimizer.state();
  for (const auto& bytes : parts) {
    RandomStreams streams;
    std::vector<StepRecord> records;
    decode(bytes, streams, records);
    c.random.push_back(std::move(streams));
    for (StepRecord& r : records) {  // times from the run's start, so a resumed run can place them
      r.start_s -= origin_s_;
      r.backward_end_s -= origin_s_;
      records_.push_back(r);
    }
  }
  if (at.epoch < job_.options.epochs) c.order = loader.epoch_order(at.epoch);
  c.steps = records_;
  c.epochs = epochs;
  return write_checkpoint(job_.options.checkpoint_dir, c, job_.options.keep_checkpoints);
}

}  // namespace dpx::parallel
