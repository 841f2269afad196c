// What an MPI launcher (Open MPI's mpirun, Slurm's srun, MPICH's hydra, any PMI/PMIx launcher)
// tells a process through its environment, read before MPI is started. It decides whether dpx
// starts MPI at all, and afterwards it is cross-checked against what MPI says: a launcher and
// an MPI library that disagree (srun without --mpi=pmix starts N one-rank jobs) must not train
// N times into the same folder.
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace dpx::parallel {

// getenv, or a table in tests: returns null for an unset variable.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup process_env();

struct LauncherEnv {
  std::string launcher;  // "mpirun (Open MPI)", "srun (Slurm)", "PMIx", "PMI (MPICH hydra, srun --mpi=pmi2)"; "" none
  int size = 0;          // the number of ranks the launcher says it started (0: not said)
  // Every launcher variable that was set, name and value, for config.json.
  std::vector<std::pair<std::string, std::string>> variables;
  // Started by an MPI launcher: dpx starts MPI, and each process is one rank.
  bool launched() const { return !launcher.empty(); }
};

LauncherEnv read_launcher_env(const EnvLookup& env);

// Before MPI starts: why this process must not start it, or "" when it may. Refused: srun
// started several tasks and set none of the variables a PMI plugin sets (srun --mpi=none, a
// cluster whose MpiDefault is none): Open MPI would abort inside MPI_Init with a page about
// rebuilding it, MPICH would start N one-rank jobs that train N times into one folder. `srun_mpi`
// is the plugin this dpx's MPI library starts under (srun_mpi_plugin()), named in the advice.
std::string launch_refusal(const EnvLookup& env, const std::string& srun_mpi);

// What MPI says about this process.
struct MpiPlace {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
};

// Each disagreement between `mpi` and the launcher's variables, as a sentence that says what to
// do; empty when they agree. Checked: OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} (mpirun),
// PMI_RANK/PMI_SIZE, PMIX_RANK, and Slurm's SLURM_PROCID/SLURM_LOCALID where srun started the
// ranks itself (its task count equals MPI's size), plus the classic mistake of srun starting N
// tasks that each see a one-rank MPI world (no PMI plugin).
std::vector<std::string> launcher_mismatches(const EnvLookup& env, const MpiPlace& mpi, const std::string& srun_mpi);

}  // namespace dpx::parallel
