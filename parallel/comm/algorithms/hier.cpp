// The hierarchical schedule (--algo hier), as NCCL and Horovod run collectives across nodes:
// inside each node a binomial tree to the node's leader (its lowest rank), then one step
// across nodes among the leaders only, then a tree inside each node again. Only the leaders'
// step crosses the network, once per node instead of once per rank. Written over sub-groups of
// the transport's ranks, with the other schedules (tree, ring) running inside them.
#include <algorithm>
#include <map>

#include "parallel/comm/algorithms/schedule.hpp"

namespace dpx::parallel::impl {

namespace {

// A subset of a transport's ranks as a transport of its own: its rank i is members[i]. Bytes
// are counted by the parent, whose exchange() it calls.
class SubTransport final : public Transport {
 public:
  SubTransport(Transport& parent, const std::vector<int>& members) : parent_(parent), members_(members) {
    const auto it = std::find(members_.begin(), members_.end(), parent.rank());
    rank_ = it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string_view name() const override { return parent_.name(); }
  bool accepts(Device device) const override { return parent_.accepts(device); }
  void copy_local(void* dst, const void* src, size_t bytes) override { parent_.copy_local(dst, src, bytes); }
  void average_local(void* data, size_t count, DType dtype, int ranks) override {
    parent_.average_local(data, count, dtype, ranks);
  }
  std::byte* scratch(size_t bytes, int slot) override { return parent_.scratch(bytes, slot); }

 protected:
  void do_exchange(const Exchange& x) override {
    Exchange y = x;
    if (y.send_peer >= 0) y.send_peer = members_[static_cast<size_t>(y.send_peer)];
    if (y.recv_peer >= 0) y.recv_peer = members_[static_cast<size_t>(y.recv_peer)];
    parent_.exchange(y);
  }

 private:
  Transport& parent_;
  const std::vector<int>& members_;
  int rank_ = -1;
};

// The ranks grouped by node: nodes in the order of their lowest rank, members ascending.
struct Topology {
  std::vector<std::vector<int>> nodes;
  std::vector<int> leaders;  // leaders[i] = nodes[i][0]
  std::vector<int> node_index;  // per rank: its node's index in `nodes`
  int mine = 0;                 // this rank's node index

  explicit Topology(const Sched& s) : node_index(static_cast<size_t>(s.ranks)) {
    std::map<int, int> index_of;  // node id -> index
    for (int q = 0; q < s.ranks; ++q) {
      auto [it, added] = index_of.try_emplace(s.transport.node_of(q), static_cast<int>(nodes.size()));
      if (added) nodes.emplace_back();
      nodes[static_cast<size_t>(it->second)].push_back(q);
      node_index[static_cast<size_t>(q)] = it->second;
    }
    for (const auto& members : nodes) leaders.push_back(members.front());
    mine = node_index[static_cast<size_t>(s.rank)];
  }
  int count() const { return static_cast<int>(nodes.size()); }
  const std::vector<int>& local() const { return nodes[static_cast<size_t>(mine)]; }
  bool leader(int rank) const { return leaders[static_cast<size_t>(node_index[static_cast<size_t>(rank)])] == rank; }
};

// Runs one collective of dpx's `algo` on a sub-group, in this call's dtype.
void run_on(Transport& group, Algorithm algo, Collective kind, const void* send, void* recv, size_t count,
            const Sched& s, int root = 0) {
  run_algorithm(algo, group, {kind, send, recv, count, s.args.dtype, s.op, root}, s.workspace);
}

void hier_all_reduce(const Sched& s, const Topology& topo) {
  const CollectiveArgs& a = s.args;
  SubTransport local(s.transport, topo.local());
  const bool leader = topo.leader(s.rank);
  run_on(local, Algorithm::tree, Collective::reduce, a.send, leader ? a.recv : nullptr, a.count, s);
  if (leader && topo.count() > 1) {
    SubTransport across(s.transport, topo.leaders);
    run_on(across, Algorithm::ring, Collective::all_reduce, a.recv, a.recv, a.count, s);
  }
  if (leader) s.finish_avg(a.recv, a.count);  // once, before the copies go out: every rank bitwise alike
  run_on(local, Algorithm::tree, Collective::broadcast, a.recv, a.recv, a.count, s);
}

void hier_broadcast(const Sched& s, const Topology& topo) {
  const CollectiveArgs& a = s.args;
  const int root_node = topo.node_index[static_cast<size_t>(a.root)];
  const int root_leader = topo.leaders[static_cast<size_t>(root_node)];
  if (s.rank == a.root) s.copy(a.recv, a.send, a.count);
  if (a.root != root_leader) {  // the root hands the data to its node's leader first
    if (s.rank == a.root) s.send(root_leader, a.recv, a.count);
    if (s.rank == root_leader) s.recv(a.root, a.recv, a.count);
  }
  if (topo.leader(s.rank) && topo.count() > 1) {
    SubTransport across(s.transport, topo.leaders);
    run_on(across, Algorithm::tree, Collective::broadcast, a.recv, a.recv, a.count, s, root_node);
  }
  SubTransport local(s.transport, topo.local());
  run_on(local, Algorithm::tree, Collective::broadcast, a.recv, a.recv, a.count, s);
}

void hier_reduce(const Sched& s, const Topology& topo) {
  const CollectiveArgs& a = s.args;
  const int root_node = topo.node_index[static_cast<size_t>(a.root)];
  const int root_leader = topo.leaders[static_cast<size_t>(root_node)];
  const bool leader = topo.leader(s.rank);
  // A leader sums its node into the root's recv if it is the root, else into scratch slot 1
  // (the sub-schedules below use slot 0).
  std::byte* acc = !leader           ? nullptr
                   : s.rank == a.root ? static_cast<std::byte*>(a.recv)
                                      : s.scratch(a.count, 1);
  SubTransport local(s.transport, topo.local());
  run_on(local, Algorithm::tree, Collective::reduce, a.send, acc, a.count, s);
  if (leader && topo.count() > 1) {
    SubTransport across(s.transport, topo.leaders);
    run_on(across, Algorithm::tree, Collective::reduce, acc, topo.mine == root_node ? acc : nullptr, a.count, s,
           root_node);
  }
  if (a.root != root_leader) {
    if (s.rank == root_leader) s.send(a.root, acc, a.count);
    if (s.rank == a.root) s.recv(root_leader, a.recv, a.count);
  }
  if (s.rank == a.root) s.finish_avg(a.recv, a.count);
}

// The leaders' ring over buf's blocks (count elements each, one per rank), chunk i being node i's
// blocks, passed block by block (a node's ranks need not be consecutive, so its blocks need not be
// either). At step t leader i sends node i - shift - t's chunk and receives node i - shift - t - 1's,
// copying it in (an all-gather, shift 0) or adding it in (a reduce-scatter, shift 1).
void leader_ring(const Sched& s, const Topology& topo, std::byte* buf, int shift, bool reduce) {
  const size_t c = s.args.count;
  const int nodes = topo.count(), i = topo.mine;
  const int right = topo.leaders[static_cast<size_t>(mod(i + 1, nodes))];
  const int left = topo.leaders[static_cast<size_t>(mod(i - 1, nodes))];
  for (int step = 0; step + 1 < nodes; ++step) {
    const std::vector<int>& out = topo.nodes[static_cast<size_t>(mod(i - shift - step, nodes))];
    const std::vector<int>& in = topo.nodes[static_cast<size_t>(mod(i - shift - step - 1, nodes))];
    for (size_t b = 0; b < std::max(out.size(), in.size()); ++b) {
      const bool sends = b < out.size(), receives = b < in.size();
      const int to = sends ? right : -1, from = receives ? left : -1;
      std::byte* src = sends ? s.at(buf, out[b] * c) : nullptr;
      std::byte* dst = receives ? s.at(buf, in[b] * c) : nullptr;
      if (reduce) s.sendrecv_reduce(to, src, sends ? c : 0, from, dst, dst, receives ? c : 0);
      else s.sendrecv(to, src, sends ? c : 0, from, dst, receives ? c : 0);
    }
  }
}

void hier_all_gather(const Sched& s, const Topology& topo) {
  const CollectiveArgs& a = s.args;
  const size_t c = a.count;
  std::byte* recv = static_cast<std::byte*>(a.recv);
  s.copy(s.at(recv, s.rank * c), a.send, c);
  const std::vector<int>& members = topo.local();
  if (!topo.leader(s.rank)) {
    s.send(members.front(), s.at(recv, s.rank * c), c);
  } else {
    for (size_t m = 1; m < members.size(); ++m) s.recv(members[m], s.at(recv, members[m] * c), c);
    leader_ring(s, topo, recv, 0, false);
  }
  SubTransport local(s.transport, members);
  run_on(local, Algorithm::tree, Collective::broadcast, recv, recv, c * static_cast<size_t>(s.ranks), s);
}

void hier_reduce_scatter(const Sched& s, const Topology& topo) {
  const CollectiveArgs& a = s.args;
  const size_t c = a.count;
  const std::vector<int>& members = topo.local();
  const bool leader = topo.leader(s.rank);
  std::byte* acc = leader ? s.scratch(c * static_cast<size_t>(s.ranks), 1) : nullptr;
  SubTransport local(s.transport, members);
  run_on(local, Algorithm::tree, Collective::reduce, a.send, acc, c * static_cast<size_t>(s.ranks), s);
  if (leader) {
    // After nodes - 1 steps leader i holds its own node's blocks summed over every node.
    leader_ring(s, topo, acc, 1, true);
    for (size_t m = 1; m < members.size(); ++m) s.send(members[m], s.at(acc, members[m] * c), c);
    s.copy(a.recv, s.at(acc, s.rank * c), c);
  } else {
    s.recv(members.front(), a.recv, c);
  }
  s.finish_avg(a.recv, c);
}

}  // namespace

// Each schedule finds the nodes anew: one per call.
constinit const Schedules hier_schedules = {
    // a tree to the node leaders, a ring among them, a tree back
    .all_reduce = {[](const Sched& s) { hier_all_reduce(s, Topology(s)); },
                   [](const CallShape& s) {
                     const CostVars v(s);
                     return CostTerms{}
                         .step(2 * v.Lg, 2 * v.Lg * v.n, v.Lg * v.n)
                         .step(2 * (v.Gd - 1), 2 * (v.Gd - 1) / v.Gd * v.n, (v.Gd - 1) / v.Gd * v.n);
                   },
                   "2(Lg+G-1) a + 2(Lg + (G-1)/G) n b + (Lg + (G-1)/G) n g"},
    .broadcast = {[](const Sched& s) { hier_broadcast(s, Topology(s)); },
                  [](const CallShape& s) {
                    const CostVars v(s);
                    return CostTerms{}.step(v.LG + v.Lg, (v.LG + v.Lg) * v.n);
                  },
                  "(LG+Lg) a + (LG+Lg) n b"},
    .reduce = {[](const Sched& s) { hier_reduce(s, Topology(s)); },
               [](const CallShape& s) {
                 const CostVars v(s);
                 return CostTerms{}.step(v.Lg + v.LG, (v.Lg + v.LG) * v.n, (v.Lg + v.LG) * v.n);
               },
               "(Lg+LG) a + (Lg+LG) n b + (Lg+LG) n g"},
    // members to their leader one by one, the leaders' ring block by block, a tree back
    .all_gather = {[](const Sched& s) { hier_all_gather(s, Topology(s)); },
                   [](const CallShape& s) {
                     const CostVars v(s);
                     return CostTerms{}.step(v.g - 1 + (v.Gd - 1) * v.g, v.ring).step(v.Lg, v.Lg * v.n);
                   },
                   "(g-1 + (G-1)g + Lg) a + ((p-1)/p + Lg) n b"},
    // a tree to the leaders, the leaders' ring block by block, each leader to its members
    .reduce_scatter = {[](const Sched& s) { hier_reduce_scatter(s, Topology(s)); },
                       [](const CallShape& s) {
                         const CostVars v(s);
                         return CostTerms{}
                             .step(v.Lg, v.Lg * v.n, v.Lg * v.n)
                             .step((v.Gd - 1) * v.g, (v.Gd - 1) / v.Gd * v.n, (v.Gd - 1) / v.Gd * v.n)
                             .step(v.g - 1, (v.g - 1) / v.P * v.n);
                       },
                       "(Lg + (G-1)g + g-1) a + (Lg + (p-1)/p) n b + (Lg + (G-1)/G) n g"},
};

}  // namespace dpx::parallel::impl
