// chaos_cluster.h: ChaosCluster, a strata cluster whose every process strata-bench chaos starts
// itself (strata-scheduler, strata-server --rank r, strata-trainer --rank r, each with its own
// log), so that it can kill -9 one and start the same command again, SIGSTOP and SIGCONT one,
// and tell the processes it disturbed from those that crashed.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/bench/child_process.h"

namespace strata::bench {

struct ChaosClusterOptions {
  std::string bin_dir;      // where strata-scheduler, strata-server and strata-trainer are
  std::string job;          // the job file every process reads
  std::string work;         // logs and the servers' stores go here
  int servers = 2;
  int trainers = 2;
  std::vector<std::string> sets;          // --set overrides for every process
  std::vector<std::string> server_sets;   // and for the servers only
  std::vector<std::string> trainer_sets;  // and for the trainers only
};

class ChaosCluster {
 public:
  // Starts the scheduler, waits for its address, then the servers and the trainers.
  static Result<std::unique_ptr<ChaosCluster>> Start(ChaosClusterOptions options);
  ~ChaosCluster();  // kills whatever still runs

  // Waits until every server and trainer has logged that it joined the cluster. A fault before
  // then would hit a node the scheduler does not know yet (and so never declares dead).
  Status WaitUntilJoined(std::chrono::milliseconds timeout);

  // kill -9 of server `rank`, then (once the scheduler declared it dead, so that its rank may
  // register again) the same command again; returns once the new process has joined the cluster
  // (or exited), with the seconds from the kill to the restart.
  Result<double> KillAndRestartServer(int rank, std::chrono::milliseconds timeout);
  // kill -9 of server `rank`, not restarted (a replicated cluster's backup takes its shard over);
  // returns once the scheduler declared it dead.
  Status KillServer(int rank, std::chrono::milliseconds timeout);
  // kill -9 of the scheduler and the same command again at the same address (a restartable
  // scheduler rebuilds its state; without one the nodes exit after scheduler_timeout_ms).
  Result<double> KillAndRestartScheduler(std::chrono::milliseconds timeout);
  void StopTrainer(int rank) const;
  void ContinueTrainer(int rank) const;
  // SIGSTOP of server `rank` until the scheduler declared it dead, then SIGCONT: it is alive and
  // must come back by itself (Node::OnDeclaredDead); returns once it re-registered.
  Result<double> StallServer(int rank, std::chrono::milliseconds timeout);
  // The same for trainer `rank` (one of a fixed ASP/SSP ps job, which comes back so).
  Result<double> StallTrainer(int rank, std::chrono::milliseconds timeout);
  // SIGSTOP of server `rank` until the scheduler declared it dead, the same command started
  // again at its rank (as a supervisor restarting it would), then SIGCONT of the stopped one:
  // told that a newer process holds its rank, it must exit 1 without touching the job. Returns
  // the seconds from the stop to its exit. Needs a store the two processes do not share (the
  // memory store of server.replication: the stopped one holds a tiered store's lock).
  Result<double> ReplaceStalledServer(int rank, std::chrono::milliseconds timeout);
  // An elastic job (cluster.elastic): a new server started with --join (memory store) takes its
  // share of the sparse rows over, serves for `hold`, then leaves on SIGTERM, handing them back,
  // and must exit 0. Returns the seconds from its start to its exit.
  Result<double> JoinAndLeaveServer(std::chrono::milliseconds hold, std::chrono::milliseconds timeout);

  // Whether every trainer has exited, and whether each exited 0.
  bool TrainersDone();
  bool TrainersSucceeded();
  // Ends the job: SIGTERM to the scheduler (which tells the servers to stop), then waits.
  Status Stop(std::chrono::milliseconds timeout);

  // Processes that exited on their own with a non-zero code (not one this cluster killed), each
  // as "server 1 (code 134)".
  std::vector<std::string> Crashes();
  std::string scheduler_address() const { return scheduler_address_; }
  // The servers' current addresses, read from their logs' "joined as server r ... at ADDR".
  std::vector<std::string> ServerAddresses() const;
  std::string Log(const std::string& name) const;  // "scheduler", "server-0", "trainer-1"
  std::string LogPath(const std::string& name) const { return options_.work + "/" + name + ".log"; }

 private:
  explicit ChaosCluster(ChaosClusterOptions options) : options_(std::move(options)) {}
  Status StartServer(int rank);
  Status StartScheduler(const std::string& bind);
  int CountInLog(const std::string& name, const std::string& needle) const;
  // SIGSTOP of `process` (logging to `name`.log) until the scheduler declared a node dead;
  // DeadlineExceeded, with the process resumed, if it did not within `timeout`.
  Status StopUntilDeclaredDead(ChildProcess& process, const std::string& name, std::chrono::milliseconds timeout);
  // StallServer, StallTrainer: `process`, logging to `name`.log.
  Result<double> Stall(ChildProcess& process, const std::string& name, std::chrono::milliseconds timeout);

  ChaosClusterOptions options_;
  std::string scheduler_address_;
  std::unique_ptr<ChildProcess> scheduler_;
  std::vector<std::unique_ptr<ChildProcess>> servers_, trainers_;
  std::vector<std::unique_ptr<ChildProcess>> killed_;  // reaped runs this cluster killed or replaced
  int joined_ = 0;  // JoinAndLeaveServer's servers so far (their logs: joined-N.log)
};

}  // namespace strata::bench
