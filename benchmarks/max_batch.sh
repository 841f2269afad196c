#!/usr/bin/env bash
# The largest batch that trains within a memory budget on the CPU, dpx against PyTorch
# (benchmarks/RESULTS.md): one model of every family at SIZExSIZE, 10 classes, SGD with Nesterov
# momentum, two steps, THREADS threads. dpx: `dpx bench --batch-sizes max --memory-budget BUDGET`
# (the peak its allocator reserved, the process's host memory). PyTorch: the largest batch whose
# peak resident memory, less what it was after importing torch and torchvision
# (benchmarks/pytorch/peak_memory.py), is within the budget, found from the line through two
# batches and confirmed by bisection to within 3 %. dpx runs with --workers 0: PyTorch's script
# trains on one tensor, with no DataLoader, so neither holds batches made ahead (dpx's default, 2
# workers, prefetches 4, which at 224x224 count 2.4 MB an image in its live peak). Prints a
# Markdown table.
#
#   benchmarks/max_batch.sh [MODEL ...]   (default: one model of every family)
# Environment: BUDGET (4GB, decimal: 4e9 bytes)  SIZE (224)  THREADS (2)  DPX (build/bin/dpx)
#              PYTHON (a Python with torch and torchvision; default /usr/bin/python3)
set -euo pipefail
cd "$(dirname "$0")/.."
models=("$@")
[[ ${#models[@]} -eq 0 ]] && models=(resnet18 resnet50 vgg16 alexnet densenet121 squeezenet1_1 swin_t efficientnet_b0)
dpx=${DPX:-build/bin/dpx}
budget=${BUDGET:-4GB}
size=${SIZE:-224}
threads=${THREADS:-2}
py=${PYTHON:-/usr/bin/python3}
[[ -x $dpx ]] || { echo "benchmarks/max_batch.sh: no dpx at $dpx: build it first (scripts/test, or DPX=...)" >&2; exit 2; }
budget_bytes=$(python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)\s*([KMGT]i?B)', sys.argv[1])
if not m: sys.exit('benchmarks/max_batch.sh: BUDGET ' + repr(sys.argv[1]) + ': use e.g. 4GB or 3.5GiB')
unit = m.group(2)
print(int(float(m.group(1)) * ((1024 if 'i' in unit else 1000) ** ('KMGT'.index(unit[0]) + 1))))" "$budget")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# PyTorch's net peak in bytes at batch $2 of model $1; -1 when the run failed (not a torchvision
# model, killed).
torch_peak() {
  local mib
  mib=$("$py" benchmarks/pytorch/peak_memory.py "$1" "$2" "$size" 2 "$threads" 2>/dev/null | awk '{print $4}') || true
  [[ -n $mib ]] && python3 -c "print(int(float('$mib') * 1048576))" || echo -1
}
echo "| model | dpx max batch | dpx reserved at it (MB) | torch $("$py" -c 'import torch; print(torch.__version__)') max batch | torch RSS net at it (MB) | torch batches tried |"
echo "| --- | ---: | ---: | ---: | ---: | --- |"
for m in "${models[@]}"; do
  out=$tmp/$m
  "$dpx" bench --models "$m" --batch-sizes max --memory-budget "$budget" --devices cpu:1 --threads "$threads" \
      --dataset synthetic --image-size "$size" --channels 3 --workers 0 --steps 2 --warmup 1 --no-eval --out "$out" >"$tmp/$m.log" 2>&1 ||
    { echo "| $m | failed: $(tail -1 "$tmp/$m.log") | | | | |"; continue; }
  read -r dpx_batch dpx_mb < <(python3 - "$out/results.csv" <<'PY'
import csv, sys
r = next(csv.DictReader(open(sys.argv[1])))
print(r['rank_batch'], f"{float(r['peak_host_reserved_bytes']) / 1e6:.0f}")
PY
)
  # PyTorch: the line through half dpx's batch and dpx's batch, then bisection.
  tried=""
  declare -A peak=()
  probe() { [[ -n ${peak[$1]:-} ]] || { peak[$1]=$(torch_peak "$m" "$1"); tried+="${tried:+ }$1"; }; }
  b1=$((dpx_batch / 2 > 1 ? dpx_batch / 2 : 1)); b2=$((dpx_batch > b1 ? dpx_batch : b1 + 1))
  probe "$b1"; probe "$b2"
  if (( peak[$b1] < 0 || peak[$b2] < 0 )); then
    echo "| $m | $dpx_batch | $dpx_mb | failed (peak_memory.py $m $b1) | | $tried |"
    unset peak
    continue
  fi
  guess=$(python3 -c "
b1, p1, b2, p2, B = $b1, ${peak[$b1]}, $b2, ${peak[$b2]}, $budget_bytes
slope = (p2 - p1) / (b2 - b1)
print(max(1, int((B - p2) / slope + b2)) if slope > 0 else 2 * b2)")
  lo=0; hi=0  # lo fits (0: none yet), hi does not (0: none yet)
  for b in "$b1" "$b2"; do
    if (( peak[$b] <= budget_bytes )); then (( b > lo )) && lo=$b; else (( hi == 0 || b < hi )) && hi=$b; fi
  done
  next=$guess
  while :; do
    (( hi > 0 && hi - lo <= (lo * 3 / 100 > 1 ? lo * 3 / 100 : 1) )) && break
    (( next <= lo || (hi > 0 && next >= hi) )) && next=$(( hi > 0 ? (lo + hi) / 2 : 2 * (lo > 0 ? lo : 1) ))
    probe "$next"
    (( peak[$next] >= 0 )) || { hi=$next; continue; }  # a failed run (killed): counted as over
    if (( peak[$next] <= budget_bytes )); then lo=$next; else hi=$next; fi
    next=$(( hi > 0 ? (lo + hi) / 2 : 2 * lo ))
  done
  torch_mb=$(( lo > 0 ? peak[$lo] / 1000000 : 0 ))
  echo "| $m | $dpx_batch | $dpx_mb | $lo | $torch_mb | $tried |"
  unset peak
done
