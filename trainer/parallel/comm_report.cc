// comm_report.cc: CommAccounting and the report's table and JSON.
#include "trainer/parallel/comm_report.h"

#include <fmt/format.h>

namespace strata {
namespace {

const GroupTraffic& ModelOf(const CommModel& m, const std::string& dim) {
  return dim == "pp" ? m.pp : dim == "dp" ? m.dp : dim == "cp" ? m.cp : m.tp;
}

// The ops a group's report shows: those it ran or was expected to run.
std::vector<CommOp> OpsOf(const GroupCommReport& g, int64_t steps) {
  std::vector<CommOp> ops;
  for (size_t i = 0; i < kNumCommOps; ++i) {
    const auto op = static_cast<CommOp>(i);
    if (g.measured[op].calls > 0 || g.model.Bytes(op, steps) > 0) ops.push_back(op);
  }
  return ops;
}

// Exact when whole, else to a tenth (a first-step term spread over the steps).
std::string PerStep(double total, int64_t steps) {
  const double v = total / static_cast<double>(steps);
  return v == static_cast<double>(static_cast<uint64_t>(v))
             ? fmt::format("{}", static_cast<uint64_t>(v))
             : fmt::format("{:.1f}", v);
}

}  // namespace

bool CommReport::matches_model() const {
  for (const GroupCommReport& g : groups) {
    for (size_t i = 0; i < kNumCommOps; ++i) {
      const auto op = static_cast<CommOp>(i);
      if (g.measured[op].bytes != g.model.Bytes(op, steps)) return false;
    }
  }
  return true;
}

CommAccounting::CommAccounting(const ParallelGroups& groups) {
  const std::pair<const char*, const Communicator*> dims[] = {
      {"pp", groups.pp.get()}, {"dp", groups.dp.get()}, {"cp", groups.cp.get()}, {"tp", groups.tp.get()}};
  for (const auto& [dim, comm] : dims) {
    if (comm) groups_.push_back({dim, comm, {}, {}});
  }
}

void CommAccounting::Resume() {
  for (Group& g : groups_) g.before = g.comm->stats();
}

void CommAccounting::Pause() {
  for (Group& g : groups_) g.total += g.comm->stats() - g.before;
}

CommReport CommAccounting::Report(const CommModel& model) const {
  CommReport r;
  r.steps = steps_;
  for (const Group& g : groups_) {
    r.groups.push_back({g.dim, g.comm->name(), g.comm->size(), g.total, ModelOf(model, g.dim)});
  }
  return r;
}

std::vector<std::string> FormatCommReport(const CommReport& report) {
  std::vector<std::string> lines;
  if (report.steps <= 0 || report.groups.empty()) return lines;
  lines.push_back(fmt::format("communication per step, this trainer ({} steps):", report.steps));
  lines.push_back(fmt::format("  {:<20} {:<16} {:>10} {:>12} {:>12} {:>16}", "group", "op",
                              "calls/step", "bytes/step", "model", "ring wire/rank"));
  for (const GroupCommReport& g : report.groups) {
    const std::string name = fmt::format("{} ({})", g.group, g.size);
    for (CommOp op : OpsOf(g, report.steps)) {
      const CommOpStats& s = g.measured[op];
      lines.push_back(fmt::format(
          "  {:<20} {:<16} {:>10} {:>12} {:>12} {:>16}", name, CommOpName(op),
          PerStep(static_cast<double>(s.calls), report.steps),
          PerStep(static_cast<double>(s.bytes), report.steps),
          PerStep(static_cast<double>(g.model.Bytes(op, report.steps)), report.steps),
          PerStep(RingWireBytesPerRank(op, static_cast<double>(s.bytes), g.size), report.steps)));
    }
  }
  lines.push_back(report.matches_model()
                      ? "  measured bytes equal the model's for every op"
                      : "  MEASURED BYTES DIFFER FROM THE MODEL (see the rows above)");
  return lines;
}

nlohmann::json CommReportJson(const CommReport& report) {
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupCommReport& g : report.groups) {
    nlohmann::json ops = nlohmann::json::object();
    for (CommOp op : OpsOf(g, report.steps)) {
      const CommOpStats& s = g.measured[op];
      ops[std::string(CommOpName(op))] = {
          {"calls", s.calls},
          {"bytes", s.bytes},
          {"model_bytes", g.model.Bytes(op, report.steps)},
          {"wire_bytes", RingWireBytesPerRank(op, static_cast<double>(s.bytes), g.size)}};
    }
    groups.push_back({{"dim", g.dim}, {"group", g.group}, {"size", g.size}, {"ops", ops}});
  }
  return {{"steps", report.steps}, {"groups", groups}};
}

}  // namespace strata
