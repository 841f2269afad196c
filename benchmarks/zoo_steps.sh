#!/usr/bin/env bash
# One training step of zoo models, dpx against PyTorch on the same model, batch, input size,
# device, precision and optimiser (SGD, Nesterov momentum 0.9; 10 classes; synthetic 3xSxS input).
# Prints a Markdown table, one row per model, as in benchmarks/RESULTS.md.
#
#   benchmarks/zoo_steps.sh [MODEL ...]     (default: one or two of every family)
# Environment:
#   DEVICE   cpu (default) or cuda:N          BATCH (8)  SIZE (64)  STEPS measured (10)  WARMUP (2)
#   THREADS  CPU threads for both (2)         TF32=1     allow TF32 in both (GPU only)
#   BF16=1   bf16 mixed precision in both (GPU only): dpx's --precision bf16 where its bench has the
#            flag (else dpx's columns say "-": not in this dpx), PyTorch's autocast
#   DPX      the dpx binary (build/bin/dpx)   PYTHON     Pythons with torch and torchvision, space-
#                                                        separated: one PyTorch column each, the ratio
#                                                        against the fastest (default /usr/bin/python3,
#                                                        Debian's); without torch the table still gives
#                                                        dpx's figures, with "-" for PyTorch's
#   CONV_ALGO  dpx's --conv-algo (auto)
#   NO_HEADER=1  print the rows only (to append to a table)
#   PEAK_TFLOPS  the device's peak for the MFU column; on CUDA the default is the H100/H200
#            datasheet's dense rate: 67 (fp32) or 495 (TF32). No MFU column on the CPU unless given.
# MFU = 3 x forward FLOPs per image (`dpx models`: 2 per multiply-add; backward counted as twice the
# forward) x dpx's images/s / peak. dpx's times: `dpx bench --parallel none` (results.csv);
# PyTorch's: benchmarks/pytorch/train_step.py.
set -euo pipefail
cd "$(dirname "$0")/.."
dpx=${DPX:-build/bin/dpx}
read -r -a pythons <<<"${PYTHON:-/usr/bin/python3}"
device=${DEVICE:-cpu}
batch=${BATCH:-8} size=${SIZE:-64} threads=${THREADS:-2} steps=${STEPS:-10} warmup=${WARMUP:-2}
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(resnet18 resnet50 vgg16 vgg16_bn alexnet densenet121 squeezenet1_0
                                     squeezenet1_1 efficientnet_b0 swin_t)
[[ -x $dpx ]] || { echo "zoo_steps.sh: $dpx not found: build first (scripts/build) or set DPX" >&2; exit 1; }
# The peers that have torch and torchvision, and a line naming each one's version and BLAS.
peers=()
for py in "${pythons[@]}"; do
  if ! "$py" -c "import torch, torchvision" 2>/dev/null; then
    echo "zoo_steps.sh: $py has no torch/torchvision (apt-get install python3-torch python3-torchvision libopenblas0-pthread, or set PYTHON): left out" >&2
    continue
  fi
  peers+=("$py")
done
[[ ${#peers[@]} -gt 0 ]] || echo "zoo_steps.sh: no PyTorch peer: dpx's figures only" >&2

dpx_flags=(--batch-sizes "$batch" --image-size "$size" --channels 3 --parallel none --threads "$threads"
           --steps $((steps + warmup)) --warmup "$warmup" --no-eval --conv-algo "${CONV_ALGO:-auto}")
torch_flags=()
peak=${PEAK_TFLOPS:-}
case $device in
  cpu) dpx_flags+=(--devices cpu:1) ;;
  cuda:*) dpx_flags+=(--devices "$device"); torch_flags+=(--device cuda)
          [[ -n $peak ]] || { [[ ${TF32:-0} == 1 ]] && peak=495 || peak=67; } ;;
  *) echo "zoo_steps.sh: DEVICE must be cpu or cuda:N (got '$device')" >&2; exit 2 ;;
esac
if [[ ${TF32:-0} == 1 ]]; then dpx_flags+=(--tf32); torch_flags+=(--tf32); fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
dpx_runs=1
if [[ ${BF16:-0} == 1 ]]; then
  torch_flags+=(--bf16)
  # dpx takes --precision bf16 where it computes in bf16 on this device; a one-step probe asks it.
  if "$dpx" bench --models lenet5 --batch-sizes 8 --precision bf16 --devices "$device" \
       --parallel none --dataset synthetic --image-size 28 --steps 1 --warmup 0 --no-eval --out "$out/probe" \
       >"$out/probe.log" 2>&1; then
    dpx_flags+=(--precision bf16)
  else
    dpx_runs=0
    echo "zoo_steps.sh: dpx refused --precision bf16 on $device ($(grep -m1 -o 'precision.*' "$out/probe.log")):" \
         "PyTorch's bf16 figures only" >&2
  fi
fi

# column(CSV, NAME): the value of column NAME in the first data row of CSV.
column() { awk -F, -v n="$2" 'NR == 1 { for (i = 1; i <= NF; ++i) c[$i] = i; next } NR == 2 { print $c[n] }' "$1"; }

mfu_head="" mfu_rule=""
[[ -n $peak ]] && mfu_head=" dpx MFU |" mfu_rule=" --- |"
peer_head="" peer_rule=""
for py in "${peers[@]}"; do
  # "PyTorch 1.13.0a0 (generic BLAS: openblas-pthread)": the version and the library its matrix products use.
  name=$("$py" - <<'PY'
import re, torch
cfg = torch.__config__.show()
blas = (re.search(r"BLAS_INFO=(\w+)", cfg) or [None, "?"])[1]
if blas == "generic":  # Debian's: libblas.so.3 through the alternatives system
    import os
    path = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    blas = "generic = " + os.path.basename(os.path.dirname(path))
print(f"PyTorch {torch.__version__.split('+')[0]} ({blas})")
PY
)
  peer_head+=" $name forward / backward / optimizer (ms) | $name img/s |" peer_rule+=" --- | --- |"
done
ratio_head="" ratio_rule=""
[[ ${#peers[@]} -gt 0 ]] && ratio_head=" dpx / fastest PyTorch |" ratio_rule=" --- |"
[[ ${NO_HEADER:-0} == 1 ]] || echo "| model | dpx forward / backward / optimizer (ms) | dpx img/s |$peer_head$ratio_head$mfu_head"
[[ ${NO_HEADER:-0} == 1 ]] || echo "| --- | --- | --- |$peer_rule$ratio_rule$mfu_rule"
for m in "${models[@]}"; do
  if [[ $dpx_runs == 1 ]]; then
    "$dpx" bench --models "$m" "${dpx_flags[@]}" --out "$out/$m" >"$out/$m.log" 2>&1 ||
      { cat "$out/$m.log" >&2; echo "zoo_steps.sh: dpx bench failed for $m" >&2; exit 1; }
    csv=$out/$m/results.csv
    fwd=$(column "$csv" mean_forward_s) bwd=$(column "$csv" mean_backward_s) upd=$(column "$csv" mean_optimizer_s)
    dpx_ips=$(column "$csv" images_per_s)
    row=$(awk -v m="$m" -v f="$fwd" -v b="$bwd" -v u="$upd" -v i="$dpx_ips" \
              'BEGIN { printf "| %s | %.1f / %.1f / %.1f | %.1f |", m, 1e3 * f, 1e3 * b, 1e3 * u, i }')
  else
    dpx_ips=0
    row="| $m | - | - |"
  fi
  best=0
  for py in "${peers[@]}"; do
    # torch.set_num_threads (train_step.py) does not reach OpenBLAS's pthread build, which would
    # otherwise run PyTorch 1.13's Linear layers on every core whatever THREADS says.
    line=$(OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
           "$py" benchmarks/pytorch/train_step.py "$m" "$batch" "$size" "$steps" "$threads" "${torch_flags[@]}")
    read -r tf tb tu t_ips < <(sed -E 's/.*forward ([0-9.]+) ms, backward ([0-9.]+) ms, optimizer ([0-9.]+) ms, ([0-9.]+) img\/s.*/\1 \2 \3 \4/' <<<"$line")
    row+=$(awk -v tf="$tf" -v tb="$tb" -v tu="$tu" -v ti="$t_ips" 'BEGIN { printf " %.1f / %.1f / %.1f | %.1f |", tf, tb, tu, ti }')
    best=$(awk -v a="$best" -v b="$t_ips" 'BEGIN { print (b > a ? b : a) }')
  done
  [[ ${#peers[@]} -gt 0 ]] && row+=$(awk -v i="$dpx_ips" -v b="$best" 'BEGIN { if (i > 0 && b > 0) printf " %.2f× |", i / b; else printf " - |" }')
  if [[ -n $peak && $dpx_runs == 1 ]]; then
    "$dpx" models "$m" --image-size "$size" --csv "$out/$m.models.csv" >/dev/null
    gflops=$(column "$out/$m.models.csv" forward_gflops)
    row+=$(awk -v g="$gflops" -v i="$dpx_ips" -v p="$peak" 'BEGIN { printf " %.1f %% |", 100 * 3 * g * i / (p * 1e3) }')
  elif [[ -n $peak ]]; then
    row+=" - |"
  fi
  echo "$row"
done
