// chaos_cluster.cc: ChaosCluster (chaos_cluster.h).
#include "tools/bench/chaos_cluster.h"

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cluster/cluster.h"

namespace strata::bench {
namespace {

using Millis = std::chrono::milliseconds;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The line Node::Join logs in server `rank`'s log once it has joined the cluster.
std::string JoinedLine(int rank) { return "joined as server " + std::to_string(rank) + " "; }

// Polls `done` every 50 ms until it holds or `timeout` passes.
template <typename Fn>
bool PollFor(Fn done, Millis timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(Millis(50));
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<ChaosCluster>> ChaosCluster::Start(ChaosClusterOptions options) {
  std::unique_ptr<ChaosCluster> c(new ChaosCluster(std::move(options)));
  STRATA_RETURN_IF_ERROR(c->StartScheduler("tcp://127.0.0.1:0"));
  for (int r = 0; r < c->options_.servers; ++r) STRATA_RETURN_IF_ERROR(c->StartServer(r));
  for (int r = 0; r < c->options_.trainers; ++r) {
    std::vector<std::string> argv = {c->options_.bin_dir + "/strata-trainer", "--config", c->options_.job};
    for (const auto& s : c->options_.sets) argv.insert(argv.end(), {"--set", s});
    for (const auto& s : c->options_.trainer_sets) argv.insert(argv.end(), {"--set", s});
    argv.insert(argv.end(), {"--set", "cluster.scheduler=" + c->scheduler_address_, "--rank", std::to_string(r)});
    STRATA_ASSIGN_OR_RETURN(auto p, ChildProcess::Start(argv, c->LogPath("trainer-" + std::to_string(r))));
    c->trainers_.push_back(std::move(p));
  }
  return c;
}

Status ChaosCluster::WaitUntilJoined(Millis timeout) {
  std::string missing;
  auto joined = [&] {
    missing.clear();
    for (int r = 0; r < options_.servers; ++r) {
      if (!servers_[static_cast<size_t>(r)]->Running()) {
        missing = "server " + std::to_string(r) + " exited before it joined; its log:\n" +
                  Log("server-" + std::to_string(r));
        return true;
      }
      if (CountInLog("server-" + std::to_string(r), JoinedLine(r)) == 0) {
        missing = "server " + std::to_string(r);
        return false;
      }
    }
    for (int r = 0; r < options_.trainers; ++r) {
      if (CountInLog("trainer-" + std::to_string(r), "joined as trainer " + std::to_string(r) + " ") == 0 &&
          trainers_[static_cast<size_t>(r)]->Running()) {
        missing = "trainer " + std::to_string(r);
        return false;
      }
    }
    return true;
  };
  if (!PollFor(joined, timeout)) {
    return Status::DeadlineExceeded(missing + " had not joined the cluster within " + std::to_string(timeout.count()) +
                                    " ms");
  }
  if (!missing.empty()) return Status::Unavailable(missing);
  return Status::OK();
}

ChaosCluster::~ChaosCluster() {
  for (auto& t : trainers_) t.reset();
  for (auto& s : servers_) s.reset();
  scheduler_.reset();
}

Status ChaosCluster::StartScheduler(const std::string& bind) {
  const std::string address_file = options_.work + "/scheduler.address";
  std::filesystem::remove(address_file);
  std::vector<std::string> argv = {options_.bin_dir + "/strata-scheduler", "--config", options_.job,
                                   "--bind", bind, "--address-file", address_file};
  for (const auto& s : options_.sets) argv.insert(argv.end(), {"--set", s});
  STRATA_ASSIGN_OR_RETURN(scheduler_, ChildProcess::Start(argv, LogPath("scheduler")));
  std::string address;
  if (!PollFor([&] { return static_cast<bool>(std::ifstream(address_file) >> address) || !scheduler_->Running(); },
               Millis(20000)) ||
      address.empty()) {
    return Status::Unavailable("strata-scheduler did not start; its log:\n" + Log("scheduler"));
  }
  scheduler_address_ = address;
  return Status::OK();
}

Status ChaosCluster::StartServer(int rank) {
  std::vector<std::string> argv = {options_.bin_dir + "/strata-server", "--config", options_.job};
  for (const auto& s : options_.sets) argv.insert(argv.end(), {"--set", s});
  for (const auto& s : options_.server_sets) argv.insert(argv.end(), {"--set", s});
  argv.insert(argv.end(), {"--set", "cluster.scheduler=" + scheduler_address_, "--rank", std::to_string(rank)});
  STRATA_ASSIGN_OR_RETURN(auto p, ChildProcess::Start(argv, LogPath("server-" + std::to_string(rank))));
  if (static_cast<int>(servers_.size()) <= rank) servers_.resize(static_cast<size_t>(rank) + 1);
  servers_[static_cast<size_t>(rank)] = std::move(p);
  return Status::OK();
}

int ChaosCluster::CountInLog(const std::string& name, const std::string& needle) const {
  const std::string text = Log(name);
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

Result<double> ChaosCluster::KillAndRestartServer(int rank, Millis timeout) {
  const std::string name = "server-" + std::to_string(rank), joined = JoinedLine(rank);
  const int joined_before = CountInLog(name, joined);
  const auto start = std::chrono::steady_clock::now();
  STRATA_RETURN_IF_ERROR(KillServer(rank, timeout));
  STRATA_RETURN_IF_ERROR(StartServer(rank));
  const double restarted = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The next fault must find it back in the cluster: a server stalled while it still restores its
  // store, before it registers, is no member, and the scheduler never declares it dead. (One that
  // exits instead is left to Crashes.)
  ChildProcess& server = *servers_.at(static_cast<size_t>(rank));
  if (!PollFor([&] { return CountInLog(name, joined) > joined_before || !server.Running(); }, timeout)) {
    return Status::DeadlineExceeded("the restarted server " + std::to_string(rank) + " did not join within " +
                                    std::to_string(timeout.count()) + " ms; its log:\n" + Log(name));
  }
  return restarted;
}

Status ChaosCluster::KillServer(int rank, Millis timeout) {
  auto& server = servers_.at(static_cast<size_t>(rank));
  const int dead_before = CountInLog("scheduler", "declared dead");
  server->Signal(SIGKILL);
  if (server->Wait(Millis(10000)) < 0) return Status::Internal("server " + std::to_string(rank) + " survived SIGKILL");
  killed_.push_back(std::move(server));
  if (!PollFor([&] { return CountInLog("scheduler", "declared dead") > dead_before; }, timeout)) {
    return Status::DeadlineExceeded("the scheduler did not declare the killed server " + std::to_string(rank) +
                                    " dead within " + std::to_string(timeout.count()) + " ms");
  }
  return Status::OK();
}

Result<double> ChaosCluster::KillAndRestartScheduler(Millis timeout) {
  const auto start = std::chrono::steady_clock::now();
  scheduler_->Signal(SIGKILL);
  if (scheduler_->Wait(Millis(10000)) < 0) return Status::Internal("the scheduler survived SIGKILL");
  killed_.push_back(std::move(scheduler_));
  // The same address, so that every node finds it again.
  Status s;
  if (!PollFor([&] {
        s = StartScheduler(scheduler_address_);
        return s.ok();
      }, timeout)) {
    return s.WithContext("restarting the scheduler at " + scheduler_address_);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ChaosCluster::StopTrainer(int rank) const { trainers_.at(static_cast<size_t>(rank))->Signal(SIGSTOP); }
void ChaosCluster::ContinueTrainer(int rank) const { trainers_.at(static_cast<size_t>(rank))->Signal(SIGCONT); }

Result<double> ChaosCluster::StallServer(int rank, Millis timeout) {
  return Stall(*servers_.at(static_cast<size_t>(rank)), "server-" + std::to_string(rank), timeout);
}

Result<double> ChaosCluster::StallTrainer(int rank, Millis timeout) {
  return Stall(*trainers_.at(static_cast<size_t>(rank)), "trainer-" + std::to_string(rank), timeout);
}

Status ChaosCluster::StopUntilDeclaredDead(ChildProcess& process, const std::string& name, Millis timeout) {
  const int dead_before = CountInLog("scheduler", "declared dead");
  process.Signal(SIGSTOP);
  if (PollFor([&] { return CountInLog("scheduler", "declared dead") > dead_before; }, timeout)) return Status::OK();
  process.Signal(SIGCONT);
  return Status::DeadlineExceeded("the scheduler did not declare the stopped " + name + " dead within " +
                                  std::to_string(timeout.count()) + " ms");
}

Result<double> ChaosCluster::Stall(ChildProcess& process, const std::string& name, Millis timeout) {
  const std::string kBack = "re-registered after being declared dead";  // Node::Rejoin's line, once back
  const auto start = std::chrono::steady_clock::now();
  const int back_before = CountInLog(name, kBack);
  STRATA_RETURN_IF_ERROR(StopUntilDeclaredDead(process, name, timeout));
  process.Signal(SIGCONT);
  if (!PollFor([&] { return CountInLog(name, kBack) > back_before || !process.Running(); }, timeout) ||
      !process.Running()) {
    return Status::DeadlineExceeded(name + ", declared dead while stopped and resumed, " +
                                    (process.Running() ? "did not register again" : "exited") + "; its log:\n" +
                                    Log(name));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Result<double> ChaosCluster::ReplaceStalledServer(int rank, Millis timeout) {
  const std::string name = "server-" + std::to_string(rank), joined = JoinedLine(rank);
  const auto start = std::chrono::steady_clock::now();
  const int joined_before = CountInLog(name, joined);
  std::unique_ptr<ChildProcess>& slot = servers_.at(static_cast<size_t>(rank));
  STRATA_RETURN_IF_ERROR(StopUntilDeclaredDead(*slot, name, timeout));
  killed_.push_back(std::move(slot));  // its exit is this fault's, not a crash
  ChildProcess& stalled = *killed_.back();
  Status started = StartServer(rank);
  const bool replaced = started.ok() && PollFor([&] { return CountInLog(name, joined) > joined_before; }, timeout);
  stalled.Signal(SIGCONT);
  STRATA_RETURN_IF_ERROR(started);
  if (!replaced) return Status::DeadlineExceeded("the new " + name + " did not join; its log:\n" + Log(name));
  const int code = stalled.Wait(timeout);
  if (code != 1 || CountInLog(name, std::string(kSuperseded)) == 0) {
    return Status::Internal("the stopped " + name + ", replaced and resumed, " +
                            (code < 0 ? std::string("still runs") : "exited " + std::to_string(code)) +
                            " without being told that a newer process holds its rank; its log:\n" + Log(name));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool ChaosCluster::TrainersDone() {
  for (auto& t : trainers_) {
    if (t->Running()) return false;
  }
  return true;
}

bool ChaosCluster::TrainersSucceeded() {
  for (auto& t : trainers_) {
    if (t->Running() || t->exit_code() != 0) return false;
  }
  return true;
}

Status ChaosCluster::Stop(Millis timeout) {
  if (scheduler_ && scheduler_->Running()) scheduler_->Signal(SIGTERM);
  bool all = true;
  for (auto* group : {&servers_, &trainers_}) {
    for (auto& p : *group) {
      if (p && p->Wait(timeout) < 0) all = false;
    }
  }
  if (scheduler_ && scheduler_->Wait(timeout) < 0) all = false;
  return all ? Status::OK() : Status::DeadlineExceeded("some processes did not exit after the job ended");
}

Result<double> ChaosCluster::JoinAndLeaveServer(Millis hold, Millis timeout) {
  const auto start = std::chrono::steady_clock::now();
  const std::string name = "joined-" + std::to_string(joined_++);
  std::vector<std::string> argv = {options_.bin_dir + "/strata-server", "--config", options_.job};
  for (const auto& s : options_.sets) argv.insert(argv.end(), {"--set", s});
  argv.insert(argv.end(), {"--set", "server.store.kind=memory", "--set", "server.store.durability=none", "--set",
                           "cluster.scheduler=" + scheduler_address_,
                           "--join"});
  STRATA_ASSIGN_OR_RETURN(auto p, ChildProcess::Start(argv, LogPath(name)));
  const bool serving = PollFor([&] { return CountInLog(name, "serving as server") > 0 || !p->Running(); }, timeout);
  if (!serving || !p->Running()) {
    p->Signal(SIGKILL);
    (void)p->Wait(Millis(10000));
    killed_.push_back(std::move(p));
    return Status::DeadlineExceeded("a joining server did not take its keys over within " +
                                    std::to_string(timeout.count()) + " ms (log: " + LogPath(name) + ")");
  }
  std::this_thread::sleep_for(hold);
  p->Signal(SIGTERM);
  const int code = p->Wait(timeout);
  killed_.push_back(std::move(p));
  if (code != 0) {
    return Status::Internal("the joined server exited with " + std::to_string(code) + " after SIGTERM, not 0 (log: " +
                            LogPath(name) + ")");
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<std::string> ChaosCluster::Crashes() {
  std::vector<std::string> out;
  auto check = [&](const std::string& name, std::unique_ptr<ChildProcess>& p) {
    if (p && !p->Running() && p->exit_code() != 0) {
      out.push_back(name + " (code " + std::to_string(p->exit_code()) + ")");
    }
  };
  check("scheduler", scheduler_);
  for (size_t r = 0; r < servers_.size(); ++r) check("server " + std::to_string(r), servers_[r]);
  for (size_t r = 0; r < trainers_.size(); ++r) check("trainer " + std::to_string(r), trainers_[r]);
  return out;
}

std::vector<std::string> ChaosCluster::ServerAddresses() const {
  std::vector<std::string> out;
  for (int r = 0; r < options_.servers; ++r) {
    const std::string text = Log("server-" + std::to_string(r));
    const std::string key = JoinedLine(r);
    const size_t at = text.rfind(key);
    if (at == std::string::npos) continue;
    const size_t tcp = text.find(" at ", at);
    const size_t end = text.find(';', tcp);
    if (tcp != std::string::npos && end != std::string::npos) out.push_back(text.substr(tcp + 4, end - tcp - 4));
  }
  return out;
}

std::string ChaosCluster::Log(const std::string& name) const { return ReadText(LogPath(name)); }

}  // namespace strata::bench
