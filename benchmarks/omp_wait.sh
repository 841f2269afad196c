#!/usr/bin/env bash
# OpenMP's wait policy on a quiet and on a busy machine (benchmarks/RESULTS.md, "OpenMP wait"):
# dpx train of resnet18 at 64x64, batch 16, one rank on every core, with --omp-wait default (the
# OpenMP library's own), active and passive, alternated, ROUNDS rounds; "busy" runs one busy loop
# beside it (another user's process, as on a shared machine). Prints the throughput of every run
# and the medians as a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
dpx=${DPX:-build/bin/dpx}
train=("$dpx" train --model resnet18 --dataset synthetic --image-size 64 --channels 3 --synthetic-size 512
       --batch-size 16 --steps 14 --warmup 2 --epochs 1 --no-eval --log-interval 1000)
declare -A runs
spinner=""
cleanup() { [[ -n $spinner ]] && kill "$spinner" 2>/dev/null; true; }
trap cleanup EXIT
for ((r = 1; r <= rounds; ++r)); do
  for machine in quiet busy; do
    if [[ $machine == busy ]]; then
      sh -c 'while :; do :; done' &
      spinner=$!
    fi
    for policy in default active passive; do
      ips=$(env -u OMP_WAIT_POLICY "${train[@]}" --omp-wait "$policy" 2>/dev/null | sed -n 's/^throughput \([0-9.]*\) img\/s.*/\1/p')
      echo "round $r, $machine, --omp-wait $policy: $ips img/s" >&2
      runs[$machine,$policy]+="$ips "
    done
    cleanup
    spinner=""
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "| machine | default img/s | active img/s | passive img/s | runs (default; active; passive) |"
echo "| --- | ---: | ---: | ---: | --- |"
for machine in quiet busy; do
  printf '| %s | %s | %s | %s | %s; %s; %s |\n' "$machine" \
    "$(median <<<"${runs[$machine,default]}")" "$(median <<<"${runs[$machine,active]}")" \
    "$(median <<<"${runs[$machine,passive]}")" "${runs[$machine,default]% }" "${runs[$machine,active]% }" \
    "${runs[$machine,passive]% }"
done
