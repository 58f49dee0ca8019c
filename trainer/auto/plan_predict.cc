// plan_predict.cc: Predict, one plan's memory per device and step time from measured costs.
#include <algorithm>
#include <numeric>

#include "trainer/auto/planner.h"
#include "trainer/pipeline/simulate.h"

namespace strata {
namespace {

using Recompute = ParallelOptions::Recompute;

// Per micro-batch, the tensor-parallel all-reduces a unit runs (Megatron's split as
// comm_model.cc counts it), each of `bytes`: forward and backward.
struct TpCalls {
  int forward = 0, backward = 0;
  int64_t bytes = 0;
};

TpCalls UnitTpCalls(const ModelOptions& m, int u, int n_units, const UnitProfile& p, Recompute rc,
                    int64_t micro_batch, int value_bytes) {
  TpCalls t;
  if (m.kind == ModelOptions::Kind::kGpt) {
    t.bytes = micro_batch * m.context * m.width * value_bytes;
    if (u == 0) {
      t.forward = 1;  // the vocab-parallel embedding's rows
    } else if (u + 1 == n_units) {
      t.forward = 3;  // the vocab-parallel loss: max and two sums of [rows]: counted at a block's size, an upper bound
      t.bytes = micro_batch * m.context * 4 * 2;
      t.backward = 0;
    } else {
      t.forward = 2;  // after attention's and the MLP's row-parallel layers
      t.backward = rc == Recompute::kFull ? 4 : 2;  // the column layers' input gradients, and the forward again
    }
  } else if (m.kind == ModelOptions::Kind::kMlp) {
    if (u + 1 == n_units) {
      t.forward = 1;  // fc2 (row-parallel): its output
      t.bytes = p.output_bytes;
    }
  }
  return t;
}

}  // namespace

Result<PlanPrediction> Predict(const TrainJob& job, PlanChoice c, const Calibration& cal, const CommCosts& comm,
                               const PlannerOptions& o) {
  STRATA_ASSIGN_OR_RETURN(const std::vector<UnitProfile>* prof, cal.Find(c.micro_batch, c.recompute));
  STRATA_ASSIGN_OR_RETURN(std::vector<UnitSpec> full_units, ModelUnits(job.model));
  const int n_units = static_cast<int>(full_units.size());
  if (static_cast<int>(prof->size()) != n_units) {
    return Status::FailedPrecondition("the calibration has " + std::to_string(prof->size()) + " units; the model " +
                                      std::to_string(n_units));
  }
  const std::vector<UnitSpec> units = ShardUnitsForTp(job.model, full_units, c.tp);
  // More processes than cores: the schedule simulator shares the cores among the ranks computing
  // at each moment (processor sharing: a pipeline rank alone in the bubble has a core to itself,
  // dp x tp copies of the pipeline run side by side), and what every process does at once (the
  // optimizer) is slowed by world / cores.
  const double slow = o.cores > 0 ? std::max(1.0, static_cast<double>(o.world) / o.cores) : 1.0;
  // The dp sync hides behind backward only where it has a processor of its own (a GPU's copy
  // engines and NICs, or a spare core). Trainers that keep every CPU core busy leave none: the
  // collective's copies and reductions take turns with the compute, so they add to the step.
  const bool overlap = o.overlap && !(o.cores > 0 && o.world >= o.cores);
  const double tp = c.tp;
  // Tensor parallelism divides a unit's compute and its inner activations by tp (its matrix
  // products and attention heads split); the activation it hands on stays whole.
  auto unit_f = [&](int u) { return (*prof)[u].f / tp; };
  auto unit_b = [&](int u) { return (*prof)[u].b / tp; };
  auto unit_i = [&](int u) { return (*prof)[u].i / tp; };
  auto unit_w = [&](int u) { return (*prof)[u].w / tp; };
  auto unit_saved = [&](int u) {
    const UnitProfile& p = (*prof)[u];
    return p.output_bytes + static_cast<int64_t>((p.saved_bytes - p.output_bytes) / tp);
  };

  // Stages: balanced on measured forward + backward, the cut written into the plan.
  const int stages = c.pp * c.vpp;
  if (stages > 1) {
    std::vector<double> costs;
    for (int u = 0; u < n_units; ++u) costs.push_back((*prof)[u].f + (*prof)[u].b);
    STRATA_ASSIGN_OR_RETURN(std::vector<UnitRange> cut, BalancedPartition(costs, stages));
    std::string text;
    for (int s = 1; s < stages; ++s) text += (s > 1 ? "," : "") + std::to_string(cut[s].first);
    c.partition = text;
  } else {
    c.partition = "params";
  }
  STRATA_ASSIGN_OR_RETURN(ParallelPlan plan, ResolvePlan(ApplyChoice(job, c), o.world));

  // More ranks than cores, or more than one rank where `replay_all`: the step is replayed on
  // this host (below; the planner runs the model's own units, tensor-parallel collectives
  // included), unless ZeRO-3 (whose per-unit gathers it does not run) is in it.
  const bool replay = c.zero < 3 && (stages > 1 || c.dp > 1 || c.tp > 1) && (slow > 1 || o.replay_all);
  PipelineStepCosts replay_costs;
  pipeline::Costs costs;
  std::vector<int64_t> stage_saved(stages, 0), stage_transient(stages, 0);
  for (int s = 0; s < stages; ++s) {
    double f = 0, b = 0, i = 0, w = 0;
    double own_f = 0, own_b = 0, own_i = 0, wait_f = 0, wait_b = 0;
    for (int u = plan.stages[s].first; u < plan.stages[s].last; ++u) {
      const TpCalls t =
          c.tp > 1 ? UnitTpCalls(job.model, u, n_units, (*prof)[u], c.recompute, c.micro_batch, o.value_bytes) : TpCalls{};
      // Measured collectives already ran as many threads as ranks on these cores: divided by
      // `slow` here, the simulator's sharing gives them back their measured time.
      // The tp ranks reach these together (the same work before each).
      const double tf = t.forward * comm.AllReduceTogether(c.tp, static_cast<double>(t.bytes)) / slow;
      const double tb = t.backward * comm.AllReduceTogether(c.tp, static_cast<double>(t.bytes)) / slow;
      f += unit_f(u) + tf;
      b += unit_b(u) + tb;
      i += unit_i(u) + tb;
      w += unit_w(u);
      own_f += unit_f(u);
      own_b += unit_b(u);
      own_i += unit_i(u);
      wait_f += tf * slow;
      wait_b += tb * slow;
      stage_saved[s] += unit_saved(u);
      stage_transient[s] = std::max<int64_t>(stage_transient[s], static_cast<int64_t>((*prof)[u].peak_bytes / tp));
    }
    // The calibration counts a unit's output as saved (the next unit keeps it). The last unit's
    // is the logits, which the loss head reads and lets go (it keeps only their gradient).
    if (s + 1 == stages) stage_saved[s] -= (*prof)[n_units - 1].output_bytes;
    costs.f_stage.push_back(f);
    costs.b_stage.push_back(b);
    costs.i_stage.push_back(i);
    costs.w_stage.push_back(w);
    if (replay) {
      replay_costs.compute.f_stage.push_back(own_f);
      replay_costs.compute.b_stage.push_back(own_b);
      replay_costs.compute.i_stage.push_back(own_i);
      replay_costs.compute.w_stage.push_back(w);
      replay_costs.f_wait.push_back(wait_f);
      replay_costs.b_wait.push_back(wait_b);
      replay_costs.boundary_bytes.push_back((*prof)[plan.stages[s].last - 1].output_bytes);
    }
  }
  // A hand-off between ranks: the largest stage boundary's activation.
  int64_t boundary = 0;
  for (int s = 0; s + 1 < stages; ++s) boundary = std::max(boundary, (*prof)[plan.stages[s].last - 1].output_bytes);
  // Ranks in mesh order (pp, dp, tp): a tp group is consecutive, a dp group tp apart, a
  // pipeline's neighbours dp x tp apart (CommCosts picks the intra- or inter-node link).
  const int dp_stride = c.tp, pp_stride = c.dp * c.tp;
  costs.comm = stages > 1 ? comm.P2P(static_cast<double>(boundary), c.pp, pp_stride) : 0;
  if (slow > 1) costs.slots = static_cast<double>(o.cores) / (c.dp * c.tp);
  STRATA_ASSIGN_OR_RETURN(pipeline::Simulation sim, pipeline::Simulate(c.schedule, plan.shape(), costs));
  PlanPrediction pred;
  // Replayed, a step is measured whole: the pipeline, the dp gradient sync, the loss's and the
  // gradient norm's all-reduces, and the optimizer (its largest rank's, unslowed).
  double replayed = 0;
  if (replay) {
    pred.pipeline_key = PipelineKey(c);
    if (auto it = cal.pipeline_s.find(pred.pipeline_key); it != cal.pipeline_s.end()) {
      replayed = it->second;
      pred.pipeline_replayed = true;
    } else {
      int64_t most = 0;
      for (int r = 0; r < c.pp; ++r) {
        int64_t psi = 0;
        for (int s : pipeline::StagesOfRank(c.schedule, plan.shape(), r)) {
          for (int u = plan.stages[s].first; u < plan.stages[s].last; ++u) psi += units[u].params;
        }
        most = std::max(most, psi);
        replay_costs.grad_bytes.push_back(c.dp > 1 ? 4 * psi : 0);
      }
      replay_costs.zero = c.zero;
      replay_costs.scalars = c.zero > 0 ? "pddtp" : "pdtp";  // Trainer::ReduceLoss, then ClipGradients
      replay_costs.optimizer_s = cal.optimizer_s_per_param * static_cast<double>(c.zero > 0 ? most / c.dp : most);
      PipelineReplayRequest request{c.schedule, plan.shape(), replay_costs, c.dp, c.tp, 0, {}};
      request.simulated_s = sim.makespan + replay_costs.optimizer_s;
      pred.replay = std::move(request);
    }
  }

  // Per pipeline rank: memory by the ZeRO formulas and the schedule's live activations, and the
  // step's parts; the plan's figures are its worst rank's.
  const OptimizerOptions& opt = job.optimizer;
  const double k = opt.kind == OptimizerOptions::Kind::kAdamW ? 8 : (opt.momentum > 0 ? 4 : 0);
  const double n = c.dp;
  double worst_step = -1;
  for (int r = 0; r < c.pp; ++r) {
    const std::vector<int> mine = pipeline::StagesOfRank(c.schedule, plan.shape(), r);
    int64_t psi = 0, largest_unit = 0, first_unit = 0, act = 0, transient = 0;
    double backward = 0, forward = 0;
    for (int s : mine) {
      for (int u = plan.stages[s].first; u < plan.stages[s].last; ++u) {
        psi += units[u].params;
        largest_unit = std::max(largest_unit, units[u].params);
      }
      act = std::max(act, stage_saved[s]);
      transient = std::max(transient, stage_transient[s]);
      backward += slow * costs.B(s);  // the windows the dp sync hides in, with every rank busy
      forward += slow * costs.F(s);
    }
    first_unit = units[plan.stages[*std::min_element(mine.begin(), mine.end())].first].params;
    const double p = static_cast<double>(psi);
    const double pb = o.mixed_precision ? 2 : 4;              // a weight's bytes
    const double state = k + (o.mixed_precision ? 4 : 0);     // the optimizer's, fp32 master included
    PlanMemory mem;
    switch (c.zero) {
      case 0: mem = {static_cast<int64_t>(pb * p), static_cast<int64_t>(4 * p), static_cast<int64_t>(state * p)}; break;
      case 1:
      case 2:  // the full buffers during a step, beside the reduced shard
        mem = {static_cast<int64_t>(pb * p), static_cast<int64_t>(4 * p + 4 * p / n), static_cast<int64_t>(state * p / n)};
        break;
      default:  // ZeRO-3: shards, the unit computing and the one prefetched gathered, every full gradient at worst
        mem = {static_cast<int64_t>(pb * p / n + 2 * pb * largest_unit), static_cast<int64_t>(4 * p + 4 * p / n),
               static_cast<int64_t>(state * p / n)};
        break;
    }
    mem.activations = act * sim.peak_live[r];
    mem.transient = transient;

    // The dp gradient sync: all-reduce (ZeRO-0) or reduce-scatter + all-gather (1, 2), with
    // ZeRO-3's gathers of every unit at each forward and backward of a micro-batch.
    const double grad_bytes = 4 * p, weight_bytes = pb * p;
    double sync = 0, gathers = 0;
    if (c.dp > 1) {
      if (c.zero == 0) {
        sync = comm.AllReduce(c.dp, grad_bytes, dp_stride);
      } else {
        sync = comm.ReduceScatter(c.dp, grad_bytes, dp_stride);
        const double gather = comm.AllGather(c.dp, weight_bytes, dp_stride);
        gathers = c.zero == 3 ? 2.0 * c.micro_batches * gather : gather;
      }
    }
    // Overlap: backward hands buckets to the sync as the last micro-batch's backward finishes
    // them; what the rank's first unit produces last cannot hide. The all-gathers after the
    // optimizer (ZeRO-1/2) overlap the next forward unit by unit; ZeRO-3 prefetches the next unit's.
    const double last_share = psi > 0 ? static_cast<double>(first_unit) / p : 1.0;
    double exposed = sync + gathers;
    if (overlap && c.dp > 1) {
      exposed = std::max(sync * last_share, sync - backward);
      if (c.zero == 3) {
        exposed += std::max(gathers / (2.0 * c.micro_batches * std::max<size_t>(1, full_units.size())),
                            gathers - (forward + backward) * c.micro_batches);
      } else if (c.zero > 0) {
        exposed += std::max(gathers * last_share, gathers - forward);
      }
    }
    // A step's scalars in the trainer's order: the loss over pp, then dp; the norm over dp's
    // shards (ZeRO), tp, pp. The first collective after compute is reached one rank after
    // another, the ones after it together (the dp gradient sync, when there is one, is that
    // first).
    {
      bool first = !(c.dp > 1 && sync > 0);
      for (const auto& [group, stride] : std::vector<std::pair<int, int>>{
               {c.pp, pp_stride}, {c.dp, dp_stride}, {c.zero > 0 ? c.dp : 1, dp_stride}, {c.tp, 1}, {c.pp, pp_stride}}) {
        if (group < 2) continue;
        exposed += comm.ScalarAllReduce(group, stride, /*together=*/!first);
        first = false;
      }
    }
    const double optimizer = slow * cal.optimizer_s_per_param * (c.zero > 0 ? p / n : p);
    const double busy = sim.busy[r];
    double step = sim.makespan + exposed + optimizer, bubble = sim.makespan - busy;
    if (pred.pipeline_replayed) {  // the parts beside the measured whole: what the model says
      step = replayed;
      bubble = std::max(0.0, step - busy - optimizer - exposed);
    }
    if (step > worst_step) {
      worst_step = step;
      pred.step_s = step;
      pred.compute_s = busy + optimizer;
      pred.bubble_s = bubble;
      pred.comm_s = exposed;
      pred.optimizer_s = optimizer;
    }
    if (mem.total() > pred.memory.total()) pred.memory = mem;
  }
  pred.choice = c;
  pred.fits = o.memory_limit_bytes <= 0 || pred.memory.total() <= o.memory_limit_bytes;
  return pred;
}

}  // namespace strata
