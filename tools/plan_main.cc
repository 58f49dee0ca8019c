// plan_main.cc: strata-plan, what a job's `auto` section derives, without running anything:
//   strata-plan --explain JOB [--set KEY=VALUE ...]
// prints every tensor's placement (annotated, chosen by cost with each candidate's cost, or
// from its op's rule), every inserted collective with its bytes per micro-batch or per step,
// and the derived plan's bytes per step beside what the trainer's communication model
// (trainer/parallel/comm_model.h) counts for the hand-written plan it maps onto.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <string>
#include <vector>

#include "tools/job_config.h"
#include "trainer/auto/auto_plan.h"
#include "trainer/parallel/comm_model.h"
#include "trainer/parallel/plan.h"

namespace strata {
namespace {

constexpr int kBadInput = 2;

// The hand-written plan's traffic on rank 0, from the trainer's communication model. Its unit
// specs are rank 0's shard: gpt.cc's split (1/tp of every block but the norms and the row
// layers' biases, of the token table and of the head).
Result<CommModel> HandWritten(const TrainJob& job, const AutoPlan& plan) {
  STRATA_ASSIGN_OR_RETURN(ParallelPlan pp, ResolvePlan(job, plan.dp * plan.tp * plan.pp));
  STRATA_ASSIGN_OR_RETURN(std::vector<UnitSpec> units, ModelUnits(job.model));
  const ModelOptions& m = job.model;
  if (m.kind == ModelOptions::Kind::kGpt && plan.tp > 1) {
    const int64_t c = m.width, n = plan.tp;
    for (size_t u = 0; u < units.size(); ++u) {
      if (u == 0) {
        units[u].params = m.vocab / n * c + m.context * c;
      } else if (u + 1 == units.size()) {
        units[u].params = 2 * c + c * m.vocab / n;
      } else {
        units[u].params = (12 * c * c + 7 * c) / n + 6 * c;
      }
    }
  }
  CommLayout l;
  l.plan = pp;
  l.units = units;
  const int64_t local = job.train.batch_size / plan.dp;
  l.micro_batch = m.kind == ModelOptions::Kind::kGpt ? Shape{local, m.context} : Shape{local};
  l.model = m;
  l.recompute = job.parallel.recompute;
  l.dp_all_reduce = plan.dp > 1;
  l.overlap = false;  // the first step's bucket order: once, not per step
  return ModelCommTraffic(l);
}

int Explain(const TrainJob& job) {
  Result<AutoPlan> plan = DeriveAutoPlan(job);
  if (!plan.ok()) {
    std::cerr << "strata-plan: " << plan.status().ToString() << "\n";
    return kBadInput;
  }
  for (const std::string& line : plan->Explain()) {
    std::cout << (line.rfind("auto: ", 0) == 0 ? line.substr(6) : line) << "\n";
  }
  if (plan->propagation) {
    std::cout << fmt::format("collectives' cost per step: {:.3f} ms (LinkCosts: 50 us + bytes / 2 GB/s, ring wire bytes)\n",
                             plan->propagation->cost_s * 1e3);
  }
  Result<CommModel> hand = HandWritten(job, *plan);
  if (!hand.ok()) {
    std::cerr << "strata-plan: the hand-written plan: " << hand.status().ToString() << "\n";
    return kBadInput;
  }
  const ParallelOptions& p = job.parallel;
  const int64_t m = p.micro_batches ? p.micro_batches : job.train.micro_batches;
  std::cout << fmt::format(
      "\nrank 0, bytes per step ({} micro-batch{}): derived from placements beside the trainer's "
      "communication model of parallel.dp {} x tp {} x pp {}\n",
      m, m == 1 ? "" : "es", plan->dp, plan->tp, plan->pp);
  std::cout << fmt::format("  {:<6} {:<16} {:>14} {:>14}\n", "group", "op", "derived", "hand-written");
  bool all_equal = true;
  auto row = [&](const char* group, const GroupTraffic& g, CommOp op, uint64_t derived) {
    const uint64_t model = g.per_step[static_cast<size_t>(op)];
    if (model == 0 && derived == 0) return;
    const bool placed = op != CommOp::kHostAllReduce && op != CommOp::kHostBroadcast;
    if (placed) all_equal = all_equal && model == derived;
    std::cout << fmt::format("  {:<6} {:<16} {:>14} {:>14}{}\n", group, CommOpName(op),
                             placed ? std::to_string(derived) : std::string("-"), model,
                             placed ? (model == derived ? "  equal" : "  DIFFERENT")
                                    : "  (scalars: loss, gradient norm; no placement moves them)");
  };
  auto derived = [&](const std::map<std::string, uint64_t>& bytes, CommOp op, int64_t times) {
    auto it = bytes.find(std::string(CommOpName(op)));
    return it == bytes.end() ? uint64_t{0} : it->second * static_cast<uint64_t>(times);
  };
  for (CommOp op : {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter,
                    CommOp::kAllToAll, CommOp::kHostAllReduce}) {
    row("tp", hand->tp, op, plan->tp > 1 ? derived(plan->per_micro_batch, op, m) : 0);
  }
  for (CommOp op : {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter,
                    CommOp::kHostAllReduce}) {
    row("dp", hand->dp, op, plan->dp > 1 ? derived(plan->per_step, op, 1) : 0);
  }
  for (CommOp op : {CommOp::kSend, CommOp::kRecv, CommOp::kHostAllReduce}) {
    row("pp", hand->pp, op, plan->pp > 1 ? derived(plan->per_micro_batch, op, m) : 0);
  }
  std::cout << (all_equal ? "every collective from placements equals the hand-written plan's\n"
                          : "the derived collectives DIFFER from the hand-written plan's\n");
  return all_equal ? 0 : 1;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  CLI::App app{"strata-plan: the plan a job's auto section derives (placements, collectives, bytes)"};
  std::string job_path;
  std::vector<std::string> overrides;
  bool explain = false;
  app.add_option("job", job_path, "job file (YAML) with an auto section")->required()->check(CLI::ExistingFile);
  app.add_option("--set", overrides, "override a job field, e.g. --set auto.mesh=x=4")->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  app.add_flag("--explain", explain,
               "print each tensor's derived placement and each inserted collective with its bytes");
  CLI11_PARSE(app, argc, argv);
  if (!explain) {
    std::cerr << "strata-plan: only --explain exists yet (the planner that ranks whole plans, "
                 "issue #19, is not built)\n";
    return kBadInput;
  }
  Result<JobConfig> job = LoadJobConfig(job_path, overrides);
  if (!job.ok()) {
    std::cerr << "strata-plan: " << job.status().ToString() << "\n";
    return kBadInput;
  }
  if (!job->trainer.auto_parallel.enabled()) {
    std::cerr << "strata-plan: " << job_path << " has no auto section (auto.mesh is empty)\n";
    return kBadInput;
  }
  return Explain(job->trainer);
}
