// auto_plan.cc: DeriveAutoPlan (the seeds' MLP walked through the sharding rules, forward and
// backward) and ApplyAutoPlan.
#include "trainer/auto/auto_plan.h"

#include <fmt/format.h>

#include <map>

#include "trainer/auto/cross_mesh.h"
#include "trainer/auto/dist_tensor.h"
#include "trainer/auto/placement_text.h"
#include "trainer/auto/reshard.h"
#include "trainer/auto/sharding_rules.h"

namespace strata {
namespace {

const char* const kW0 = "mlp.fc1.weight";
const char* const kB0 = "mlp.fc1.bias";
const char* const kW1 = "mlp.fc2.weight";
const char* const kB1 = "mlp.fc2.bias";

// The seeds name the MLP's weights w0 and w1.
std::string Canonical(const std::string& name) {
  if (name == "w0") return kW0;
  if (name == "w1") return kW1;
  return name;
}

// How the trainer stores a parameter the rules asked for as `p`: a Partial the rules ask for
// (a replicated bias added to one rank's partial sum) is a local step, the stored value is
// replicated.
Placements Stored(Placements p) {
  for (Placement& q : p) {
    if (std::holds_alternative<Partial>(q)) q = Replicate{};
  }
  return p;
}

// Records tensors and reshards as the walk goes.
class Walk {
 public:
  explicit Walk(AutoPlan& plan) : plan_(plan), coords_(plan.mesh.Coords(0)) {}

  void Tensor(const std::string& name, const Shape& shape, const Placements& p) {
    plan_.tensors.push_back({name, shape, p, ""});
  }

  Status Reshard(const std::string& what, const Shape& shape, const Placements& from,
                 const Placements& to, bool per_step = false) {
    if (from == to) return Status::OK();
    STRATA_ASSIGN_OR_RETURN(std::vector<ReshardStep> steps,
                            PlanReshard(what, shape, plan_.mesh, from, to));
    STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> bytes,
                            ReshardStepBytes(what, shape, plan_.mesh, from, to, coords_));
    uint64_t total = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      total += bytes[i];
      if (bytes[i] > 0) Count(std::string(ReshardKindName(steps[i].kind)), bytes[i], per_step);
    }
    plan_.reshards.push_back(
        {what, shape, from, to, ToString(steps, plan_.mesh), total, per_step, stage_});
    return Status::OK();
  }

  // A pipeline hand-off between mesh 0 and mesh 1 (same shape, disjoint ranks): rank 0, on mesh
  // 0, sends its blocks forward and receives the gradient's backward.
  Status Handoff(const std::string& what, const Shape& shape, const Placements& from,
                 const Placements& to, bool forward) {
    STRATA_ASSIGN_OR_RETURN(std::vector<BlockTransfer> transfers,
                            PlanCrossMesh(what, shape, plan_.mesh, from, plan_.mesh, to));
    uint64_t bytes = 0;
    for (const BlockTransfer& t : transfers) {
      if ((forward ? t.from : t.to) != 0) continue;
      uint64_t n = sizeof(float);
      for (int64_t e : t.shape) n *= static_cast<uint64_t>(e);
      bytes += n;
    }
    stage_ = 0;  // counted on mesh 0, whose rank sends forward and receives backward
    Count(forward ? "send" : "recv", bytes, false);
    plan_.reshards.push_back({what, shape, from, to,
                              forward ? "point-to-point, mesh 0 -> mesh 1"
                                      : "point-to-point, mesh 1 -> mesh 0",
                              bytes, false, 0});
    stage_ = forward ? 1 : 0;  // what follows runs on the mesh the tensor reached
    return Status::OK();
  }

 private:
  // Rank 0's totals: only what happens on mesh 0.
  void Count(const std::string& op, uint64_t bytes, bool per_step) {
    if (stage_ == 0) (per_step ? plan_.per_step : plan_.per_micro_batch)[op] += bytes;
  }

  AutoPlan& plan_;
  const std::vector<int> coords_;
  int stage_ = 0;  // the mesh the walk is on
};

}  // namespace

Result<AutoPlan> DeriveAutoPlan(const TrainJob& job) {
  const AutoOptions& o = job.auto_parallel;
  if (job.model.kind == ModelOptions::Kind::kGpt) return DeriveGptAutoPlan(job);
  if (job.model.kind != ModelOptions::Kind::kMlp) {
    return Status::Unimplemented(
        "auto: placements derive a plan for model.kind mlp and gpt, not ctr");
  }
  AutoPlan plan;
  STRATA_ASSIGN_OR_RETURN(plan.mesh, ParseMesh(o.mesh));
  const ProcessMesh& mesh = plan.mesh;
  const int64_t B = job.train.batch_size, in = job.model.mlp_in, hidden = job.model.mlp_hidden,
                out = job.model.mlp_out;
  const std::map<std::string, Shape> shapes = {{"input", {B, in}},   {kW0, {in, hidden}},
                                               {kB0, {hidden}},      {kW1, {hidden, out}},
                                               {kB1, {out}}};
  std::map<std::string, Placements> given;
  std::map<std::string, int> mesh_of;  // which of the auto.meshes a tensor is on
  for (const std::string& text : o.placements) {
    const Result<NamedPlacements> named = ParseTensorPlacements(text, mesh);
    if (!named.ok()) return named.status().WithContext("auto.placements");
    std::string written = named->name;
    int on = 0;
    if (const size_t at = written.find('@'); at != std::string::npos) {
      const std::string k = written.substr(at + 1);
      written.resize(at);
      if (k.size() != 1 || k[0] < '0' || k[0] - '0' >= o.meshes) {
        return Status::InvalidArgument("auto.placements: tensor '" + written + "' on mesh '" + k +
                                       "', but auto.meshes is " + std::to_string(o.meshes));
      }
      on = k[0] - '0';
    }
    const std::string name = Canonical(written);
    auto shape = shapes.find(name);
    if (shape == shapes.end()) {
      return Status::InvalidArgument("auto.placements: no tensor '" + written +
                                     "' in the mlp (input, w0 or mlp.fc1.weight, mlp.fc1.bias, "
                                     "w1 or mlp.fc2.weight, mlp.fc2.bias)");
    }
    STRATA_RETURN_IF_ERROR(CheckPlacements(name, shape->second, mesh, named->placements));
    given[name] = named->placements;
    mesh_of[name] = on;
  }
  auto get = [&](const std::string& name) {
    auto it = given.find(name);
    return it == given.end() ? Placements(mesh.ndim(), Replicate{}) : it->second;
  };
  auto on = [&](const std::string& name, const std::string& owner) {
    auto it = mesh_of.find(name);
    return it != mesh_of.end() ? it->second : (owner.empty() ? 0 : mesh_of[owner]);
  };
  // The first stage reads the batch; fc1 (with its bias and the ReLU) is on mesh 0, fc2 on the
  // last mesh: every mesh a stage.
  const int last = static_cast<int>(o.meshes) - 1;
  if (on("input", "") != 0 || on(kW0, "") != 0 || on(kB0, kW0) != 0 || on(kW1, "") != last ||
      on(kB1, kW1) != last) {
    return Status::InvalidArgument(
        "auto: with auto.meshes " + std::to_string(o.meshes) +
        " the input, w0 and its bias go on mesh 0 and w1 and its bias on mesh " +
        std::to_string(last) + " (one stage per mesh)");
  }
  plan.pp = static_cast<int>(o.meshes);
  const Placements x = get("input"), w0 = get(kW0), b0 = get(kB0), w1 = get(kW1), b1 = get(kB1);
  Walk walk(plan);
  const Shape bh = {B, hidden}, bo = {B, out};

  // Forward: h = x @ w0 + b0; a = relu(h); y = a @ w1 + b1; loss = mean((y - target)^2).
  STRATA_ASSIGN_OR_RETURN(OpSharding mm0, MatmulRule(x, w0, false, false));
  STRATA_RETURN_IF_ERROR(walk.Reshard("input", shapes.at("input"), x, mm0.inputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard(kW0, shapes.at(kW0), w0, mm0.inputs[1]));
  walk.Tensor("input", shapes.at("input"), mm0.inputs[0]);
  walk.Tensor(kW0, shapes.at(kW0), mm0.inputs[1]);
  walk.Tensor("mlp.fc1 x @ w", bh, mm0.outputs[0]);
  STRATA_ASSIGN_OR_RETURN(OpSharding add0, ElementwiseRule(ElementwiseKind::kAdd, {bh, {hidden}},
                                                           {mm0.outputs[0], b0}));
  STRATA_RETURN_IF_ERROR(walk.Reshard("mlp.fc1 x @ w", bh, mm0.outputs[0], add0.inputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard(kB0, {hidden}, b0, add0.inputs[1]));
  walk.Tensor(kB0, {hidden}, add0.inputs[1]);
  walk.Tensor("mlp.fc1 output", bh, add0.outputs[0]);
  STRATA_ASSIGN_OR_RETURN(OpSharding act,
                          ElementwiseRule(ElementwiseKind::kNonlinear, {bh}, {add0.outputs[0]}));
  STRATA_RETURN_IF_ERROR(walk.Reshard("mlp.fc1 output", bh, add0.outputs[0], act.inputs[0]));
  walk.Tensor("mlp.act output", bh, act.outputs[0]);
  // Across stages the activation keeps its placements on the next mesh (the seeds' reshard).
  if (plan.pp > 1) {
    STRATA_RETURN_IF_ERROR(walk.Handoff("mlp.act output", bh, act.outputs[0], act.outputs[0], true));
  }
  STRATA_ASSIGN_OR_RETURN(OpSharding mm1, MatmulRule(act.outputs[0], w1, false, false));
  STRATA_RETURN_IF_ERROR(walk.Reshard("mlp.act output", bh, act.outputs[0], mm1.inputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard(kW1, shapes.at(kW1), w1, mm1.inputs[1]));
  walk.Tensor(kW1, shapes.at(kW1), mm1.inputs[1]);
  walk.Tensor("mlp.fc2 x @ w", bo, mm1.outputs[0]);
  STRATA_ASSIGN_OR_RETURN(OpSharding add1, ElementwiseRule(ElementwiseKind::kAdd, {bo, {out}},
                                                           {mm1.outputs[0], b1}));
  STRATA_RETURN_IF_ERROR(walk.Reshard("mlp.fc2 x @ w", bo, mm1.outputs[0], add1.inputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard(kB1, {out}, b1, add1.inputs[1]));
  walk.Tensor(kB1, {out}, add1.inputs[1]);
  walk.Tensor("mlp.fc2 output", bo, add1.outputs[0]);
  // The squared error against the target (placed like the output) is element-wise and
  // nonlinear, its mean a reduction.
  STRATA_ASSIGN_OR_RETURN(OpSharding err,
                          ElementwiseRule(ElementwiseKind::kNonlinear, {bo}, {add1.outputs[0]}));
  STRATA_RETURN_IF_ERROR(walk.Reshard("mlp.fc2 output", bo, add1.outputs[0], err.inputs[0]));
  STRATA_ASSIGN_OR_RETURN(OpSharding mean, ReductionRule(ReductionKind::kMean, err.outputs[0]));
  walk.Tensor("loss", {1}, mean.outputs[0]);

  // Backward, from the loss's gradient (replicated) down to the weights' gradients, each
  // synchronised to its weight's placement.
  STRATA_ASSIGN_OR_RETURN(OpSharding dmean, ReductionBackwardRule(ReductionKind::kMean,
                                                                  err.outputs[0]));
  STRATA_ASSIGN_OR_RETURN(OpSharding derr, ElementwiseBackwardRule(ElementwiseKind::kNonlinear,
                                                                   {bo}, err.inputs,
                                                                   dmean.outputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard("d loss/d output", bo, dmean.outputs[0], derr.inputs[1]));
  STRATA_ASSIGN_OR_RETURN(OpSharding dadd1,
                          ElementwiseBackwardRule(ElementwiseKind::kAdd, {bo, {out}}, add1.inputs,
                                                  derr.outputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard("d mlp.fc2 output", bo, derr.outputs[0], dadd1.inputs[2]));
  walk.Tensor("d mlp.fc2 output", bo, dadd1.inputs[2]);
  STRATA_RETURN_IF_ERROR(walk.Reshard(std::string(kB1) + " grad", {out}, dadd1.outputs[1],
                                      Stored(add1.inputs[1]), true));
  STRATA_ASSIGN_OR_RETURN(auto dmm1, MatmulBackwardRule(mm1.inputs[0], mm1.inputs[1],
                                                        dadd1.outputs[0], false, false));
  STRATA_RETURN_IF_ERROR(walk.Reshard("d mlp.fc2 x @ w", bo, dadd1.outputs[0], dmm1[0].inputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard(kW1, shapes.at(kW1), mm1.inputs[1], dmm1[0].inputs[1]));
  STRATA_RETURN_IF_ERROR(walk.Reshard("mlp.act output", bh, mm1.inputs[0], dmm1[1].inputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard("d mlp.fc2 x @ w", bo, dadd1.outputs[0], dmm1[1].inputs[1]));
  STRATA_RETURN_IF_ERROR(walk.Reshard(std::string(kW1) + " grad", shapes.at(kW1),
                                      dmm1[1].outputs[0], Stored(mm1.inputs[1]), true));
  walk.Tensor("d mlp.act output", bh, dmm1[0].outputs[0]);
  if (plan.pp > 1) {
    STRATA_RETURN_IF_ERROR(walk.Handoff("d mlp.act output", bh, dmm1[0].outputs[0],
                                        dmm1[0].outputs[0], false));
  }
  STRATA_ASSIGN_OR_RETURN(OpSharding dact,
                          ElementwiseBackwardRule(ElementwiseKind::kNonlinear, {bh}, act.inputs,
                                                  dmm1[0].outputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard("d mlp.act output", bh, dmm1[0].outputs[0], dact.inputs[1]));
  STRATA_ASSIGN_OR_RETURN(OpSharding dadd0,
                          ElementwiseBackwardRule(ElementwiseKind::kAdd, {bh, {hidden}},
                                                  add0.inputs, dact.outputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard("d mlp.fc1 output", bh, dact.outputs[0], dadd0.inputs[2]));
  walk.Tensor("d mlp.fc1 output", bh, dadd0.inputs[2]);
  STRATA_RETURN_IF_ERROR(walk.Reshard(std::string(kB0) + " grad", {hidden}, dadd0.outputs[1],
                                      Stored(add0.inputs[1]), true));
  // The input needs no gradient (the trainer's fc1 computes none): only dw0 = x^T @ dh.
  STRATA_ASSIGN_OR_RETURN(auto dmm0, MatmulBackwardRule(mm0.inputs[0], mm0.inputs[1],
                                                        dadd0.outputs[0], false, false));
  STRATA_RETURN_IF_ERROR(walk.Reshard("input", shapes.at("input"), mm0.inputs[0], dmm0[1].inputs[0]));
  STRATA_RETURN_IF_ERROR(walk.Reshard("d mlp.fc1 x @ w", bh, dadd0.outputs[0], dmm0[1].inputs[1]));
  STRATA_RETURN_IF_ERROR(walk.Reshard(std::string(kW0) + " grad", shapes.at(kW0),
                                      dmm0[1].outputs[0], Stored(mm0.inputs[1]), true));

  // Which plan the trainer runs along each dimension.
  plan.roles.assign(mesh.ndim(), "");
  for (int d = 0; d < mesh.ndim(); ++d) {
    if (mesh.dim_size(d) == 1) continue;
    const bool weights_kept = mm0.inputs[1][d] == w0[d] && mm1.inputs[1][d] == w1[d];
    const auto is = [&](const Placements& p, Placement want) { return p[d] == want; };
    const Placement r = Replicate{};
    std::string role;
    if (weights_kept && is(x, Shard{0}) && is(w0, r) && is(w1, r) && is(b0, r) && is(b1, r)) {
      role = "dp";
    } else if (weights_kept && is(x, r) && is(w0, Shard{1}) && is(w1, Shard{0}) && is(b1, r) &&
               (is(b0, r) || is(b0, Shard{0}))) {
      role = "tp";
    } else {
      return Status::InvalidArgument(fmt::format(
          "auto: on mesh dimension '{}' the placements (input {}, w0 {}, w1 {}) derive no plan "
          "the trainer runs: it runs data parallelism (input S(0), weights R) and Megatron "
          "tensor parallelism (input R, w0 S(1), w1 S(0)), one mesh dimension each",
          mesh.dims()[d].name, ToString(x[d]), ToString(w0[d]), ToString(w1[d])));
    }
    for (int e = 0; e < d; ++e) {
      if (plan.roles[e] == role) {
        return Status::InvalidArgument("auto: mesh dimensions '" + mesh.dims()[e].name +
                                       "' and '" + mesh.dims()[d].name + "' are both " + role +
                                       "; the trainer runs one of each");
      }
    }
    plan.roles[d] = role;
    (role == "dp" ? plan.dp : plan.tp) = mesh.dim_size(d);
  }
  return plan;
}

std::vector<std::string> AutoPlan::Explain() const {
  std::vector<std::string> lines;
  std::string roles_line = "auto: " + mesh.ToString() + ":";
  for (int d = 0; d < mesh.ndim(); ++d) {
    roles_line += " " + mesh.dims()[d].name + " " +
                  (roles[d].empty() ? std::string("(size 1)") : roles[d]);
  }
  lines.push_back(roles_line + fmt::format(" -> parallel.dp {} x parallel.tp {} x parallel.pp {}",
                                           dp, tp, pp));
  for (const DerivedTensor& t : tensors) {
    lines.push_back(fmt::format("auto:   {:<26} {:<15} {}{}", t.name, ShapeToString(t.shape),
                                ToString(t.placements), t.how.empty() ? "" : "  " + t.how));
  }
  for (const DerivedReshard& r : reshards) {
    if (r.from.empty()) {  // a collective inside an op (the vocab-parallel loss)
      lines.push_back(fmt::format("auto:   {}: {} ({} bytes per micro-batch)", r.what, r.steps,
                                  r.bytes));
      continue;
    }
    lines.push_back(fmt::format("auto:   reshard {} {} -> {}: {} ({} bytes per {}{}{})", r.what,
                                ToString(r.from), ToString(r.to), r.steps, r.bytes,
                                r.per_step ? "step" : "micro-batch",
                                r.times > 1 ? ", twice: recomputed in backward" : "",
                                pp > 1 ? fmt::format(", mesh {}", r.mesh) : std::string()));
  }
  auto list = [](const std::map<std::string, uint64_t>& bytes) {
    std::string s;
    for (const auto& [op, n] : bytes) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", op, n);
    return s.empty() ? std::string("nothing") : s;
  };
  lines.push_back("auto: rank 0 moves per micro-batch: " + list(per_micro_batch) +
                  "; per step: " + list(per_step));
  return lines;
}

Status CheckAutoWorld(const TrainJob& job, int trainers) {
  STRATA_ASSIGN_OR_RETURN(ProcessMesh mesh, ParseMesh(job.auto_parallel.mesh));
  const int64_t ranks = mesh.size() * job.auto_parallel.meshes;
  if (trainers != ranks) {
    return Status::InvalidArgument(fmt::format(
        "auto.mesh {} x auto.meshes {} has {} ranks but the job has {} trainers", mesh.ToString(),
        job.auto_parallel.meshes, ranks, trainers));
  }
  return Status::OK();
}

Status ApplyAutoPlan(TrainJob& job) {
  STRATA_ASSIGN_OR_RETURN(AutoPlan plan, DeriveAutoPlan(job));
  ParallelOptions& p = job.parallel;
  if ((p.dp != 0 && p.dp != plan.dp) || (p.tp != 1 && p.tp != plan.tp) ||
      (p.pp != 1 && p.pp != plan.pp)) {
    return Status::InvalidArgument(fmt::format(
        "auto: the placements derive parallel.dp {}, tp {}, pp {}, but the job sets dp {}, tp {}, "
        "pp {}: leave them unset with an auto section",
        plan.dp, plan.tp, plan.pp, p.dp, p.tp, p.pp));
  }
  p.dp = plan.dp;
  p.tp = plan.tp;
  p.pp = plan.pp;
  // The second stage starts at fc2 (unit 2: fc1, act, fc2), where w1's mesh begins.
  if (plan.pp == 2) p.partition = "2";
  return Status::OK();
}

}  // namespace strata
