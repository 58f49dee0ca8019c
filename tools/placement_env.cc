// placement_env.cc: the environment convention, Slurm host lists, the task-to-role rule and
// the job loaded with precedence flags > job file > environment.
#include "tools/placement_env.h"

#include <charconv>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "common/config.h"
#include "common/transport.h"

namespace strata {
namespace {

constexpr int kDefaultSchedulerPort = 7000;

const std::string* Lookup(const Environment& env, std::string_view name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return nullptr;
  return &it->second;
}

Status BadVar(std::string_view name, const std::string& value, std::string_view why) {
  return Status::InvalidArgument("environment variable " + std::string(name) + "=\"" + value +
                                 "\": " + std::string(why));
}

Result<int> ParseInt(std::string_view name, const std::string& value, int min, int max) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size()) {
    return BadVar(name, value, "expected an integer");
  }
  if (v < min || v > max) {
    return BadVar(name, value,
                  "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

// The first of `names` that is set, as an int.
Result<FromEnv<int>> FirstInt(const Environment& env, std::initializer_list<std::string_view> names,
                              int min, int max) {
  for (std::string_view name : names) {
    if (const std::string* v = Lookup(env, name)) {
      STRATA_ASSIGN_OR_RETURN(int value, ParseInt(name, *v, min, max));
      return FromEnv<int>{value, std::string(name)};
    }
  }
  return FromEnv<int>{};
}

// "host:port" or "tcp://host:port" -> tcp://host:port, checked.
Result<std::string> SchedulerAddress(std::string_view name, const std::string& value) {
  std::string endpoint = value.rfind("tcp://", 0) == 0 ? value : "tcp://" + value;
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < 6) {
    return BadVar(name, value, "expected host:port or tcp://host:port");
  }
  if (!config::IsEndpoint(endpoint) || endpoint.compare(colon + 1, std::string::npos, "0") == 0) {
    return BadVar(name, value, "expected host:port with a port in [1, 65535]");
  }
  return endpoint;
}

bool IsWildcardHost(std::string_view host) {
  return host == "*" || host == "0.0.0.0" || host == "::" || host == "[::]";
}

// Expands one name with at most one bracket: "node[01-03,07]-ib".
Status ExpandOne(std::string_view item, std::string_view list, std::vector<std::string>* out) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument("host list \"" + std::string(list) + "\": " + std::string(why) +
                                   " in \"" + std::string(item) + "\"");
  };
  const size_t open = item.find('[');
  if (open == std::string_view::npos) {
    if (item.find(']') != std::string_view::npos) return bad("']' without '['");
    out->emplace_back(item);
    return Status::OK();
  }
  const size_t close = item.find(']', open);
  if (close == std::string_view::npos) return bad("'[' without ']'");
  if (item.find('[', close) != std::string_view::npos) return bad("more than one bracket");
  const std::string_view prefix = item.substr(0, open);
  const std::string_view suffix = item.substr(close + 1);
  std::string_view ranges = item.substr(open + 1, close - open - 1);
  if (ranges.empty()) return bad("empty brackets");
  while (!ranges.empty()) {
    const size_t comma = ranges.find(',');
    std::string_view range = ranges.substr(0, comma);
    ranges = comma == std::string_view::npos ? std::string_view() : ranges.substr(comma + 1);
    const size_t dash = range.find('-');
    std::string_view lo_text = range.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : range.substr(dash + 1);
    auto number = [](std::string_view t, long* v) {
      auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), *v);
      return !t.empty() && ec == std::errc() && ptr == t.data() + t.size() && *v >= 0;
    };
    long lo = 0, hi = 0;
    if (!number(lo_text, &lo) || !number(hi_text, &hi)) {
      return bad("\"" + std::string(range) + "\" is not a number or a range a-b");
    }
    if (hi < lo) return bad("range " + std::string(range) + " runs backwards");
    if (hi - lo > 100000) return bad("range " + std::string(range) + " is too long");
    const size_t width = lo_text.size();  // "01-03": zero padding to the first bound's width
    for (long v = lo; v <= hi; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < width) digits.insert(0, width - digits.size(), '0');
      out->push_back(std::string(prefix) + digits + std::string(suffix));
    }
  }
  return Status::OK();
}

}  // namespace

bool IsPlacementVariable(std::string_view entry) {
  static constexpr std::string_view kNames[] = {
      "STRATA_ROLE", "STRATA_RANK", "STRATA_TASK", "STRATA_NTASKS", "STRATA_LOCAL_TASK",
      "STRATA_SCHEDULER", "STRATA_SCHEDULER_PORT", "STRATA_SERVERS", "STRATA_TRAINERS",
      "STRATA_BIND_HOST", "STRATA_ADVERTISE_HOST", "SLURM_PROCID", "SLURM_NTASKS",
      "SLURM_LOCALID", "SLURM_NODELIST", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
      "MASTER_PORT"};
  const std::string_view name = entry.substr(0, entry.find('='));
  for (std::string_view n : kNames) {
    if (n == name) return true;
  }
  return false;
}

Environment CaptureEnvironment(char** envp) {
  Environment env;
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

Result<std::vector<std::string>> ExpandHostList(std::string_view list) {
  std::vector<std::string> hosts;
  size_t start = 0, depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '[') ++depth;
    if (i < list.size() && list[i] == ']' && depth > 0) --depth;
    if (i == list.size() || (list[i] == ',' && depth == 0)) {
      std::string_view item = list.substr(start, i - start);
      if (item.empty()) {
        return Status::InvalidArgument("host list \"" + std::string(list) + "\": empty name");
      }
      STRATA_RETURN_IF_ERROR(ExpandOne(item, list, &hosts));
      start = i + 1;
    }
  }
  return hosts;
}

Result<JobPlacement> ReadPlacement(const Environment& env) {
  JobPlacement p;
  constexpr int kMaxTasks = 1 << 20;
  if (const std::string* v = Lookup(env, "STRATA_ROLE")) {
    if (*v != "scheduler" && *v != "server" && *v != "trainer") {
      return BadVar("STRATA_ROLE", *v, "expected scheduler, server or trainer");
    }
    p.role = {*v, "STRATA_ROLE"};
  }
  STRATA_ASSIGN_OR_RETURN(p.rank, FirstInt(env, {"STRATA_RANK"}, 0, kMaxTasks));
  STRATA_ASSIGN_OR_RETURN(p.task, FirstInt(env, {"STRATA_TASK", "SLURM_PROCID", "RANK"}, 0, kMaxTasks));
  STRATA_ASSIGN_OR_RETURN(p.tasks,
                          FirstInt(env, {"STRATA_NTASKS", "SLURM_NTASKS", "WORLD_SIZE"}, 1, kMaxTasks));
  STRATA_ASSIGN_OR_RETURN(
      p.local_task, FirstInt(env, {"STRATA_LOCAL_TASK", "SLURM_LOCALID", "LOCAL_RANK"}, 0, kMaxTasks));
  STRATA_ASSIGN_OR_RETURN(p.servers, FirstInt(env, {"STRATA_SERVERS"}, 0, 4096));
  STRATA_ASSIGN_OR_RETURN(p.trainers, FirstInt(env, {"STRATA_TRAINERS"}, 0, kMaxTasks));
  if (p.task.set() && p.tasks.set() && p.task.value >= p.tasks.value) {
    return BadVar(p.task.var, std::to_string(p.task.value),
                  "must be below " + p.tasks.var + "=" + std::to_string(p.tasks.value));
  }
  if (p.task.var == "STRATA_TASK") p.launcher = "strata";
  if (p.task.var == "SLURM_PROCID") p.launcher = "slurm";
  if (p.task.var == "RANK") p.launcher = "torchrun";

  if (const std::string* v = Lookup(env, "SLURM_NODELIST")) {
    auto hosts = ExpandHostList(*v);
    if (!hosts.ok()) return BadVar("SLURM_NODELIST", *v, hosts.status().message());
    p.nodes = std::move(hosts).value();
  }

  if (const std::string* v = Lookup(env, "STRATA_SCHEDULER")) {
    STRATA_ASSIGN_OR_RETURN(std::string a, SchedulerAddress("STRATA_SCHEDULER", *v));
    p.scheduler = {a, "STRATA_SCHEDULER"};
  } else if (const std::string* addr = Lookup(env, "MASTER_ADDR")) {
    const std::string* port = Lookup(env, "MASTER_PORT");
    if (port == nullptr) return BadVar("MASTER_ADDR", *addr, "is set but MASTER_PORT is not");
    STRATA_ASSIGN_OR_RETURN(int n, ParseInt("MASTER_PORT", *port, 1, 65535));
    STRATA_ASSIGN_OR_RETURN(std::string a, SchedulerAddress("MASTER_ADDR",
                                                            *addr + ":" + std::to_string(n)));
    p.scheduler = {a, "MASTER_ADDR/MASTER_PORT"};
  } else if (!p.nodes.empty()) {
    int port = kDefaultSchedulerPort;
    if (const std::string* v = Lookup(env, "STRATA_SCHEDULER_PORT")) {
      STRATA_ASSIGN_OR_RETURN(port, ParseInt("STRATA_SCHEDULER_PORT", *v, 1, 65535));
    }
    STRATA_ASSIGN_OR_RETURN(std::string a,
                            SchedulerAddress("SLURM_NODELIST", p.nodes.front() + ":" + std::to_string(port)));
    p.scheduler = {a, "SLURM_NODELIST"};
  }

  if (const std::string* v = Lookup(env, "STRATA_BIND_HOST")) {
    if (!config::IsEndpoint("tcp://" + *v + ":1")) {
      return BadVar("STRATA_BIND_HOST", *v, "expected a host name, an address or *");
    }
    p.bind_host = {*v, "STRATA_BIND_HOST"};
  } else if (p.launcher == "slurm" || p.launcher == "torchrun") {
    // Peers on other machines must reach us: listen everywhere, advertise the hostname.
    p.bind_host = {"*", p.task.var};
  }
  if (const std::string* v = Lookup(env, "STRATA_ADVERTISE_HOST")) {
    if (IsWildcardHost(*v) || !config::IsEndpoint("tcp://" + *v + ":1")) {
      return BadVar("STRATA_ADVERTISE_HOST", *v, "expected a host name or address peers can reach");
    }
    p.advertise_host = {*v, "STRATA_ADVERTISE_HOST"};
  }
  return p;
}

Result<TaskRole> AssignTaskRole(int task, int servers, int trainers) {
  const int total = 1 + servers + trainers;
  if (task < 0 || task >= total) {
    return Status::InvalidArgument(
        "task " + std::to_string(task) + " has no role: the job has 1 scheduler + " +
        std::to_string(servers) + " servers + " + std::to_string(trainers) + " trainers = " +
        std::to_string(total) + " tasks (task 0 the scheduler, then the servers, then the trainers)");
  }
  if (task == 0) return TaskRole{Role::kScheduler, 0};
  if (task <= servers) return TaskRole{Role::kServer, task - 1};
  return TaskRole{Role::kTrainer, task - 1 - servers};
}

Result<JobConfig> LoadPlacedJob(const JobFlags& flags, const JobPlacement& placement) {
  // What the file and the flags name, to know which fields the environment may fill.
  YAML::Node root(YAML::NodeType::Map);
  if (!flags.config_path.empty()) {
    STRATA_ASSIGN_OR_RETURN(YAML::Node loaded, config::LoadYamlFile(flags.config_path));
    root.reset(loaded);
  }
  // A malformed --set is reported by LoadJobConfig below, with every other error.
  for (const std::string& assignment : flags.overrides) {
    (void)config::ApplyOverride(root, assignment);
  }
  std::vector<std::string> overrides;
  auto fill = [&](const char* key, const std::string& value) {
    if (!config::HasKey(root, key)) overrides.push_back(std::string(key) + "=" + value);
  };
  if (placement.scheduler.set()) fill("cluster.scheduler", placement.scheduler.value);
  if (placement.servers.set()) fill("cluster.servers", std::to_string(placement.servers.value));
  if (placement.trainers.set()) fill("cluster.trainers", std::to_string(placement.trainers.value));
  // The environment's values go first, so the flags (applied after) still win.
  overrides.insert(overrides.end(), flags.overrides.begin(), flags.overrides.end());
  STRATA_ASSIGN_OR_RETURN(JobConfig job, LoadJobConfig(flags.config_path, overrides));
  if (!placement.tasks.set()) return job;

  const std::string tasks = placement.tasks.var + "=" + std::to_string(placement.tasks.value);
  const bool trainers_named = config::HasKey(root, "cluster.trainers") || placement.trainers.set();
  if (!trainers_named) {
    const int trainers = placement.tasks.value - 1 - job.cluster.servers;
    if (trainers < 0) {
      return Status::InvalidArgument(tasks + " tasks cannot hold the scheduler and " +
                                     std::to_string(job.cluster.servers) + " servers");
    }
    overrides.insert(overrides.begin(), "cluster.trainers=" + std::to_string(trainers));
    STRATA_ASSIGN_OR_RETURN(job, LoadJobConfig(flags.config_path, overrides));
  }
  const int needed = 1 + job.cluster.servers + job.cluster.trainers;
  if (needed != placement.tasks.value) {
    return Status::InvalidArgument(
        tasks + " but the job has 1 scheduler + " + std::to_string(job.cluster.servers) +
        " servers + " + std::to_string(job.cluster.trainers) + " trainers = " +
        std::to_string(needed) + " tasks; start " + std::to_string(needed) +
        " tasks or change cluster.servers / cluster.trainers");
  }
  return job;
}

std::optional<int> LoadPlacedJobOrExit(const JobFlags& flags, const Environment& env,
                                       const char* program, JobConfig* job, JobPlacement* placement) {
  auto read = ReadPlacement(env);
  if (!read.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, read.status().ToString().c_str());
    return 2;
  }
  *placement = std::move(read).value();
  auto resolved = LoadPlacedJob(flags, *placement);
  if (!resolved.ok()) {
    std::fprintf(stderr, "%s: %s\n", program, resolved.status().ToString().c_str());
    return 2;
  }
  *job = std::move(resolved).value();
  if (flags.print_config) {
    std::fputs(JobConfigToYaml(*job).c_str(), stdout);
    return 0;
  }
  return std::nullopt;
}

void AddNodeFlags(CLI::App& app, NodeFlags& flags) {
  app.add_option("--rank", flags.rank, "rank to ask for within the role (default: STRATA_RANK, else assigned)");
  app.add_option("--bind", flags.bind,
                 "endpoint to listen on, port 0 picks a free one (default: tcp://$STRATA_BIND_HOST:0, "
                 "else tcp://127.0.0.1:0)");
  app.add_option("--advertise", flags.advertise,
                 "host peers dial to reach this process (default: STRATA_ADVERTISE_HOST, else the "
                 "bound address, or the hostname when bound on every interface)");
  app.add_flag("--join", flags.join,
               "join a running job at the next rank of the role (needs cluster.elastic: docs/reliability.md)");
}

Status PlaceNode(const NodeFlags& flags, const JobPlacement& placement, Role role,
                 NodeOptions* options) {
  if (placement.role.set() && placement.role.value != RoleName(role)) {
    return Status::InvalidArgument("environment variable STRATA_ROLE=\"" + placement.role.value +
                                   "\" but this process is a " + std::string(RoleName(role)));
  }
  options->role = role;
  options->requested_rank = flags.rank >= 0 ? flags.rank : placement.rank.set() ? placement.rank.value : -1;
  options->bind = NodeBindEndpoint(flags.bind, placement, options->bind);
  options->advertise_host = !flags.advertise.empty() ? flags.advertise : placement.advertise_host.value;
  options->join = flags.join;
  if (flags.join) options->requested_rank = -1;  // STRATA_RANK, if set, is for the job's first nodes
  if (flags.join && flags.rank >= 0) {
    return Status::InvalidArgument("--join takes the next rank of the role; it cannot be given with --rank " +
                                   std::to_string(flags.rank));
  }
  return Status::OK();
}

std::string NodeBindEndpoint(const std::string& flag, const JobPlacement& placement,
                             const std::string& fallback) {
  if (!flag.empty()) return flag;
  if (placement.bind_host.set()) return "tcp://" + placement.bind_host.value + ":0";
  return fallback;
}

std::string SchedulerBindEndpoint(const std::string& flag, const JobPlacement& placement,
                                  const std::string& job_scheduler) {
  if (!flag.empty()) return flag;
  if (!placement.bind_host.set() || job_scheduler.rfind("tcp://", 0) != 0) return job_scheduler;
  const size_t colon = job_scheduler.rfind(':');
  return "tcp://" + placement.bind_host.value + job_scheduler.substr(colon);
}

}  // namespace strata
