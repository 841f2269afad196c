// Launcher variables (see launcher_env.hpp). Which variable each launcher sets: Open MPI's
// mpirun sets OMPI_COMM_WORLD_* and PMIX_RANK; MPICH's hydra and srun --mpi=pmi2 set PMI_RANK and
// PMI_SIZE (hydra also MPI_LOCALRANKID and MPI_LOCALNRANKS); srun --mpi=pmix sets PMIX_RANK; srun
// always sets SLURM_PROCID, SLURM_LOCALID and SLURM_STEP_NUM_TASKS for its tasks (which are not
// MPI ranks when srun starts mpirun's daemons).
#include "parallel/runtime/launcher_env.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

namespace dpx::parallel {

namespace {

// The variable as an integer; nullopt-like -1 when unset or not a number.
int int_var(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (!v || !*v) return -1;
  int out = -1;
  const char* end = v + std::strlen(v);
  auto r = std::from_chars(v, end, out);
  return r.ec == std::errc() && r.ptr == end ? out : -1;
}

constexpr const char* kVariables[] = {
    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMIX_RANK",            "PMI_RANK",             "PMI_SIZE",                   "SLURM_JOB_ID",
    "SLURM_STEP_ID",        "SLURM_PROCID",         "SLURM_LOCALID",              "SLURM_STEP_NUM_TASKS",
    "SLURM_NTASKS",         "SLURM_NODEID",         "MPI_LOCALRANKID",            "MPI_LOCALNRANKS",
};

// The task count of the srun step this process belongs to, or -1.
int slurm_step_tasks(const EnvLookup& env) {
  if (!env("SLURM_STEP_ID")) return -1;  // a batch script's own shell is no srun step
  int n = int_var(env, "SLURM_STEP_NUM_TASKS");
  return n > 0 ? n : int_var(env, "SLURM_NTASKS");
}

// The advice for srun tasks that MPI cannot join into one job.
std::string srun_advice(int tasks, const std::string& srun_mpi) {
  return detail::concat("each of the ", tasks, " tasks would run alone: pass srun --mpi=", srun_mpi,
                        " (this dpx's MPI library joins srun's tasks through it; `srun --mpi=list` shows what the "
                        "cluster offers), or set MpiDefault=", srun_mpi, " in slurm.conf");
}

void check(std::vector<std::string>& out, const EnvLookup& env, const char* name, int mpi_value, const char* what) {
  const int v = int_var(env, name);
  if (v >= 0 && v != mpi_value)
    out.push_back(detail::concat(name, "=", env(name), " but MPI says this process's ", what, " is ", mpi_value));
}

}  // namespace

EnvLookup process_env() {
  return [](const char* name) { return static_cast<const char*>(std::getenv(name)); };
}

LauncherEnv read_launcher_env(const EnvLookup& env) {
  // The numbers that say which rank this process is and how many there are: a launcher writes
  // them as decimal numbers. Any other value (a script's `export OMPI_COMM_WORLD_SIZE=abc`) would
  // start a job of a size nobody asked for; refused, naming the variable.
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                           "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    const char* v = env(name);
    if (v && int_var(env, name) < 0)
      throw UsageError(detail::concat(
          "the environment variable ", name, " is '", excerpt(v, 40),
          "', not a rank number: only an MPI launcher (mpirun, srun, mpiexec) sets it, to a number. "
          "Unset it (`unset ", name, "`) to run dpx alone, or start dpx with the launcher"));
  }
  LauncherEnv e;
  for (const char* name : kVariables)
    if (const char* v = env(name)) e.variables.emplace_back(name, v);
  const int slurm_tasks = slurm_step_tasks(env);
  if (env("OMPI_COMM_WORLD_SIZE")) {
    e.launcher = "mpirun (Open MPI)";
    e.size = int_var(env, "OMPI_COMM_WORLD_SIZE");
  } else if (env("PMIX_RANK")) {
    e.launcher = slurm_tasks > 0 ? "srun (Slurm, PMIx)" : "PMIx";
    e.size = slurm_tasks > 0 ? slurm_tasks : 0;
  } else if (env("PMI_SIZE") || env("PMI_RANK")) {
    e.launcher = slurm_tasks > 0 ? "srun (Slurm, PMI-2)" : "PMI (MPICH's mpiexec)";
    e.size = int_var(env, "PMI_SIZE");
  } else if (slurm_tasks > 1) {
    // srun with several tasks but no PMI variables: started as MPI ranks, or by mistake as
    // independent copies; MPI (and launcher_mismatches) tells which.
    e.launcher = "srun (Slurm)";
    e.size = slurm_tasks;
  }
  return e;
}

std::string launch_refusal(const EnvLookup& env, const std::string& srun_mpi) {
  const int tasks = slurm_step_tasks(env);
  if (tasks <= 1) return "";
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "PMI_FD"})
    if (env(name)) return "";
  return detail::concat("srun started ", tasks, " tasks (SLURM_STEP_NUM_TASKS) without a PMI plugin (srun --mpi=none, "
                        "or the cluster's MpiDefault): ", srun_advice(tasks, srun_mpi));
}

std::vector<std::string> launcher_mismatches(const EnvLookup& env, const MpiPlace& mpi, const std::string& srun_mpi) {
  std::vector<std::string> out;
  check(out, env, "OMPI_COMM_WORLD_RANK", mpi.rank, "rank");
  check(out, env, "OMPI_COMM_WORLD_SIZE", mpi.size, "number of ranks");
  check(out, env, "OMPI_COMM_WORLD_LOCAL_RANK", mpi.local_rank, "rank on its node");
  check(out, env, "OMPI_COMM_WORLD_LOCAL_SIZE", mpi.local_size, "number of ranks on its node");
  check(out, env, "PMIX_RANK", mpi.rank, "rank");
  check(out, env, "PMI_RANK", mpi.rank, "rank");
  check(out, env, "PMI_SIZE", mpi.size, "number of ranks");
  check(out, env, "MPI_LOCALRANKID", mpi.local_rank, "rank on its node");  // MPICH's hydra
  check(out, env, "MPI_LOCALNRANKS", mpi.local_size, "number of ranks on its node");
  const int tasks = slurm_step_tasks(env);
  if (tasks > 1 && mpi.size == 1) {
    out.push_back(detail::concat("srun started ", tasks, " tasks (SLURM_STEP_NUM_TASKS) but MPI sees a world of 1: ",
                                 srun_advice(tasks, srun_mpi)));
  } else if (tasks == mpi.size) {
    check(out, env, "SLURM_PROCID", mpi.rank, "rank");
    check(out, env, "SLURM_LOCALID", mpi.local_rank, "rank on its node");
  }
  return out;
}

}  // namespace dpx::parallel
