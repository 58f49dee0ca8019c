// launcher.cc: Launcher.
#include "tools/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <spdlog/fmt/fmt.h>

#include "tools/placement_env.h"
#include "tools/signals.h"

extern char** environ;

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

std::string Code(int exit_code) {
  if (exit_code >= 128) return "signal " + std::to_string(exit_code - 128);
  return "code " + std::to_string(exit_code);
}

// A child's log line "[2026-01-02 03:04:05.678] [trainer:0] [info] text" split into its level
// and text; false when the line is not in that form (raw stderr, a CHECK failure).
bool SplitLogLine(const std::string& line, std::string* level, std::string* text) {
  if (line.size() < 2 || line[0] != '[' || !std::isdigit(static_cast<unsigned char>(line[1]))) return false;
  size_t at = 0;
  for (int field = 0; field < 3; ++field) {  // time, identity, level
    const size_t close = line.find("] ", at);
    if (close == std::string::npos || line[at] != '[') return false;
    if (field == 2) *level = line.substr(at + 1, close - at - 1);
    at = close + 2;
  }
  *text = line.substr(at);
  return true;
}

}  // namespace

Launcher::Launcher(LaunchOptions options) : options_(std::move(options)) {
  char templ[] = "/tmp/strata-launch-XXXXXX";
  const char* made = mkdtemp(templ);
  work_dir_ = made ? made : "/tmp";
}

Launcher::~Launcher() {
  StopAll();
  std::error_code ec;
  if (work_dir_ != "/tmp") std::filesystem::remove_all(work_dir_, ec);
}

Status Launcher::Spawn(const std::string& name, std::vector<std::string> argv) {
  if (argv.empty()) return Status::InvalidArgument(name + ": empty command");
  if (argv[0].find('/') == std::string::npos) argv[0] = options_.bin_dir + "/" + argv[0];
  if (access(argv[0].c_str(), X_OK) != 0) {
    return Status::NotFound(name + ": no executable at " + argv[0]);
  }
  // The environment, built before fork (the child must not allocate).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    // Placement variables (a Slurm job's SLURM_PROCID...) would contradict the flags we give.
    if (std::strncmp(*e, "STRATA_PROGRESS=", 16) == 0 || IsPlacementVariable(*e)) continue;
    env_strings.emplace_back(*e);
  }
  env_strings.emplace_back("STRATA_PROGRESS=launcher");
  // The trainers share this machine's cores: each gets its share for its BLAS threads (as
  // torchrun sets OMP_NUM_THREADS), unless the user chose.
  if (!std::getenv("OPENBLAS_NUM_THREADS") && options_.trainers > 0) {
    const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    env_strings.emplace_back("OPENBLAS_NUM_THREADS=" + std::to_string(std::max(1L, cores / options_.trainers)));
  }
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Status::IOError("pipe: " + std::string(strerror(errno)));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::IOError("fork: " + std::string(strerror(errno)));
  if (pid == 0) {
    // Dies with the launcher, however the launcher dies.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve(args[0], args.data(), envp.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  auto child = std::make_unique<Child>();
  child->name = name;
  child->pid = pid;
  child->running = true;
  child->started = Clock::now();
  const int fd = fds[0];
  child->reader = std::thread([this, fd, from = child.get(), prefix = "[" + name + "] "] {
    FILE* in = fdopen(fd, "r");
    char* line = nullptr;
    size_t cap = 0;
    while (getline(&line, &cap, in) > 0) OnLine(prefix, line, from);
    free(line);
    fclose(in);
  });
  children_.push_back(std::move(child));
  OnLine("", "strata-launch: started " + name + " (pid " + std::to_string(pid) + ")\n");
  return Status::OK();
}

void Launcher::OnLine(const std::string& prefix, const std::string& line, Child* from) {
  std::lock_guard lock(out_mu_);
  if (from && line.rfind("@progress ", 0) != 0) {
    from->tail.push_back(line);
    if (from->tail.size() > kTailLines) from->tail.pop_front();
  }
  static const std::string kMark = "@progress ", kSummary = "@summary ";
  if (line.compare(0, kSummary.size(), kSummary) == 0 && prefix == "[trainer 0] ") {
    job_report_ = ParseJobReport(line.substr(kSummary.size()));
    if (job_report_) return;
  }
  if (line.compare(0, kMark.size(), kMark) == 0) {
    auto j = nlohmann::json::parse(line.substr(kMark.size()), nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("rank") && j["rank"].is_number_integer()) {
      const int rank = j["rank"].get<int>();
      if (rank >= 0 && rank < 4096) {
        if (static_cast<int>(progress_.size()) <= rank) progress_.resize(rank + 1);
        Progress& p = progress_[rank];
        p.step = j.value("step", int64_t{0});
        p.steps = j.value("steps", int64_t{0});
        p.loss = j.value("loss", 0.0);
        p.samples_per_s = j.value("samples_per_s", 0.0);
        p.eta_s = j.value("eta_s", 0.0);
        ShowProgressLocked(false);
        return;
      }
    }
  }
  std::string shown = line;
  if (log_) {
    std::fputs(prefix.c_str(), log_);
    std::fputs(line.c_str(), log_);
    if (!line.empty() && line.back() != '\n') std::fputc('\n', log_);
    std::fflush(log_);
    if (!ForScreen(prefix, line)) return;
    // On the screen without the time and identity: "[server 1] warning: ...".
    std::string level, text;
    if (SplitLogLine(line, &level, &text)) shown = level == "info" ? text : level + ": " + text;
  }
  if (progress_shown_) std::fputs("\r\033[K", stdout);  // the log line goes above the progress line
  std::fputs(prefix.c_str(), stdout);
  std::fputs(shown.c_str(), stdout);
  if (!shown.empty() && shown.back() != '\n') std::fputc('\n', stdout);
  progress_shown_ = false;
  if (tty_ && !progress_.empty() && !finished_) ShowProgressLocked(true);
  std::fflush(stdout);
}

bool Launcher::ForScreen(const std::string& prefix, const std::string& line) {
  if (prefix.empty()) return line.rfind("strata-launch: started ", 0) != 0;  // Run() sums those up
  std::string level, text;
  if (!SplitLogLine(line, &level, &text)) return true;  // not a log line: a crash's words
  if (level != "info" && level != "debug" && level != "trace") return true;
  // The few set-up lines people want: the model, the plan, what was written.
  if (prefix == "[trainer 0] ") {
    for (const char* start : {"model has ", "parallel plan: ", "wrote ", "plot: "}) {
      if (text.rfind(start, 0) == 0) return true;
    }
  }
  return prefix == "[scheduler] " && text.find("cluster complete") != std::string::npos;
}

void Launcher::ShowTail(Child& child) {
  if (!log_) return;  // without a log file every line is on the screen already
  if (child.reader.joinable()) child.reader.join();  // its last words are read once it exited
  std::lock_guard lock(out_mu_);
  if (progress_shown_) std::fputs("\r\033[K", stdout);
  progress_shown_ = false;
  std::fprintf(stdout, "---- the last lines of %s (all of them in %s):\n", child.name.c_str(), options_.log_path.c_str());
  for (const std::string& line : child.tail) {
    std::fputs(line.c_str(), stdout);
    if (!line.empty() && line.back() != '\n') std::fputc('\n', stdout);
  }
  std::fputs("----\n", stdout);
  std::fflush(stdout);
}

void Launcher::PrintReport() {
  std::vector<ProcessReport> rows;
  for (const auto& c : children_) {
    rows.push_back({c->name, c->running ? -1 : c->exit_code, c->wall_seconds, c->peak_rss_kib});
  }
  std::lock_guard lock(out_mu_);
  for (const std::string& row : FormatReport(rows, job_report_)) {
    std::printf("%s\n", row.c_str());
    if (log_) std::fprintf(log_, "%s\n", row.c_str());
  }
  std::fflush(stdout);
}

std::string Launcher::ProgressLineLocked() const {
  int64_t slowest = INT64_MAX, fastest = 0, steps = 0;
  double rate = 0, eta = 0, loss = 0;
  int reporting = 0;
  for (const Progress& p : progress_) {
    if (p.steps == 0) continue;
    ++reporting;
    slowest = std::min(slowest, p.step);
    fastest = std::max(fastest, p.step);
    steps = std::max(steps, p.steps);
    rate += p.samples_per_s;
    eta = std::max(eta, p.eta_s);
    loss += p.loss;
  }
  if (reporting > 0) loss /= reporting;  // each trainer's latest loss

  const int e = static_cast<int>(eta);
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "progress: step %lld/%lld%s | loss %.5f | %.0f samples/s | %d/%d trainers | ETA %02d:%02d:%02d",
                static_cast<long long>(slowest), static_cast<long long>(steps),
                fastest > slowest ? (" (fastest " + std::to_string(fastest) + ")").c_str() : "",
                loss, rate, reporting, options_.trainers, e / 3600, e / 60 % 60, e % 60);
  return buf;
}

void Launcher::ShowProgressLocked(bool force) {
  const auto now = Clock::now();
  if (tty_) {
    std::fputs(("\r\033[K" + ProgressLineLocked()).c_str(), stdout);
    progress_shown_ = true;
  } else if (force || now - last_progress_ > std::chrono::seconds(5)) {
    // Not a terminal (a log file, CI): a progress line every few seconds.
    std::fputs(("strata-launch: " + ProgressLineLocked() + "\n").c_str(), stdout);
  } else {
    return;
  }
  last_progress_ = now;
  std::fflush(stdout);
}

Result<std::string> Launcher::WaitForSchedulerAddress(const std::string& path, const Child& scheduler) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    std::ifstream in(path);
    std::string address;
    if (in >> address && !address.empty()) return address;
    Reap();
    if (!scheduler.running) {
      return Status::Unavailable("the scheduler exited with " + Code(scheduler.exit_code) + " before listening");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::DeadlineExceeded("the scheduler did not start listening within 30 s");
}

Status Launcher::SpawnScheduler(const std::string& bind) {
  const std::string address_file = work_dir_ + "/scheduler-" + std::to_string(scheduler_restarts_) + ".address";
  std::vector<std::string> argv = {"strata-scheduler", "--bind", bind, "--address-file", address_file};
  argv.insert(argv.end(), common_args_.begin(), common_args_.end());
  STRATA_RETURN_IF_ERROR(Spawn("scheduler", argv));
  STRATA_ASSIGN_OR_RETURN(std::string address, WaitForSchedulerAddress(address_file, *children_.back()));
  if (!scheduler_address_.empty() && address != scheduler_address_) {
    return Status::Internal("the restarted scheduler listens on " + address + ", not " + scheduler_address_);
  }
  scheduler_address_ = address;
  return Status::OK();
}

Status Launcher::RestartScheduler(Child& dead) {
  Child* gone = &dead;
  for (;;) {
    const std::string what =
        "the scheduler (pid " + std::to_string(gone->pid) + ") exited with " + Code(gone->exit_code);
    bool others = false;
    for (const auto& c : children_) others |= c.get() != gone && c->running;
    if (!others) return Status::Aborted(what + " after every other process had ended");
    if (scheduler_restarts_ >= options_.scheduler_restarts) {
      return Status::Aborted(what + "; it was restarted " + std::to_string(scheduler_restarts_) +
                             " time(s) already (--scheduler-restarts " + std::to_string(options_.scheduler_restarts) +
                             "); stopped the cluster");
    }
    gone->replaced = true;
    gone->name = "scheduler (restarted)";
    ++scheduler_restarts_;
    OnLine("", fmt::format("strata-launch: {}; starting it again at {} (restart {} of at most {}); the nodes "
                           "re-register with it\n",
                           what, scheduler_address_, scheduler_restarts_, options_.scheduler_restarts));
    // The same address: the nodes dial it again on their own (ZeroMQ reconnects).
    const size_t spawned = children_.size();
    Status s = SpawnScheduler(scheduler_address_);
    if (s.ok()) return Status::OK();
    // One that died before it listened is a death like any other: restarted again while the
    // budget lasts.
    Child* fresh = children_.size() > spawned ? children_.back().get() : nullptr;
    if (!fresh || fresh->running || fresh->exit_code < 0) {
      return Status::Aborted("restarting the scheduler at " + scheduler_address_ + ": " + s.ToString());
    }
    gone = fresh;
  }
}

void Launcher::Reap() {
  int status = 0;
  pid_t pid;
  struct rusage usage {};
  while ((pid = wait4(-1, &status, WNOHANG, &usage)) > 0) {
    for (auto& c : children_) {
      if (c->pid != pid) continue;
      c->running = false;
      c->wall_seconds = std::chrono::duration<double>(Clock::now() - c->started).count();
      // ru_maxrss counts the launcher's own pages copied at fork; the sampled VmHWM does not.
      if (c->peak_rss_kib == 0) c->peak_rss_kib = usage.ru_maxrss;
      c->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }
}

void Launcher::SampleMemory() {
  for (auto& c : children_) {
    if (!c->running) continue;
    std::ifstream status("/proc/" + std::to_string(c->pid) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmHWM:", 0) == 0) {
        c->peak_rss_kib = std::max(c->peak_rss_kib, std::atol(line.c_str() + 6));
        break;
      }
    }
  }
}

bool Launcher::AnyRunning() const {
  for (const auto& c : children_) {
    if (c->running) return true;
  }
  return false;
}

void Launcher::StopAll() {
  Reap();
  for (auto& c : children_) {
    if (c->running) kill(c->pid, SIGTERM);
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.grace_ms);
  while (AnyRunning() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Reap();
  }
  for (auto& c : children_) {
    if (c->running) {
      std::fprintf(stderr, "strata-launch: %s (pid %d) ignored SIGTERM; killing it\n",
                   c->name.c_str(), c->pid);
      kill(c->pid, SIGKILL);
    }
  }
  while (AnyRunning()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    Reap();
  }
  for (auto& c : children_) {
    if (c->reader.joinable()) c->reader.join();
  }
}

int Launcher::Run() {
  const auto start = Clock::now();
  tty_ = isatty(STDOUT_FILENO);
  if (!options_.log_path.empty()) {
    log_ = std::fopen(options_.log_path.c_str(), "w");
    if (!log_) {
      std::fprintf(stderr, "strata-launch: cannot write the log file %s (--log): %s\n", options_.log_path.c_str(),
                   strerror(errno));
      return 1;
    }
  }
  struct CloseLog {
    FILE*& f;
    ~CloseLog() {
      if (f) std::fclose(f);
      f = nullptr;
    }
  } close_log{log_};
  InstallStopSignals();
  auto common_args = [&] {
    std::vector<std::string> args;
    if (!options_.config_path.empty()) args.insert(args.end(), {"--config", options_.config_path});
    for (const auto& o : options_.overrides) args.insert(args.end(), {"--set", o});
    args.insert(args.end(), {"--set", "cluster.servers=" + std::to_string(options_.servers),
                             "--set", "cluster.trainers=" + std::to_string(options_.trainers)});
    return args;
  };
  auto fail = [&](const Status& s) {
    std::fprintf(stderr, "strata-launch: %s\n", s.ToString().c_str());
    if (log_) std::fprintf(log_, "strata-launch: %s\n", s.ToString().c_str());
    StopAll();
    {
      std::lock_guard lock(out_mu_);
      if (progress_shown_) std::fputs("\n", stdout);
      progress_shown_ = false;
      finished_ = true;
    }
    PrintReport();
    if (log_) std::fprintf(stderr, "strata-launch: every process's output is in %s\n", options_.log_path.c_str());
    return 1;
  };

  common_args_ = common_args();
  if (Status s = SpawnScheduler("tcp://127.0.0.1:0"); !s.ok()) return fail(s);

  for (int role = 0; role < 2; ++role) {
    const int count = role == 0 ? options_.servers : options_.trainers;
    for (int rank = 0; rank < count; ++rank) {
      std::vector<std::string> argv = role == 0 ? options_.server_command : options_.trainer_command;
      argv.insert(argv.end(), common_args_.begin(), common_args_.end());
      argv.insert(argv.end(), {"--set", "cluster.scheduler=" + scheduler_address_, "--rank", std::to_string(rank)});
      const std::string name = std::string(role == 0 ? "server " : "trainer ") + std::to_string(rank);
      if (Status s = Spawn(name, argv); !s.ok()) return fail(s);
    }
  }
  if (log_) {
    OnLine("", fmt::format("strata-launch: scheduler at {}, {} server{} and {} trainer{} running; all their output: {}\n",
                           scheduler_address_, options_.servers, options_.servers == 1 ? "" : "s", options_.trainers,
                           options_.trainers == 1 ? "" : "s", options_.log_path));
  }

  // Supervise: the job succeeds when every process exited 0; the first failure stops it
  // (unless it is a trainer and the job goes on without lost trainers).
  std::vector<std::string> lost;
  auto sampled = Clock::now();
  while (true) {
    if (Clock::now() - sampled > std::chrono::milliseconds(200)) {
      SampleMemory();
      sampled = Clock::now();
    }
    Reap();
    bool restarted = false;
    for (const auto& c : children_) {
      if (c->running || c->exit_code == 0 || c->replaced) continue;
      if (c->name == "scheduler" && options_.scheduler_restarts > 0) {
        Child* dead = c.get();  // children_ grows below: `c` may not survive it
        const Status s = RestartScheduler(*dead);
        if (s.ok()) {
          restarted = true;  // look again from the top
          break;
        }
        ShowTail(*dead);
        return fail(s);
      }
      const std::string what = c->name + " (pid " + std::to_string(c->pid) + ") exited with " + Code(c->exit_code);
      if (options_.keep_going && c->name.rfind("trainer ", 0) == 0 && c->name != "trainer 0") {
        if (std::find(lost.begin(), lost.end(), what) == lost.end()) {
          lost.push_back(what);
          OnLine("", "strata-launch: " + what + "; the other trainers go on without it\n");
        }
        continue;
      }
      ShowTail(*c);
      return fail(Status::Aborted(what + "; stopped the cluster"));
    }
    if (restarted) continue;
    if (!AnyRunning()) break;
    if (StopRequested()) {
      std::fprintf(stderr, "strata-launch: interrupted; stopping the cluster\n");
      StopAll();
      PrintReport();
      return 130;
    }
    if (options_.timeout_s > 0 && Clock::now() - start > std::chrono::seconds(options_.timeout_s)) {
      return fail(Status::DeadlineExceeded("the job ran past --timeout " +
                                           std::to_string(options_.timeout_s) + " s"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  StopAll();  // joins the output readers
  {
    std::lock_guard lock(out_mu_);
    if (!progress_.empty()) ShowProgressLocked(true);  // where the trainers ended
    if (progress_shown_) std::fputs("\n", stdout);
    progress_shown_ = false;
    finished_ = true;
  }
  PrintReport();
  if (!lost.empty()) {
    std::fprintf(stderr, "strata-launch: the job finished without %zu lost trainer(s): %s\n", lost.size(), lost[0].c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  OnLine("", fmt::format("strata-launch: scheduler, {} servers and {} trainers all exited cleanly in {:.1f} s\n",
                         options_.servers, options_.trainers, secs));
  return 0;
}

}  // namespace strata
