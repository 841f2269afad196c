// Recursive halving/doubling (Rabenseifner): reduce-scatter by recursive halving (log2 p exchanges
// with partners ever closer, the data halving each time), then all-gather by recursive doubling.
// For n not a power of two, p = 2^floor(log2 n) ranks take part; each of the rem = n - p extra
// ranks first folds its data into a partner and gets the result back at the end. Gather and
// scatter are the doubling and halving halves alone, over ranges of per-rank blocks.
#include "core/error.hpp"
#include "parallel/comm/algorithms/schedule.hpp"

namespace dpx::parallel::impl {

namespace {

// Who takes part. Ranks are taken relative to the root (v = r - root mod n), so the root is
// always participant 0. Among the first 2*rem relative ranks, even v take part and odd v are
// extras paired with v-1; the others take part directly. Participant j then stands for the
// relative ranks [first(j), first(j+1)), a contiguous range, which is what lets all_gather
// and reduce_scatter use per-rank blocks.
struct Fold {
  Fold(int n, int r, int root) : n(n), root(root) {
    while (p * 2 <= n) p *= 2;
    rem = n - p;
    const int v = mod(r - root, n);
    if (v < 2 * rem && v % 2 == 1) {
      extra = true;
      partner = mod(v - 1 + root, n);
    } else {
      j = v < 2 * rem ? v / 2 : v - rem;
      if (v < 2 * rem) partner = mod(v + 1 + root, n);
    }
  }
  int first(int participant) const { return participant < rem ? 2 * participant : participant + rem; }
  int real(int participant) const { return mod(first(participant) + root, n); }
  // Participant blocks over per-rank blocks of `per_rank` elements (root 0).
  Blocks rank_groups(size_t per_rank) const {
    Blocks b;
    for (int q = 0; q <= p; ++q) b.off.push_back(static_cast<size_t>(q == p ? n : first(q)) * per_rank);
    return b;
  }

  int n, root, p = 1, rem = 0;
  bool extra = false;
  int partner = -1;  // the extra's participant, or the participant's extra (-1: none)
  int j = -1;        // participant index, -1 for extras
};

// Participant j ends with block j of work reduced over all ranks. At each step it keeps the half
// of its range that holds block j, sends the other half to the partner j ^ mask and adds the
// partner's copy of the kept half. Until work holds data (after a fold or a first step),
// this rank's own data is read from send.
void halving_reduce_scatter(const Sched& s, const Fold& f, const void* send, std::byte* work, const Blocks& b,
                            bool work_holds_data) {
  int lo = 0, hi = f.p;
  for (int mask = f.p / 2; mask >= 1; mask /= 2) {
    const int mid = lo + mask, partner = f.real(f.j ^ mask);
    const bool upper = f.j & mask;
    const int keep_lo = upper ? mid : lo, keep_hi = upper ? hi : mid;
    const int give_lo = upper ? lo : mid, give_hi = upper ? mid : hi;
    const void* src = work_holds_data ? static_cast<const void*>(work) : send;
    s.sendrecv_reduce(partner, s.at(src, b.begin(give_lo)), b.span(give_lo, give_hi), partner,
                      s.at(work, b.begin(keep_lo)), s.at(src, b.begin(keep_lo)), b.span(keep_lo, keep_hi));
    work_holds_data = true;  // the kept range, which is all later steps touch
    lo = keep_lo;
    hi = keep_hi;
  }
}

// Participant j starts with block j of buf; exchanging ever larger aligned ranges with j ^ mask
// gives every participant all p blocks.
void doubling_all_gather(const Sched& s, const Fold& f, std::byte* buf, const Blocks& b) {
  int lo = f.j, width = 1;
  for (int mask = 1; mask < f.p; mask *= 2) {
    const int partner = f.real(f.j ^ mask), other = lo ^ mask;
    s.sendrecv(partner, s.at(buf, b.begin(lo)), b.span(lo, lo + width), partner, s.at(buf, b.begin(other)),
               b.span(other, other + width));
    lo = lo < other ? lo : other;
    width *= 2;
  }
}

// Participant blocks of one buffer (block j of b is participant j's), moved as ranges.
struct ParticipantBlocks {
  const Sched& s;
  std::byte* buf;
  const Blocks& b;
  void send(int peer, int lo, int hi) const { s.send(peer, s.at(buf, b.begin(lo)), b.span(lo, hi)); }
  void recv(int peer, int lo, int hi) const { s.recv(peer, s.at(buf, b.begin(lo)), b.span(lo, hi)); }
};

// Participant ranges as ranges of per-rank blocks (gather, scatter): participant j stands for
// the relative ranks [first(j), first(j+1)).
struct ParticipantRanks {
  const Fold& f;
  const RelativeBlocks& held;
  void send(int peer, int lo, int hi) const { held.send(peer, f.first(lo), f.first(hi)); }
  void recv(int peer, int lo, int hi) const { held.recv(peer, f.first(lo), f.first(hi)); }
};

// Participant 0 holds every block; halving the ranges hands block j to participant j.
template <typename Held>
void halving_scatter(const Fold& f, const Held& held) {
  for (int mask = f.p / 2; mask >= 1; mask /= 2) {
    const int j = f.j;
    if (j % (2 * mask) == 0)
      held.send(f.real(j + mask), j + mask, j + 2 * mask);
    else if (j % (2 * mask) == mask)
      held.recv(f.real(j - mask), j, j + mask);
  }
}

// The reverse: participant j holds block j; doubling ranges collect all of them at participant 0.
template <typename Held>
void doubling_gather(const Fold& f, const Held& held) {
  for (int mask = 1; mask < f.p; mask *= 2) {
    const int j = f.j;
    if (j & mask) {
      held.send(f.real(j - mask), j, j + mask);
      return;
    }
    held.recv(f.real(j + mask), j + mask, j + 2 * mask);
  }
}

// Where a participant of a rooted gather or scatter keeps its blocks (held_blocks): those of the
// relative ranks it gathers or scatters, [first(j), first(j + lowbit(j))).
RelativeBlocks participant_blocks(const Sched& s, const Fold& f, std::byte* whole, std::byte* own) {
  const int lo = f.first(f.j), hi = f.j == 0 ? s.ranks : f.first(f.j + (f.j & -f.j));
  return held_blocks(s, f.j == 0, lo, hi, whole, own);
}

void all_reduce(const Sched& s) {
  const CollectiveArgs& a = s.args;
  std::byte* recv = static_cast<std::byte*>(a.recv);
  Fold f(s.ranks, s.rank, 0);
  if (f.extra) {
    s.send(f.partner, a.send, a.count);
    s.recv(f.partner, recv, a.count);
    return;
  }
  if (f.partner >= 0) s.recv_reduce(f.partner, recv, a.send, a.count);
  Blocks b = even_blocks(a.count, f.p);
  halving_reduce_scatter(s, f, a.send, recv, b, f.partner >= 0);
  s.finish_avg(s.at(recv, b.begin(f.j)), b.size(f.j));
  doubling_all_gather(s, f, recv, b);
  if (f.partner >= 0) s.send(f.partner, recv, a.count);
}

void reduce_scatter(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const size_t c = a.count, total = c * s.ranks;
  Fold f(s.ranks, s.rank, 0);
  if (f.extra) {
    s.send(f.partner, a.send, total);
    s.recv(f.partner, a.recv, c);
    return;
  }
  std::byte* work = s.scratch(total);
  if (f.partner >= 0) s.recv_reduce(f.partner, work, a.send, total);
  Blocks b = f.rank_groups(c);
  halving_reduce_scatter(s, f, a.send, work, b, f.partner >= 0);
  s.finish_avg(s.at(work, b.begin(f.j)), b.size(f.j));
  if (f.partner >= 0) s.send(f.partner, s.at(work, f.partner * c), c);
  s.copy(a.recv, s.at(work, s.rank * c), c);
}

void all_gather(const Sched& s) {
  const CollectiveArgs& a = s.args;
  const size_t c = a.count;
  std::byte* recv = static_cast<std::byte*>(a.recv);
  Fold f(s.ranks, s.rank, 0);
  s.copy(s.at(recv, s.rank * c), a.send, c);
  if (f.extra) {
    s.send(f.partner, s.at(recv, s.rank * c), c);
    s.recv(f.partner, recv, c * s.ranks);
    return;
  }
  if (f.partner >= 0) s.recv(f.partner, s.at(recv, f.partner * c), c);
  doubling_all_gather(s, f, recv, f.rank_groups(c));
  if (f.partner >= 0) s.send(f.partner, recv, c * s.ranks);
}

// Broadcast = scatter by recursive halving + all-gather by recursive doubling (van de Geijn).
void broadcast(const Sched& s) {
  const CollectiveArgs& a = s.args;
  std::byte* recv = static_cast<std::byte*>(a.recv);
  Fold f(s.ranks, s.rank, a.root);
  if (s.rank == a.root) s.copy(recv, a.send, a.count);
  if (f.extra) {
    s.recv(f.partner, recv, a.count);
    return;
  }
  Blocks b = even_blocks(a.count, f.p);
  halving_scatter(f, ParticipantBlocks{s, recv, b});
  doubling_all_gather(s, f, recv, b);
  if (f.partner >= 0) s.send(f.partner, recv, a.count);
}

// Reduce = reduce-scatter by recursive halving + gather of the blocks at the root.
void reduce(const Sched& s) {
  const CollectiveArgs& a = s.args;
  Fold f(s.ranks, s.rank, a.root);
  if (f.extra) {
    s.send(f.partner, a.send, a.count);
    return;
  }
  std::byte* work = s.rank == a.root ? static_cast<std::byte*>(a.recv) : s.scratch(a.count);
  if (f.partner >= 0) s.recv_reduce(f.partner, work, a.send, a.count);
  Blocks b = even_blocks(a.count, f.p);
  halving_reduce_scatter(s, f, a.send, work, b, f.partner >= 0);
  s.finish_avg(s.at(work, b.begin(f.j)), b.size(f.j));
  doubling_gather(f, ParticipantBlocks{s, work, b});
}

// Gather = the extras hand their block to their partner, then doubling ranges of participants'
// blocks collect everything at the root (participant 0). A participant that only ever sends
// its own block sends it straight from send.
void gather(const Sched& s) {
  const CollectiveArgs& a = s.args;
  Fold f(s.ranks, s.rank, a.root);
  if (f.extra) return s.send(f.partner, a.send, a.count);
  const int v = f.first(f.j);
  const RelativeBlocks held =
      participant_blocks(s, f, static_cast<std::byte*>(a.recv), static_cast<std::byte*>(const_cast<void*>(a.send)));
  s.copy(held.at(v), a.send, a.count);
  if (f.partner >= 0) held.recv(f.partner, v + 1, v + 2);
  doubling_gather(f, ParticipantRanks{f, held});
}

// Scatter = the mirror image: halving ranges hand every participant its ranks' blocks, then
// each hands its extra partner that one's block.
void scatter(const Sched& s) {
  const CollectiveArgs& a = s.args;
  Fold f(s.ranks, s.rank, a.root);
  if (f.extra) return s.recv(f.partner, a.recv, a.count);
  const int v = f.first(f.j);
  const RelativeBlocks held =
      participant_blocks(s, f, static_cast<std::byte*>(const_cast<void*>(a.send)), static_cast<std::byte*>(a.recv));
  halving_scatter(f, ParticipantRanks{f, held});
  if (f.partner >= 0) held.send(f.partner, v + 1, v + 2);
  s.copy(a.recv, held.at(v), a.count);
}

// ---- the cost terms of the schedules above (cost.hpp) -------------------------------------------

CostTerms all_reduce_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(2 * v.l, 2 * v.halving, v.halving).step(2 * v.e, 2 * v.e * v.n, v.e * v.n);
}

CostTerms broadcast_cost(const CallShape& s) {  // scatter + all-gather
  const CostVars v(s);
  return CostTerms{}.step(2 * v.l, 2 * v.halving).step(v.e, v.e * v.n);
}

CostTerms reduce_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(2 * v.l, 2 * v.halving, v.halving).step(v.e, v.e * v.n, v.e * v.n);
}

// Recursive doubling all-gather (and halving reduce-scatter) over rank groups when p is not a
// power of two: participants 0 .. rem-1 stand for two ranks, the others for one, so the busiest
// participant's ranges grow by 2^k + min(2^k, rem) blocks at step k. In blocks of n / p.
double group_doubling_blocks(const CostVars& v) {
  const int q = static_cast<int>(v.q), rem = v.p - q;
  double blocks = 0;
  for (int k = 1; k < q; k *= 2) blocks += k + std::min(k, rem);
  return blocks;
}

CostTerms all_gather_cost(const CallShape& s) {
  const CostVars v(s);
  return CostTerms{}.step(v.l, group_doubling_blocks(v) * v.n / v.P).step(2 * v.e, v.e * (v.n / v.P + v.n));
}

CostTerms reduce_scatter_cost(const CallShape& s) {
  const CostVars v(s);
  const double halving = group_doubling_blocks(v) * v.n / v.P;
  return CostTerms{}.step(v.l, halving, halving).step(2 * v.e, v.e * (v.n + v.n / v.P), v.e * v.n);
}

CostTerms gather_cost(const CallShape& s) {  // gather and scatter: l steps, and the extra's block
  const CostVars v(s);
  return CostTerms{}.step(v.L, v.ring);
}

}  // namespace

constinit const Schedules rhd_schedules = {
    .all_reduce = {all_reduce, all_reduce_cost, "2(l+e) a + 2((q-1)/q + e) n b + ((q-1)/q + e) n g"},
    .broadcast = {broadcast, broadcast_cost, "(2l+e) a + (2(q-1)/q + e) n b"},
    .reduce = {reduce, reduce_cost, "(2l+e) a + (2(q-1)/q + e) n b + ((q-1)/q + e) n g"},
    .all_gather = {all_gather, all_gather_cost,
                   "(l+2e) a + (D/p + e(1/p + 1)) n b, D = sum over k<l of 2^k + min(2^k, p-q)"},
    .reduce_scatter = {reduce_scatter, reduce_scatter_cost,
                       "(l+2e) a + (D/p + e(1 + 1/p)) n b + (D/p + e) n g, D as all_gather's"},
    .gather = {gather, gather_cost, "L a + (p-1)/p n b"},
    .scatter = {scatter, gather_cost, "L a + (p-1)/p n b"},
};

}  // namespace dpx::parallel::impl
