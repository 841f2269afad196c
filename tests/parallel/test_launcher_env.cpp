// Launcher variables, read before MPI starts and cross-checked after: which launchers start MPI
// ranks, and the mismatches that must stop a job (srun without PMI; a rank numbered differently
// by the launcher and by MPI), without false alarms (mpirun inside a Slurm allocation).
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "core/error.hpp"
#include "parallel/runtime/launcher_env.hpp"

using namespace dpx::parallel;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

MpiPlace place(int rank, int size, int local_rank, int local_size) {
  MpiPlace p;
  p.rank = rank;
  p.size = size;
  p.local_rank = local_rank;
  p.local_size = local_size;
  return p;
}

}  // namespace

TEST_CASE("which launchers start MPI ranks") {
  CHECK_FALSE(read_launcher_env(env_of({})).launched());
  // A batch script's own shell: Slurm variables, but no srun step.
  CHECK_FALSE(read_launcher_env(env_of({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}})).launched());

  const LauncherEnv mpirun = read_launcher_env(
      env_of({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"PMIX_RANK", "2"}}));
  CHECK(mpirun.launcher == "mpirun (Open MPI)");
  CHECK(mpirun.size == 4);
  CHECK(mpirun.variables.size() == 3);

  const LauncherEnv srun_pmix = read_launcher_env(
      env_of({{"PMIX_RANK", "1"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"SLURM_PROCID", "1"}}));
  CHECK(srun_pmix.launcher == "srun (Slurm, PMIx)");
  CHECK(srun_pmix.size == 8);

  const LauncherEnv hydra = read_launcher_env(env_of({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}}));
  CHECK(hydra.launcher == "PMI (MPICH's mpiexec)");
  CHECK(hydra.size == 3);

  // srun with no PMI plugin: still launched (MPI then tells whether the tasks form one job).
  const LauncherEnv bare = read_launcher_env(env_of({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "4"}}));
  CHECK(bare.launcher == "srun (Slurm)");
  CHECK(bare.size == 4);
}

TEST_CASE("a launcher variable that is not a number is refused, naming it") {
  for (const char* bad : {"abc", "", "-1", "4x", "99999999999"}) {
    CAPTURE(bad);
    try {
      read_launcher_env(env_of({{"OMPI_COMM_WORLD_SIZE", bad}}));
      FAIL("accepted");
    } catch (const dpx::UsageError& e) {
      CHECK(std::string(e.what()).find("OMPI_COMM_WORLD_SIZE") != std::string::npos);
      CHECK(std::string(e.what()).find("unset OMPI_COMM_WORLD_SIZE") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(read_launcher_env(env_of({{"PMI_RANK", "one"}})), dpx::UsageError);
  CHECK(read_launcher_env(env_of({{"OMPI_COMM_WORLD_SIZE", "2"}})).size == 2);
}

TEST_CASE("mismatches between the launcher and MPI are named, with what to do") {
  auto mpirun = env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"PMIX_RANK", "1"}});
  CHECK(launcher_mismatches(mpirun, place(1, 4, 1, 2), "pmix").empty());
  const auto wrong = launcher_mismatches(mpirun, place(2, 4, 0, 2), "pmix");
  REQUIRE(wrong.size() == 3);
  CHECK(wrong[0] == "OMPI_COMM_WORLD_RANK=1 but MPI says this process's rank is 2");
  CHECK(wrong[1] == "OMPI_COMM_WORLD_LOCAL_RANK=1 but MPI says this process's rank on its node is 0");
  CHECK(wrong[2] == "PMIX_RANK=1 but MPI says this process's rank is 2");

  // MPICH's hydra names the rank on the node too.
  const auto hydra_local = launcher_mismatches(env_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "0"}}),
                                               place(1, 4, 1, 2), "pmi2");
  REQUIRE(hydra_local.size() == 1);
  CHECK(hydra_local[0] == "MPI_LOCALRANKID=0 but MPI says this process's rank on its node is 1");

  // srun without --mpi=pmix: every task is a world of one.
  auto srun = env_of({{"SLURM_STEP_ID", "3"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_PROCID", "2"}});
  const auto alone = launcher_mismatches(srun, place(0, 1, 0, 1), "pmi2");
  REQUIRE(alone.size() == 1);
  CHECK(alone[0].find("srun started 4 tasks (SLURM_STEP_NUM_TASKS) but MPI sees a world of 1") == 0);
  CHECK(alone[0].find("pass srun --mpi=pmi2 ") != std::string::npos);
  // srun as the launcher of the ranks: its task ids are the ranks.
  CHECK(launcher_mismatches(srun, place(2, 4, 0, 1), "pmix").empty());
  CHECK(launcher_mismatches(srun, place(1, 4, 0, 1), "pmix").size() == 1);

  // Refused before MPI starts: srun's tasks without a PMI plugin's variables, named with the plugin
  // the library needs; with any of them, or as one task, or a batch script's shell, started.
  const std::string refusal = launch_refusal(srun, "pmix");
  CHECK(refusal.find("srun started 4 tasks (SLURM_STEP_NUM_TASKS) without a PMI plugin") == 0);
  CHECK(refusal.find("pass srun --mpi=pmix ") != std::string::npos);
  CHECK(launch_refusal(env_of({{"SLURM_STEP_ID", "3"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"PMIX_RANK", "2"}}), "pmix").empty());
  CHECK(launch_refusal(env_of({{"SLURM_STEP_ID", "3"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"PMI_FD", "5"}}), "pmi2").empty());
  CHECK(launch_refusal(env_of({{"SLURM_STEP_ID", "3"}, {"SLURM_STEP_NUM_TASKS", "1"}}), "pmix").empty());
  CHECK(launch_refusal(env_of({{"SLURM_JOB_ID", "3"}, {"SLURM_NTASKS", "4"}}), "pmix").empty());

  // mpirun inside a Slurm allocation: the Slurm variables describe mpirun's daemons (one task per
  // node), not the ranks, and are not held against MPI.
  auto nested = env_of({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_PROCID", "1"},
                        {"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}});
  CHECK(launcher_mismatches(nested, place(5, 8, 1, 4), "pmix").empty());

  // Not numbers: ignored rather than misread.
  CHECK(launcher_mismatches(env_of({{"PMI_RANK", "x1"}}), place(0, 1, 0, 1), "pmix").empty());
}
