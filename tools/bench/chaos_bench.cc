// chaos_bench.cc: strata-bench chaos, the fault campaign of issue #16, bounded in time, on
// loopback against real processes (ChaosCluster: every process started by this program).
//  1. undisturbed: a ctr job (parameter servers with a tiered store under durability wal, ASP)
//     trains to the end: its eval AUC and wall time are the reference.
//  2. disturbed: the same job while faults run until the trainers finish: kill -9 and restart
//     of a server (--server-cycles, alternating ranks), of the scheduler (--scheduler-cycles),
//     SIGSTOP/SIGCONT of a trainer, a server or (not under BSP) a trainer SIGSTOPped until
//     declared dead and then resumed (--stall-cycles: it must come back by itself; with
//     --replication every other server stall is replaced by a new process first), a hostile
//     client spraying garbage and opening connections at the scheduler's and every server's
//     port, and the trainers' outgoing messages delayed (transport.fault). Reported: crashes (a
//     process that exited non-zero on its own), whether every trainer finished, the AUC beside
//     the reference, the slowdown.
//  3. ledger: one server (durability wal, its replies dropped at --drop-rate so that pushes are
//     retried) and two in-process trainers pushing counted increments through --ledger-cycles
//     kill -9s of the server: every acknowledged increment must be applied once (lost and
//     duplicated updates, the goal 0 for both; chaos_ledger.h).
// --replication: the servers keep their shards in memory with server.replication: backup; a
// killed server's backup takes its shards over at once, the server started again copies them
// back (state transfer) and the next kill waits for those copies (docs/reliability.md). The
// ledger then runs on two such servers, killing each in turn, without dropped messages.
// --consistency bsp (with --replication): the training runs under BSP, which with 2 trainers is
// deterministic, so the disturbed run's AUC must equal the undisturbed one's exactly.
#include <CLI/CLI.hpp>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include <zmq.hpp>

#include "tools/bench/bench.h"
#include "tools/bench/chaos_cluster.h"
#include "tools/bench/chaos_ledger.h"

namespace strata::bench {
namespace {

namespace fs = std::filesystem;
using Millis = std::chrono::milliseconds;

struct Options {
  int servers = 2;
  int trainers = 2;
  int steps = 3000;
  int server_cycles = 20;
  int scheduler_cycles = 0;
  int stop_cycles = 3;
  int stall_cycles = 4;  // a server or trainer SIGSTOPped until declared dead, then resumed
  int membership_cycles = 0;  // a server joining (--join) and leaving (SIGTERM); cluster.elastic
  double fault_interval_s = 1.0;  // between faults
  double delay_rate = 0.02;
  int delay_ms = 20;
  bool hostile = true;
  int ledger_cycles = 5;
  double drop_rate = 0.02;
  int timeout_s = 900;
  bool keep = false;
  bool replication = false;
  bool elastic = false;  // cluster.elastic without server joins (with --replication, say)
  std::string consistency = "asp";  // the training runs' sync.consistency (the ledger is ASP)
};

// --replication: the copies of shards server `rank` received so far (its log is appended to
// across restarts).
size_t InLog(const ChaosCluster& cl, int rank, const std::string& needle) {
  const std::string log = cl.Log("server-" + std::to_string(rank));
  size_t n = 0;
  for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++n;
  return n;
}
size_t Copies(const ChaosCluster& cl, int rank) { return InLog(cl, rank, "copy received"); }
size_t FailBacks(const ChaosCluster& cl, int rank) { return InLog(cl, rank, "handed it back"); }
// With --replication: server `rank`, which had logged `copies` copies and `backs` fail-backs
// before its fault, holds copies of its two shards again and serves its own again.
bool Recovered(const ChaosCluster& cl, int rank, size_t copies, size_t backs) {
  return Copies(cl, rank) >= copies + 2 && FailBacks(cl, rank) >= backs + 1;
}

// Kills server `rank` with SIGKILL and starts it again; with --replication, waits until it holds
// copies of its two shards again (before that, killing the other holder would lose them) and
// serves its own shard again (fail-back: before that, no server may join).
Result<double> KillAndRestart(const Options& o, ChaosCluster& cl, int rank, Millis timeout) {
  const size_t before = Copies(cl, rank), back = FailBacks(cl, rank);
  STRATA_ASSIGN_OR_RETURN(double outage, cl.KillAndRestartServer(rank, timeout));
  const auto end = std::chrono::steady_clock::now() + 2 * timeout;
  while (o.replication) {
    if (Recovered(cl, rank, before, back)) break;
    if (std::chrono::steady_clock::now() >= end) {
      return Status::DeadlineExceeded("server " + std::to_string(rank) + " did not receive copies of its shards");
    }
    std::this_thread::sleep_for(Millis(50));
  }
  return outage;
}

std::string JobYaml(const Options& o, const std::string& store) {
  std::ostringstream y;
  y << "model: {kind: ctr, fields: 8, field_vocab: 20000, embed_dim: 16, ctr_hidden: 128}\n"
    << "data: {kind: click_log, zipf_exponent: 1.05, planted_scale: 0.6, eval_samples: 50000}\n"
    << "optimizer: {kind: adamw, lr: 0.005}\n"
    << "train: {steps: " << o.steps << ", batch_size: 1024, log_every: 50, progress: false}\n"
    << "sync: {mode: ps, consistency: " << o.consistency << ", timeout_ms: 60000}\n"
    << "cluster: {heartbeat_interval_ms: 100, heartbeat_timeout_ms: 1500, scheduler_timeout_ms: 60000"
    << (o.membership_cycles > 0 || o.elastic ? ", elastic: true" : "") << "}\n"
    << "server: {workers: 2, stats_interval_ms: 0, ";
  if (o.replication) {
    y << "replication: backup}\n";  // the memory store
  } else {
    y << "store: {kind: tiered, path: " << store << ", dram_budget_mb: 8, durability: wal}}\n";
  }
  return y.str();
}

// The eval AUC in a trainer's metrics file (its last line with one); -1 when none.
double EvalAuc(const std::string& metrics) {
  std::ifstream in(metrics);
  double auc = -1;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("auc") && j.contains("eval_loss")) auc = j["auc"].get<double>();
  }
  return auc;
}

// Garbage at every address: random frames on DEALER sockets, and a crowd of idle ones.
class HostileClient {
 public:
  void Start(std::vector<std::string> addresses) {
    thread_ = std::thread([this, addresses = std::move(addresses)] {
      zmq::context_t ctx(1);
      std::vector<zmq::socket_t> idle, loud;
      for (const std::string& a : addresses) {
        for (int i = 0; i < 16; ++i) {
          idle.emplace_back(ctx, zmq::socket_type::dealer);
          idle.back().set(zmq::sockopt::linger, 0);
          idle.back().connect(a);
        }
        loud.emplace_back(ctx, zmq::socket_type::dealer);
        loud.back().set(zmq::sockopt::linger, 0);
        loud.back().set(zmq::sockopt::sndhwm, 1000);
        loud.back().connect(a);
      }
      std::mt19937_64 rng(7);
      while (!stop_) {
        for (auto& s : loud) {
          const size_t frames = 1 + rng() % 3;
          for (size_t f = 0; f < frames; ++f) {
            std::string bytes(rng() % 200, '\0');
            for (char& c : bytes) c = static_cast<char>(rng());
            const auto flags = f + 1 < frames ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                              : zmq::send_flags::dontwait;
            if (s.send(zmq::buffer(bytes), flags)) ++sent_;
          }
        }
        std::this_thread::sleep_for(Millis(5));
      }
    });
  }
  uint64_t Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return sent_;
  }

 private:
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sent_{0};
};

struct RunFigures {
  double seconds = 0;
  double auc = -1;
  bool finished = false;
  std::vector<std::string> crashes;
  int server_kills = 0, scheduler_kills = 0, stops = 0, stalls = 0, replaced = 0, joins = 0;
  double median_outage_s = 0;
  uint64_t hostile_frames = 0;
  std::string error;
};

RunFigures RunTraining(const Options& o, const std::string& bin, const fs::path& work, const std::string& tag,
                       bool disturb) {
  RunFigures f;
  const fs::path dir = work / tag;
  fs::create_directories(dir);
  const fs::path job = dir / "job.yaml";
  std::ofstream(job) << JobYaml(o, (dir / "store").string());
  ChaosClusterOptions c;
  c.bin_dir = bin;
  c.job = job.string();
  c.work = dir.string();
  c.servers = o.servers;
  c.trainers = o.trainers;
  c.sets = {"cluster.servers=" + std::to_string(o.servers), "cluster.trainers=" + std::to_string(o.trainers)};
  c.trainer_sets = {"train.metrics_path=" + (dir / "metrics-{rank}.jsonl").string()};
  if (disturb && o.delay_rate > 0) {
    c.trainer_sets.insert(c.trainer_sets.end(), {"transport.fault.delay_rate=" + std::to_string(o.delay_rate),
                                                 "transport.fault.delay_ms=" + std::to_string(o.delay_ms)});
  }
  Stopwatch clock;
  auto cluster = ChaosCluster::Start(c);
  if (!cluster.ok()) {
    f.error = cluster.status().ToString();
    return f;
  }
  ChaosCluster& cl = **cluster;
  // No fault before every node has joined: a server killed before it registered is never
  // declared dead (and the hostile client needs the servers' logged addresses).
  if (Status s = cl.WaitUntilJoined(Millis(60000)); !s.ok()) {
    f.error = s.ToString();
    return f;
  }
  HostileClient hostile;
  if (disturb && o.hostile) {
    std::vector<std::string> targets = cl.ServerAddresses();
    targets.push_back(cl.scheduler_address());
    hostile.Start(targets);
  }
  std::vector<double> outages;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.timeout_s);
  int fault = 0;
  while (!cl.TrainersDone() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(Millis(static_cast<int>(o.fault_interval_s * 1000)));
    if (!disturb || cl.TrainersDone()) continue;
    // Round robin over the kinds of fault still to run.
    const bool server = f.server_kills < o.server_cycles, scheduler = f.scheduler_kills < o.scheduler_cycles,
               stop = f.stops < o.stop_cycles, stall = f.stalls < o.stall_cycles,
               member = f.joins < o.membership_cycles;
    if (!server && !scheduler && !stop && !stall && !member) continue;
    const int kind = fault++ % 5;
    if (kind == 0 && server) {
      const int rank = f.server_kills % o.servers;
      Result<double> s = KillAndRestart(o, cl, rank, Millis(30000));
      if (!s.ok()) {
        f.error = s.status().ToString();
        break;
      }
      outages.push_back(*s);
      ++f.server_kills;
    } else if (kind == 1 && scheduler) {
      Result<double> s = cl.KillAndRestartScheduler(Millis(30000));
      if (!s.ok()) {
        f.error = s.status().ToString();
        break;
      }
      ++f.scheduler_kills;
    } else if (kind == 2 && stop) {
      const int t = f.stops % o.trainers;
      cl.StopTrainer(t);
      std::this_thread::sleep_for(Millis(1000));
      cl.ContinueTrainer(t);
      ++f.stops;
    } else if (kind == 3 && stall) {
      // Alive but silent past the heartbeat timeout: declared dead, it must come back by itself
      // (with --replication as the backup of its shards: the next fault waits for its copies).
      // Servers and trainers in turn; not trainers under BSP (a trainer's death fails the clock).
      const bool trainer = o.consistency != "bsp" && f.stalls % 2 == 1;
      const int turn = o.consistency != "bsp" ? f.stalls / 2 : f.stalls;
      const int rank = turn % (trainer ? o.trainers : o.servers);
      // With --replication every other server stall is a replacement: a new process takes the
      // rank before the stalled one resumes, and the resumed one must end.
      const bool replace = !trainer && o.replication && turn % 2 == 1;
      const size_t before = trainer ? 0 : Copies(cl, rank), back = trainer ? 0 : FailBacks(cl, rank);
      Result<double> s = trainer   ? cl.StallTrainer(rank, Millis(30000))
                         : replace ? cl.ReplaceStalledServer(rank, Millis(30000))
                                   : cl.StallServer(rank, Millis(30000));
      while (s.ok() && !trainer && o.replication && !Recovered(cl, rank, before, back)) {
        if (cl.TrainersDone()) break;
        std::this_thread::sleep_for(Millis(50));
      }
      if (!s.ok()) {
        f.error = s.status().ToString();
        break;
      }
      ++f.stalls;
      if (replace) ++f.replaced;
    } else if (kind == 4 && member) {
      const auto hold = Millis(static_cast<int>(o.fault_interval_s * 1000));
      if (Result<double> s = cl.JoinAndLeaveServer(hold, Millis(60000)); !s.ok()) {
        f.error = s.status().ToString();
        break;
      }
      ++f.joins;
    }
  }
  f.hostile_frames = hostile.Stop();
  f.finished = cl.TrainersSucceeded();
  f.seconds = clock.Seconds();
  if (Status s = cl.Stop(Millis(20000)); !s.ok() && f.error.empty()) f.error = s.ToString();
  f.crashes = cl.Crashes();
  f.auc = EvalAuc((dir / "metrics-0.jsonl").string());
  f.median_outage_s = Median(outages);
  return f;
}

Result<Report> RunChaosBench(const Options& o) {
  if (o.consistency == "bsp" && !o.replication && (o.server_cycles > 0 || o.stall_cycles > 0)) {
    // A BSP server sums a clock's pushes in memory until the clock completes: a kill -9 of the
    // only holder loses the acknowledged pushes of the clock in progress.
    return Status::InvalidArgument("--consistency bsp with --server-cycles or --stall-cycles needs --replication: "
                                   "without a backup a killed server loses the summed pushes of the clock in progress");
  }
  if ((o.membership_cycles > 0 || o.elastic) && o.consistency != "bsp" && o.stall_cycles > 1) {
    // Every other stall is a trainer's (not under bsp), and in an elastic job a trainer declared
    // dead has left it for good: its next clock is refused and it ends.
    return Status::InvalidArgument("--stall-cycles above 1 stalls a trainer past the heartbeat timeout, and in an "
                                   "elastic job (--membership-cycles, --elastic) a trainer declared dead has left "
                                   "it: use --stall-cycles 1 (a server only) or --consistency bsp");
  }
  Stopwatch total;
  const std::string bin = fs::canonical("/proc/self/exe").parent_path().string();
  std::string tmpl = "/tmp/strata-bench-chaos-XXXXXX";
  if (!mkdtemp(tmpl.data())) return Status::IOError(std::string("mkdtemp: ") + std::strerror(errno));
  const fs::path work = tmpl;
  const RunFigures base = RunTraining(o, bin, work, "undisturbed", /*disturb=*/false);
  if (!base.error.empty() || !base.finished) {
    return Status::Aborted("the undisturbed run failed (" + base.error + "); logs in " + work.string());
  }
  const RunFigures hit = RunTraining(o, bin, work, "disturbed", /*disturb=*/true);
  LedgerOptions lo;
  lo.bin_dir = bin;
  lo.work = work;
  lo.cycles = o.ledger_cycles;
  lo.fault_interval_s = o.fault_interval_s;
  lo.drop_rate = o.drop_rate;
  lo.replication = o.replication;
  lo.kill_and_restart = [&o](ChaosCluster& cl, int rank) { return KillAndRestart(o, cl, rank, Millis(30000)).status(); };
  const LedgerFigures ledger = RunLedger(lo);

  Report report;
  report.benchmark = "chaos";
  report.config = {{"servers", o.servers}, {"trainers", o.trainers}, {"steps", o.steps},
                   {"server_cycles", o.server_cycles}, {"scheduler_cycles", o.scheduler_cycles},
                   {"stop_cycles", o.stop_cycles}, {"stall_cycles", o.stall_cycles},
                   {"membership_cycles", o.membership_cycles},
                   {"delay_rate", o.delay_rate}, {"delay_ms", o.delay_ms},
                   {"hostile", o.hostile}, {"ledger_cycles", o.ledger_cycles}, {"drop_rate", o.drop_rate},
                   {"replication", o.replication}, {"elastic", o.elastic || o.membership_cycles > 0},
                   {"consistency", o.consistency}};
  std::string sync = o.consistency;
  std::transform(sync.begin(), sync.end(), sync.begin(), [](unsigned char c) { return std::toupper(c); });
  const std::string elastic = o.elastic || o.membership_cycles > 0 ? ", cluster.elastic" : "";
  Table runs(o.replication ? "ctr training (ps, " + sync + elastic + ", memory store, server.replication: backup)"
                           : "ctr training (ps, " + sync + elastic + ", tiered store with durability wal)",
             {{"run", "run"}, {"wall s", "seconds", Table::Format::kFixed1}, {"eval AUC", "auc", Table::Format::kFixed3},
              {"finished", "finished"}, {"crashes", "crashes", Table::Format::kInteger},
              {"server kills", "server_kills", Table::Format::kInteger},
              {"scheduler kills", "scheduler_kills", Table::Format::kInteger},
              {"trainer stops", "stops", Table::Format::kInteger},
              {"server/trainer stalls", "stalls", Table::Format::kInteger},
              {"of them replaced", "replaced", Table::Format::kInteger},
              {"server joins+leaves", "joins", Table::Format::kInteger},
              {"hostile frames", "hostile_frames", Table::Format::kInteger},
              {"kill->restart s (median)", "outage_s", Table::Format::kFixed2}});
  for (const auto* r : {&base, &hit}) {
    runs.AddRow({r == &base ? "undisturbed" : "disturbed", r->seconds, r->auc, r->finished ? "yes" : "no",
                 static_cast<int64_t>(r->crashes.size()), r->server_kills, r->scheduler_kills, r->stops, r->stalls,
                 r->replaced, r->joins, r->hostile_frames, r->median_outage_s});
  }
  report.tables.push_back(std::move(runs));
  Table goals("against the goals", {{"figure", "figure"}, {"value", "value"}, {"goal", "goal"}, {"met", "met"}});
  const double auc_gap = hit.auc >= 0 && base.auc >= 0 ? std::abs(hit.auc - base.auc) : 1.0;
  goals.AddRow({"crashes", static_cast<int64_t>(hit.crashes.size()), "0", hit.crashes.empty() ? "yes" : "no"});
  goals.AddRow({"|AUC - undisturbed|", auc_gap, "<= 0.01", auc_gap <= 0.01 ? "yes" : "no"});
  goals.AddRow({"slowdown (wall, disturbed / undisturbed)", base.seconds > 0 ? hit.seconds / base.seconds : 0.0, "-", "-"});
  goals.AddRow({"acknowledged updates lost (ledger)", ledger.lost, "0", ledger.lost == 0 && ledger.error.empty() ? "yes" : "no"});
  goals.AddRow({"duplicates applied (ledger)", ledger.duplicated, "0",
                ledger.duplicated == 0 && ledger.error.empty() ? "yes" : "no"});
  report.tables.push_back(std::move(goals));
  Table led(o.replication ? "ledger: 2 servers (replication: backup), 2 in-process trainers, kill -9 cycles"
                          : "ledger: 1 server (replies dropped at --drop-rate), 2 in-process trainers, kill -9 cycles",
            {{"server kills", "kills", Table::Format::kInteger}, {"acknowledged", "acknowledged", Table::Format::kInteger},
             {"applied", "applied", Table::Format::kInteger}, {"lost", "lost", Table::Format::kInteger},
             {"duplicated", "duplicated", Table::Format::kInteger}, {"retried requests", "retries", Table::Format::kInteger},
             {"failed pushes", "failed", Table::Format::kInteger},
             {"of their increments applied", "failed_applied", Table::Format::kInteger}});
  led.AddRow({ledger.kills, ledger.acknowledged, ledger.applied, ledger.lost, ledger.duplicated, ledger.retries,
              ledger.failed, ledger.failed_applied});
  report.tables.push_back(std::move(led));
  report.notes = {
      "every process is started by this program on loopback (strata-scheduler, strata-server --rank r, "
      "strata-trainer --rank r); a server is killed with SIGKILL and started again with the same command once "
      "the scheduler declared it dead; the trainers ride the outage on retries (sync.timeout_ms 60 s).",
      "disturbed: faults in turn every --fault-interval s until the trainers finish or the cycles run out: "
      "a server kill -9 + restart, a scheduler kill -9 + restart at the same address, a trainer SIGSTOP for "
      "1 s, a server or (not under BSP) a trainer SIGSTOPped until the scheduler declared it dead and then "
      "resumed (it must come back by itself), a server joining the job and leaving it again "
      "(--membership-cycles; cluster.elastic); meanwhile a hostile client sends random frames to the "
      "scheduler and every server and holds 16 idle connections to each, and the trainers' outgoing "
      "messages are delayed (transport.fault).",
      "crashes: processes that exited non-zero on their own (not the ones killed). ASP and SSP training are "
      "not deterministic: the AUC gap includes run-to-run variation. BSP with 2 trainers is (a clock's sum of "
      "two pushes is the same float in either order): a run that loses no acknowledged update and applies none "
      "twice ends with the undisturbed run's AUC exactly."};
  if (o.replication) {
    report.notes.push_back("--replication: a killed server's backup takes its shards over at once; the server started "
                           "again copies them back, and the next kill waits for those copies; every other server stall "
                           "is a replacement (a new process started at the stalled one's rank before it resumes; the "
                           "resumed one must exit 1, told that a newer process holds its rank); the ledger's messages "
                           "are not dropped.");
  }
  for (const std::string& c : hit.crashes) report.notes.push_back("crash: " + c);
  if (!hit.error.empty()) report.notes.push_back("disturbed run stopped early: " + hit.error);
  if (!ledger.error.empty()) report.notes.push_back("ledger: " + ledger.error);
  report.notes.push_back("ledger: a push whose wait failed may or may not have been applied (the process that applied "
                         "it was killed before its reply left, say): its increments count as neither lost nor "
                         "duplicated unless a key ends above its acknowledged plus those increments.");
  if (ledger.failed > 0) report.notes.push_back("ledger: the first failed push: " + ledger.first_failure);
  if (ledger.trainer_rejoins > 0) {
    report.notes.push_back("ledger: an in-process trainer was declared dead while it ran (a heartbeat gap past "
                           "cluster.heartbeat_timeout_ms) and registered again, " +
                           std::to_string(ledger.trainer_rejoins) + " time(s)");
  }
  const unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  report.notes.push_back(HostLoadNote(cpus, total.Seconds()));
  if (static_cast<unsigned>(o.servers + o.trainers + 1) > cpus) {
    report.notes.push_back("oversubscribed: " + std::to_string(o.servers + o.trainers + 1) + " processes on " +
                           std::to_string(cpus) + " cores.");
  }
  FinishWorkDir(work, o.keep || !hit.crashes.empty() || !hit.error.empty(), &report.notes);
  return report;
}

}  // namespace

BenchFn SetupChaosBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--servers", o->servers, "server processes")->capture_default_str();
  app.add_option("--trainers", o->trainers, "trainer processes")->capture_default_str();
  app.add_option("--steps", o->steps, "ctr training steps")->capture_default_str();
  app.add_option("--server-cycles", o->server_cycles, "kill -9 + restart cycles of a server")->capture_default_str();
  app.add_option("--scheduler-cycles", o->scheduler_cycles, "kill -9 + restart cycles of the scheduler")
      ->capture_default_str();
  app.add_option("--stop-cycles", o->stop_cycles, "SIGSTOP/SIGCONT cycles of a trainer")->capture_default_str();
  app.add_option("--stall-cycles", o->stall_cycles,
                 "SIGSTOP of a server, then (not under bsp) of a trainer, until it is declared dead, then SIGCONT "
                 "(it comes back by itself; with --replication every other server stall starts a new process at "
                 "its rank first, and the resumed one must end)")
      ->capture_default_str();
  app.add_option("--membership-cycles", o->membership_cycles,
                 "a server started with --join that takes its keys over, serves one fault interval and leaves on "
                 "SIGTERM (the job gets cluster.elastic)")
      ->capture_default_str();
  app.add_option("--fault-interval", o->fault_interval_s, "seconds between faults")->capture_default_str();
  app.add_option("--delay-rate", o->delay_rate, "fraction of the trainers' messages delayed")->capture_default_str();
  app.add_option("--delay-ms", o->delay_ms, "how long a delayed message waits")->capture_default_str();
  app.add_option("--ledger-cycles", o->ledger_cycles, "kill -9 cycles of the ledger's server")->capture_default_str();
  app.add_option("--drop-rate", o->drop_rate, "fraction of the ledger server's messages dropped")->capture_default_str();
  app.add_flag("!--no-hostile", o->hostile, "no hostile client");
  app.add_option("--timeout", o->timeout_s, "limit on each training run, seconds")->capture_default_str();
  app.add_flag("--keep", o->keep, "keep the work directory (logs, stores, metrics)");
  app.add_option("--consistency", o->consistency,
                 "the training runs' sync.consistency (bsp with server kills or stalls needs --replication)")
      ->check(CLI::IsMember({"asp", "ssp", "bsp"}))
      ->capture_default_str();
  app.add_flag("--replication", o->replication,
               "servers with server.replication: backup (memory store): a killed server's backup takes over, "
               "the restarted server copies its shards back and takes its own back");
  app.add_flag("--elastic", o->elastic,
               "the job gets cluster.elastic (as with --membership-cycles) without servers joining: under bsp its "
               "clocks complete by their members' records, which a replicated server's copy carries");
  return [o] { return RunChaosBench(*o); };
}

}  // namespace strata::bench
