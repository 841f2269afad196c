#!/usr/bin/env bash
# The MPI measurements of benchmarks/RESULTS.md, in the order they ran (configurations alternate,
# so that the shared VM's slow spells spread over all of them): all-reduce over 2 and 4 processes
# on this machine and over the threads backend, then across two namespaced nodes at 1 and
# 10 Gbit/s (Open MPI's default TCP transport, and with two connections per pair of ranks), then
# DDP weak scaling of lenet5 and resnet18 across those nodes. Needs root for scripts/netcluster.
# Usage: benchmarks/mpi_sweep.sh [OUT_DIR]   (default mpi-sweep-out; one CSV or folder per run)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-mpi-sweep-out}
mkdir -p "$out"
dpx=$PWD/${DPX_BUILD_DIR:-build}/bin/dpx
root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
two_links=(--mpirun-arg --mca --mpirun-arg btl_tcp_links --mpirun-arg 2)

for rep in 1 2 3; do
  for np in 2 4; do
    mpirun "${root[@]}" --oversubscribe -np "$np" "$dpx" collective --algo all -b 1K -e 64M -f 4 \
      --csv "$out/mpi_np${np}_r$rep.csv" > "$out/mpi_np${np}_r$rep.txt"
  done
  "$dpx" collective --backend threads --ranks 2 --algo all -b 1K -e 64M -f 4 \
    --csv "$out/threads_np2_r$rep.csv" > "$out/threads_np2_r$rep.txt"
done
for rep in 1 2; do
  for link in 1gbit 10gbit; do
    for links in 1 2; do
      extra=()
      [[ $links == 2 ]] && extra=("${two_links[@]}")
      scripts/netcluster --quiet --nodes 2 --link "$link" "${extra[@]}" -- "$dpx" collective --algo all -b 1K -e 64M \
        -f 8 -n 5 -w 1 --link-gbps "${link%gbit}" --csv "$out/nodes2_${link}_links${links}_r$rep.csv" \
        > "$out/nodes2_${link}_links${links}_r$rep.txt"
    done
  done
done
for rep in 1 2; do
  for link in 1gbit 10gbit; do
    for links in 1 2; do
      extra=()
      [[ $links == 2 ]] && extra=("${two_links[@]}")
      scripts/netcluster --quiet --nodes 2 --link "$link" "${extra[@]}" -- "$dpx" bench --models lenet5,resnet18 \
        --image-size 32 --channels 3 --batch-sizes 32 --devices cpu:1,2 --threads 1 --steps 20 \
        --out "$out/bench_${link}_links${links}_r$rep" > "$out/bench_${link}_links${links}_r$rep.txt"
    done
  done
done
echo "wrote $out/"
