// join_process_group for a dpx built without MPI: this process alone, and a clear error when a
// launcher started several copies of it (each would train alone and write the same files).
#include "core/error.hpp"
#include "parallel/runtime/launcher_env.hpp"
#include "parallel/runtime/process_group.hpp"

namespace dpx::parallel {

std::unique_ptr<Communicator> duplicate(Communicator& comm) {
  fail("duplicate: this dpx was built without MPI, and the ", comm.backend(), " backend's communicators are not MPI's");
}

std::unique_ptr<ProcessGroup> join_process_group(int&, char**&) {
  const LauncherEnv env = read_launcher_env(process_env());
  if (env.launched() && env.size != 1)
    fail("this process was started by ", env.launcher, " as one of ", env.size > 0 ? std::to_string(env.size) : "several",
         " processes, but this dpx was built without MPI: each process would run alone and write the same files. "
         "Rebuild with MPI (apt-get install libopenmpi-dev, then cmake -DDPX_MPI=ON), or run dpx without a launcher "
         "(--devices cpu:K gives K thread ranks in one process)");
  return std::make_unique<LocalProcessGroup>();
}

}  // namespace dpx::parallel
