// auto_select.h: PlanJob, the planner run end to end for a job (strata-plan JOB and
// `parallel.auto`): load the cached calibration, measure what is missing (per-unit costs on
// this device, collectives on in-process Gloo communicators), save it, enumerate, predict and
// rank; and the chosen plan as JSON, the form rank 0 publishes to the other trainers.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cluster/node.h"
#include "common/status.h"
#include "trainer/auto/planner.h"
#include "trainer/ops/exec.h"

namespace strata {

struct PlanRequest {
  PlannerOptions planner;
  std::string cache_path;    // calibration cache (JSON); empty: measure and keep nothing
  std::string device = "cpu";  // the calibration's device, part of its cache key
  std::string host = "localhost";  // the comm costs' cache key
  // The plans to rank, by label (PlanChoice::ToString()); empty: every plan of the world. Only
  // what these plans need is calibrated and replayed (strata-bench plan re-predicts its picks so).
  std::vector<std::string> only;
  // Where progress goes ("calibrating gpt: micro-batch 4, recompute none"); may be empty.
  std::function<void(const std::string&)> log;
};

// The global batch of the job as written: train.batch_size x micro-batches.
int64_t GlobalBatch(const TrainJob& job);

Result<RankedPlans> PlanJob(const TrainJob& job, const ops::Exec& exec, const PlanRequest& request);

// A header and one line per plan: rank, plan, memory MiB (params/grads/optimizer/activations),
// step ms = compute + bubble + exposed comm.
std::vector<std::string> PlanTable(const RankedPlans& ranked, int top);

std::string ChoiceToJson(const PlanChoice& c);
// InvalidArgument naming the field when `text` is not what ChoiceToJson writes.
Result<PlanChoice> ChoiceFromJson(const std::string& text);
// The whole ranking as JSON (strata-plan --json).
std::string RankedToJson(const RankedPlans& ranked, const PlannerOptions& o);

// parallel.auto: trainer 0 (or the only trainer, `node` null) runs PlanJob on its device and
// publishes the top plan under "parallel/auto_plan" in the scheduler's kv store; the others
// read it (waiting up to `timeout`), so every trainer runs the same plan. Returns the job with
// that plan applied (ApplyChoice) and, on trainer 0, in *why: the top three with their
// predicted times and memory. ResourceExhausted when no plan fits train.memory_limit_mb.
struct AutoSelectOptions {
  int world = 1;
  int cores = 0;  // CPU cores the trainers share (PlannerOptions::cores)
  std::string host = "localhost";
  // How long the other trainers wait for trainer 0's plan: on a small CPU host the calibration
  // and the replay of every plan take minutes (gpt_planner.yaml on 2 trainers, 2 cores: 100-130 s).
  Millis timeout{600000};  // the scheduler's longest kv wait
};
Result<TrainJob> SelectAutoPlan(const TrainJob& job, Node* node, const AutoSelectOptions& options,
                                std::vector<std::string>* why);

}  // namespace strata
