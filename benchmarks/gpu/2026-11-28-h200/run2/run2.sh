#!/usr/bin/env bash
# The second device call of 2026-11-28 (run 2), as it ran: the channels_last test fixed,
# --cuda-graph and bf16 and fp32 against PyTorch, vgg16's convolutions under search against
# heuristics. Run from the repository root with OUT set, after scripts/gpu-pack-deps (carry .deps).
# (Its ctest -R channels_last also matched two CPU tests the GPU build does not make: "Not Run".)
set -u
T0=$SECONDS
DEADLINE=${DEADLINE:-350}
left() { local l=$((DEADLINE - (SECONDS - T0))); (( l > $1 )) && l=$1; (( l < 1 )) && l=1; echo $l; }
note() { echo "[run2 $((SECONDS - T0))s] $*" | tee -a "$OUT/run2.log"; }
export DPX_JOBS=16
GPU_DEADLINE_S=110 scripts/gpu configure build
lp=$(sed -n 's/^\[scripts\/gpu\] library path: //p' "$OUT/gpu.log" | tail -1)
export LD_LIBRARY_PATH=$lp
dpx=build-gpu/bin/dpx
[[ -x $dpx ]] || { note "no dpx binary"; exit 1; }
note "built; ctest channels_last"
timeout "$(left 60)" ctest --test-dir build-gpu -R channels_last --output-on-failure -j 2 >"$OUT/ctest-cl.log" 2>&1
note "ctest rc $? : $(grep -E 'tests passed|tests failed' "$OUT/ctest-cl.log" | tail -1)"
bench() {  # MODELS POINTS CAP
  MODELS=$1 POINTS=$2 DPX=$dpx PYTHON=python3 timeout "$(left "$3")" benchmarks/gpu-bench >>"$OUT/bench.md" 2>>"$OUT/run2.log"
  note "gpu-bench $2 rc $?"
}
bench squeezenet1_1,resnet18,efficientnet_b0 "tf32:search:graph" 70
bench resnet18,resnet50,vgg16,densenet121,squeezenet1_1,efficientnet_b0,swin_t "bf16:search" 130
for algo in search heuristic; do
  DPX_CUDNN_LOG=1 timeout "$(left 30)" "$dpx" bench --models vgg16 --devices cuda:0 --parallel none --batch-sizes 64 \
    --image-size 224 --channels 3 --dataset synthetic --steps 6 --warmup 3 --no-eval --precision tf32 \
    --cudnn-algo $algo --profile-shapes --out "/tmp/vgg16-$algo" >"$OUT/vgg16-$algo.log" 2>&1
  note "vgg16 tf32 $algo rc $?"
done
bench resnet18,resnet50,vgg16,densenet121,squeezenet1_1,efficientnet_b0,swin_t "fp32:search" 200
note "done"
