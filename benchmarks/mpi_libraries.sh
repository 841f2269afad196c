#!/usr/bin/env bash
# dpx collective over two MPI libraries and two launchers each, 2 processes on this machine:
# Open MPI (build/) under mpirun and under srun --mpi=pmix, MPICH (build-mpich/, `scripts/test
# --mpi mpich` builds it) under mpiexec.mpich and under srun --mpi=pmi2. Runs alternate, ROUNDS
# rounds; prints the median out-of-place busbw per library, launcher, algorithm and size as a
# Markdown table (benchmarks/RESULTS.md, "MPICH"). Needs a Slurm for srun: run it inside
# `scripts/slurmcluster run -- benchmarks/mpi_libraries.sh OUT [ROUNDS]`.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: benchmarks/mpi_libraries.sh OUT_FOLDER [ROUNDS]}
rounds=${2:-3}
[[ -e $out ]] && { echo "benchmarks/mpi_libraries.sh: $out exists: name a new folder" >&2; exit 2; }
for bin in build/bin/dpx build-mpich/bin/dpx; do
  [[ -x $bin ]] || { echo "benchmarks/mpi_libraries.sh: $bin missing (scripts/build; scripts/test --mpi mpich)" >&2; exit 1; }
done
command -v srun >/dev/null && [[ -n ${SLURM_CONF:-} ]] || { echo "benchmarks/mpi_libraries.sh: no Slurm: run it under scripts/slurmcluster run" >&2; exit 1; }
mkdir -p "$out"
args=(collective --backend mpi --algo all -b 64K -e 16M -f 4 -n 20 -w 5)
declare -A launch=(
  [openmpi-mpirun]="mpirun --allow-run-as-root --oversubscribe -np 2 build/bin/dpx"
  [openmpi-srun]="srun -n 2 --mpi=pmix build/bin/dpx"
  [mpich-mpiexec]="mpiexec.mpich -n 2 build-mpich/bin/dpx"
  [mpich-srun]="srun -n 2 --mpi=pmi2 build-mpich/bin/dpx"
)
order=(openmpi-mpirun mpich-mpiexec openmpi-srun mpich-srun)
for ((r = 1; r <= rounds; ++r)); do
  for name in "${order[@]}"; do
    echo "+ ${launch[$name]} ${args[*]} --csv $out/$name-$r.csv" >&2
    ${launch[$name]} "${args[@]}" --csv "$out/$name-$r.csv" >"$out/$name-$r.log" 2>&1
  done
done
# Median of the rounds, out of place.
echo "| library, launcher | algo | $(awk -F, 'NR > 1 && $10 == "out" && $2 == "ring" { printf "%s%s", sep, $5 / 1024 " KiB"; sep = " | " }' "$out/openmpi-mpirun-1.csv") |"
echo "| --- | --- |$(awk -F, 'NR > 1 && $10 == "out" && $2 == "ring" { printf " ---: |" }' "$out/openmpi-mpirun-1.csv")"
for name in "${order[@]}"; do
  cat "$out/$name"-*.csv | awk -F, -v name="$name" '
    $1 == "collective" || $10 != "out" { next }
    { key = $2 SUBSEP $5; v[key, ++n[key]] = $13; if (!(($2) in seen)) { seen[$2] = 1; algos[++na] = $2 }
      if (!(($5) in seens)) { seens[$5] = 1; sizes[++ns] = $5 } }
    END {
      for (a = 1; a <= na; ++a) {
        line = "| " name " | " algos[a]
        for (s = 1; s <= ns; ++s) {
          key = algos[a] SUBSEP sizes[s]; m = n[key]
          for (i = 1; i <= m; ++i) x[i] = v[key, i]
          for (i = 2; i <= m; ++i) for (j = i; j > 1 && x[j - 1] > x[j]; --j) { t = x[j]; x[j] = x[j - 1]; x[j - 1] = t }
          med = (m % 2) ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
          line = line sprintf(" | %.2f", med)
        }
        print line " |"
      }
    }'
done
