// placement_env.h: where a process sits in a job, learned from the environment in one place:
// strata's own STRATA_* variables, Slurm's (SLURM_PROCID, SLURM_NTASKS, SLURM_NODELIST,
// SLURM_LOCALID) and torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT);
// the rule that turns a task index into a role and rank; and loading the job with the
// precedence flags > job file > environment. docs/deploy.md is the user-facing table.
//
// Only main() reads the environment (CaptureEnvironment(environ)); everything else here takes
// the captured map, so tests pass their own.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/cluster.h"
#include "cluster/node.h"
#include "common/status.h"
#include "tools/job_config.h"

namespace strata {

using Environment = std::map<std::string, std::string, std::less<>>;

// Copies `envp` (main's environ) into a map. Call from main() only.
Environment CaptureEnvironment(char** envp);

// A value learned from the environment, with the variable it came from (for error messages).
template <class T>
struct FromEnv {
  T value{};
  std::string var;  // empty: not set
  bool set() const { return !var.empty(); }
};

// What the environment says about this process. A plain value; every field is optional.
struct JobPlacement {
  FromEnv<std::string> role;      // STRATA_ROLE: scheduler, server or trainer
  FromEnv<int> rank;              // STRATA_RANK: the rank within the role (like --rank)
  FromEnv<int> task;              // STRATA_TASK > SLURM_PROCID > RANK: index among all tasks
  FromEnv<int> tasks;             // STRATA_NTASKS > SLURM_NTASKS > WORLD_SIZE
  FromEnv<int> local_task;        // STRATA_LOCAL_TASK > SLURM_LOCALID > LOCAL_RANK
  FromEnv<std::string> scheduler; // tcp://host:port, see ReadPlacement
  FromEnv<int> servers;           // STRATA_SERVERS
  FromEnv<int> trainers;          // STRATA_TRAINERS
  // STRATA_BIND_HOST: the interface servers and trainers (and the scheduler) listen on; "*"
  // or 0.0.0.0 for all. Under Slurm or torchrun it defaults to "*".
  FromEnv<std::string> bind_host;
  // STRATA_ADVERTISE_HOST: the address peers reach this process at. Empty: the bound
  // address, or this machine's hostname when bound on every interface.
  FromEnv<std::string> advertise_host;
  std::vector<std::string> nodes;  // SLURM_NODELIST, expanded

  // The launcher that set the task variables: "strata", "slurm", "torchrun" or "".
  std::string launcher;
};

// Whether an environ entry ("NAME=value") is one ReadPlacement reads. strata-launch drops
// them from its children, which it places itself with flags (it may run inside a Slurm job).
bool IsPlacementVariable(std::string_view entry);

// Reads the convention. The scheduler's address is STRATA_SCHEDULER (host:port or
// tcp://host:port), else MASTER_ADDR:MASTER_PORT, else, under Slurm, the first host of
// SLURM_NODELIST (where task 0 runs) at STRATA_SCHEDULER_PORT (default 7000). A malformed
// value is InvalidArgument naming the variable and its value.
Result<JobPlacement> ReadPlacement(const Environment& env);

// Expands a Slurm host list: "node[01-03,07]" -> node01 node02 node03 node07, "a,b" -> a b,
// "gpu[1-2]-ib,cpu7" -> gpu1-ib gpu2-ib cpu7 (zero padding kept; one bracket per name).
Result<std::vector<std::string>> ExpandHostList(std::string_view list);

// The rule stated in the job: task 0 is the scheduler, the next `servers` tasks are servers
// 0..S-1, the next `trainers` tasks are trainers 0..T-1. A task outside 0..S+T is an error.
struct TaskRole {
  Role role = Role::kScheduler;
  int rank = 0;  // within the role; 0 for the scheduler
};
Result<TaskRole> AssignTaskRole(int task, int servers, int trainers);

// The job with precedence flags > job file > environment: the environment fills
// cluster.scheduler, cluster.servers and cluster.trainers only where neither the file nor a
// --set names them. With a task count (SLURM_NTASKS...) and no trainer count anywhere,
// trainers = tasks - 1 - servers; a task count that disagrees with 1 + servers + trainers is
// an error naming the variable.
Result<JobConfig> LoadPlacedJob(const JobFlags& flags, const JobPlacement& placement);

// The common start of a cluster binary's main(): ReadPlacement(env) into *placement, then
// LoadPlacedJob into *job. Returns the exit code main() should return now (2 after printing
// the error naming `program`, 0 after --print-config), or nullopt to go on.
std::optional<int> LoadPlacedJobOrExit(const JobFlags& flags, const Environment& env,
                                       const char* program, JobConfig* job, JobPlacement* placement);

// The flags every cluster member (server, trainer, node) shares.
struct NodeFlags {
  int rank = -1;           // --rank (-1: STRATA_RANK, else assigned by the scheduler)
  std::string bind;        // --bind endpoint ("": tcp://<STRATA_BIND_HOST>:0, else loopback)
  std::string advertise;   // --advertise host ("": STRATA_ADVERTISE_HOST, else see NodeOptions)
  bool join = false;       // --join: join a running elastic job (cluster.elastic)
};
void AddNodeFlags(CLI::App& app, NodeFlags& flags);

// NodeOptions' rank, bind endpoint and advertised host: the flags first, then the
// environment. InvalidArgument when STRATA_ROLE names another role than `role`.
Status PlaceNode(const NodeFlags& flags, const JobPlacement& placement, Role role,
                 NodeOptions* options);

// The endpoint a server or trainer binds: `flag` if given, else tcp://<bind host>:0 when the
// environment names a bind host, else `fallback`.
std::string NodeBindEndpoint(const std::string& flag, const JobPlacement& placement,
                             const std::string& fallback);

// The endpoint the scheduler binds: `flag` if given, else the job's scheduler port on the
// environment's bind host, else the job's scheduler address itself.
std::string SchedulerBindEndpoint(const std::string& flag, const JobPlacement& placement,
                                  const std::string& job_scheduler);

}  // namespace strata
