#!/usr/bin/env bash
# Peak memory of a CPU training run, dpx against PyTorch on the same model, batch and input size
# (SGD with Nesterov momentum, 10 classes, synthetic 3xSxS input, 2 steps, THREADS threads).
# dpx: the peaks it reports (live tensors and what its allocator held: results.csv's
# peak_host_allocated_bytes / peak_host_reserved_bytes) and its process's peak resident memory
# less that of `dpx --version` (the libraries loaded, nothing run); PyTorch: the process's peak
# resident memory less what it was after importing torch (benchmarks/pytorch/peak_memory.py).
# dpx runs with --workers 0, as PyTorch's script trains on one tensor without a DataLoader: its
# default 2 workers would hold 4 batches made ahead (2.4 MB an image at 224x224).
# Prints a Markdown table, one row per model and batch.
#
#   benchmarks/peak_memory.sh [MODEL ...]   (default: one model of every family)
# Environment: BATCHES ("8 32")  SIZE (224)  THREADS (2)  DPX (build/bin/dpx)
#              PYTHON (Pythons with torch and torchvision, space-separated; default /usr/bin/python3)
set -euo pipefail
cd "$(dirname "$0")/.."
models=("$@")
[[ ${#models[@]} -eq 0 ]] && models=(resnet18 resnet50 vgg16 alexnet densenet121 squeezenet1_1 swin_t efficientnet_b0)
dpx=${DPX:-build/bin/dpx}
size=${SIZE:-224}
threads=${THREADS:-2}
read -r -a pythons <<<"${PYTHON:-/usr/bin/python3}"
[[ -x $dpx ]] || { echo "benchmarks/peak_memory.sh: no dpx at $dpx: build it first (scripts/test, or DPX=...)" >&2; exit 2; }
rss_kib() { /usr/bin/time -f '%M' "$@" 2>&1 >/dev/null | tail -1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base_kib=$(rss_kib "$dpx" --version)
header="| model | batch | dpx allocated (MB) | dpx reserved (MB) | dpx RSS net (MB) |"
rule="| --- | ---: | ---: | ---: | ---: |"
for py in "${pythons[@]}"; do
  version=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "-")
  header+=" torch $version RSS net (MB) |"
  rule+=" ---: |"
done
echo "$header"
echo "$rule"
for m in "${models[@]}"; do
  for b in ${BATCHES:-8 32}; do
    out=$tmp/$m-$b
    kib=$(rss_kib "$dpx" bench --models "$m" --batch-sizes "$b" --devices cpu:1 --threads "$threads" --dataset synthetic \
          --image-size "$size" --channels 3 --workers 0 --steps 2 --warmup 1 --no-eval --out "$out")
    row=$(python3 - "$out/results.csv" <<'PY'
import csv, sys
r = next(csv.DictReader(open(sys.argv[1])))
print(f"{float(r['peak_host_allocated_bytes']) / 1e6:.0f} | {float(r['peak_host_reserved_bytes']) / 1e6:.0f}")
PY
)
    line="| $m | $b | $row | $(( (kib - base_kib) / 1024 )) |"
    for py in "${pythons[@]}"; do
      net=$("$py" benchmarks/pytorch/peak_memory.py "$m" "$b" "$size" 2 "$threads" 2>/dev/null | awk '{print $4}')
      line+=" ${net:--} |"
    done
    echo "$line"
  done
done
