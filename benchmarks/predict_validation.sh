#!/usr/bin/env bash
# The "Predicting at scale" validation of benchmarks/RESULTS.md, in the order it ran: fit the
# threads backend's all-reduces over 2 ranks on this machine, without and with a simulated
# 1 Gbit/s network; run DDP with dpx bench (models, batch sizes and algorithms that the fits never
# saw), with and without that network; predict each measured configuration from the fits and
# compare; fit the communication overhead against the number of parameters; then predict
# resnet50 and vgg16 at 8..512 ranks on 10 and 100 Gbit/s links.
# Usage: benchmarks/predict_validation.sh [OUT_DIR]   (default predict-validation-out)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-predict-validation-out}
mkdir -p "$out"
dpx=$PWD/${DPX_BUILD_DIR:-build}/bin/dpx
net=1gbit,50us
patterns=(all_reduce)
"$dpx" collective --help | grep -q sendrecv && patterns+=(sendrecv)

# 1. The fits: every algorithm, 64 KiB .. 64 MiB (16 MiB on the simulated network).
for t in "${patterns[@]}"; do
  "$dpx" collective -t "$t" --ranks 2 --algo all -b 64K -e 64M -f 4 -n 10 -w 3 --csv "$out/coll_mem_$t.csv" \
    > "$out/coll_mem_$t.txt"
  "$dpx" collective -t "$t" --ranks 2 --algo all -b 64K -e 16M -f 4 -n 3 -w 1 --net-sim $net \
    --csv "$out/coll_net_$t.csv" > "$out/coll_net_$t.txt"
done
"$dpx" fit "$out"/coll_mem_*.csv --out "$out/fit_mem.json" > "$out/fit_mem.txt"
"$dpx" fit "$out"/coll_net_*.csv --out "$out/fit_net.json" > "$out/fit_net.txt"

# 2. DDP runs the fits did not see: 1 and 2 thread ranks of one core each, 64x64 synthetic images.
models=(resnet18 squeezenet1_1 alexnet densenet121)
common=(--devices cpu:1,2 --dataset synthetic --image-size 64 --steps 8 --warmup 2)
for algo in ring tree; do
  for sim in mem net; do
    extra=()
    [[ $sim == net ]] && extra=(--net-sim $net)
    "$dpx" bench --models "$(IFS=,; echo "${models[*]}")" --batch-sizes 16,32 --algo $algo "${common[@]}" \
      "${extra[@]}" --out "$out/bench_${sim}_$algo" > "$out/bench_${sim}_$algo.txt"
  done
done

# 3. The predictions of every measured configuration, side by side with the measurement.
for algo in ring tree; do
  for sim in mem net; do
    for m in "${models[@]}"; do
      "$dpx" predict --model $m --image-size 64 --batch-size 16,32 --ranks 1,2 --algo $algo --fit "$out/fit_$sim.json" \
        --compare "$out/bench_${sim}_$algo/results.csv" --csv "$out/pred_${sim}_${algo}_$m.csv" \
        > "$out/pred_${sim}_${algo}_$m.txt"
    done
  done
done

# 4. The overhead models over the models' sizes.
"$dpx" fit "$out"/bench_net_ring/results.csv "$out"/bench_net_tree/results.csv --out "$out/fit_overhead.json" \
  > "$out/fit_overhead.txt" || true

# 5. At scale: resnet50 and vgg16 at 224, 32 and 128 images per rank, 8..512 ranks, 10 and 100 Gbit/s;
#    with the computation measured here (both cores), and 150 times faster (about one V100 at fp32).
for scale in 1 150; do
  for m in resnet50 vgg16; do
    for link in 10gbit,5us 100gbit,2us; do
      name="scale_${m}_${link%%,*}_x$scale"
      "$dpx" predict --model $m --batch-size 32,128 --ranks 8..512 --link $link --threads 2 --steps 3 \
        --max-measured-batch 16 --compute-scale $scale --csv "$out/$name.csv" > "$out/$name.txt"
    done
  done
done
echo "wrote $out"
