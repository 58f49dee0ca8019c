// propagate.cc: Propagate. A Walk places every tensor of the graph given the parameters'
// placements (forward through each op's rule, choosing among the placements a tensor is
// already available in the cheapest, then backward through the backward rules, accumulating
// gradients and synchronising each parameter's gradient to its placement once a step) and
// prices its reshards; the parameters a model-parallel dimension leaves free are chosen by
// coordinate descent over walks.
#include "trainer/auto/propagate.h"

#include <fmt/format.h>

#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "trainer/auto/dist_tensor.h"
#include "trainer/auto/reshard.h"

namespace strata {
namespace {

const Placement kRep = Replicate{};

int AxisOf(const Placement& p) {
  const auto* s = std::get_if<Shard>(&p);
  return s ? s->axis : -1;
}

Placements Stored(Placements p) {
  for (Placement& q : p) {
    if (std::holds_alternative<Partial>(q)) q = kRep;
  }
  return p;
}

// rows [B*T, C] <-> [B, T, C] for the positions' broadcast: a row shard is a sequence shard.
Placements To3d(Placements p) {
  for (Placement& q : p) {
    if (AxisOf(q) == 1) q = Shard{2};
  }
  return p;
}
Placements From3d(Placements p) {
  for (Placement& q : p) {
    if (AxisOf(q) == 2) q = Shard{1};
    if (AxisOf(q) == 1) q = kRep;  // never asked of rows
  }
  return p;
}

// Attention over [B, H, T, D]: batch and heads are independent, so a shard of either that q, k
// and v share stays; anything else is gathered (or reduced).
OpSharding AttentionRule(const std::vector<Placements>& in) {
  Placements p = in[0];
  for (size_t d = 0; d < p.size(); ++d) {
    const int a = AxisOf(p[d]);
    const bool same = in[1][d] == p[d] && in[2][d] == p[d];
    if (!(same && (a == 0 || a == 1))) p[d] = kRep;
  }
  return OpSharding{{p, p, p}, {p}};
}

class Walk {
 public:
  Walk(const OpGraph& g, const PropagateOptions& o, const std::map<int, Placements>& fixed,
       const Placements& input, Propagation* record)
      : g_(g), o_(o), mesh_(o.mesh), coords_(o.mesh.Coords(0)), avail_(g.tensors.size()),
        grad_(g.tensors.size()), fwd_(g.ops.size()), record_(record) {
    for (const auto& [t, p] : fixed) avail_[static_cast<size_t>(t)] = {p};
    avail_[static_cast<size_t>(g.input)] = {input};
    avail_[static_cast<size_t>(g.targets)] = {input};
  }

  Status Run() {
    for (size_t i = 0; i < g_.ops.size(); ++i) STRATA_RETURN_IF_ERROR(Forward(i));
    for (size_t i = g_.ops.size(); i-- > 0;) STRATA_RETURN_IF_ERROR(Backward(i));
    for (size_t t = 0; t < g_.tensors.size(); ++t) {
      const GraphTensor& gt = g_.tensors[t];
      if (gt.kind != GraphTensor::Kind::kParameter || !grad_[t]) continue;
      const Placements stored = avail_[t].front();
      STRATA_RETURN_IF_ERROR(Move(gt.name + " grad", gt.shape, *grad_[t], stored, true, 0));
      if (record_) record_->parameters[gt.name] = stored;
    }
    return Status::OK();
  }
  double cost() const { return cost_; }

 private:
  // Prices (and, recording, lists) taking a tensor from `from` to `to`.
  Result<double> Price(const std::string& what, const Shape& shape, const Placements& from,
                       const Placements& to, bool per_step, int unit, bool count) {
    if (from == to) return 0.0;
    STRATA_ASSIGN_OR_RETURN(std::vector<ReshardStep> steps,
                            PlanReshard(what, shape, mesh_, from, to));
    STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> bytes,
                            ReshardStepBytes(what, shape, mesh_, from, to, coords_));
    const bool again = unit < static_cast<int>(o_.recompute.size()) &&
                       o_.recompute[static_cast<size_t>(unit)];
    const int times = !per_step && again && !backward_ ? 2 : 1;
    const double per = per_step ? 1.0 : static_cast<double>(o_.micro_batches * times);
    double seconds = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < steps.size(); ++i) {
      if (bytes[i] == 0) continue;
      total += bytes[i];
      const double n = mesh_.dim_size(steps[i].mesh_dim);
      const double wire = (steps[i].kind == ReshardKind::kAllReduce ? 2.0 : 1.0) * (n - 1) / n *
                          static_cast<double>(bytes[i]);
      seconds += per * (o_.link.latency_s + wire / o_.link.bytes_per_s);
      if (count && record_) {
        (per_step ? record_->per_step : record_->per_micro_batch)
            [std::string(ReshardKindName(steps[i].kind))] += bytes[i] * static_cast<uint64_t>(times);
      }
    }
    if (count && record_) {
      record_->reshards.push_back(
          {what, shape, from, to, ToString(steps, mesh_), total, per_step, 0, times});
    }
    return seconds;
  }
  Status Move(const std::string& what, const Shape& shape, const Placements& from,
              const Placements& to, bool per_step, int unit) {
    STRATA_ASSIGN_OR_RETURN(double s, Price(what, shape, from, to, per_step, unit, true));
    cost_ += s;
    return Status::OK();
  }

  void Note(int t, const Placements& p, const std::string& prefix = "") {
    if (!record_) return;
    const GraphTensor& gt = g_.tensors[static_cast<size_t>(t)];
    std::string how;
    if (auto it = how_.find(t); it != how_.end() && prefix.empty()) how = it->second;
    record_->tensors.push_back({prefix + gt.name, gt.shape, p, how});
  }

 public:
  std::map<int, std::string> how_;  // why a parameter or input has its placement

 private:
  using Rule = std::function<Result<OpSharding>(const std::vector<Placements>&)>;

  // The op's inputs from the placements they are available in, the cheapest combination for
  // the rule; returns what the rule decided and resharded the inputs. A parameter nobody placed
  // takes what the rule asks of a replicated one, stored without its Partial.
  Result<OpSharding> Inputs(const GraphOp& op, const Rule& rule) {
    const size_t n = op.inputs.size();
    std::vector<std::vector<Placements>> options(n);
    for (size_t i = 0; i < n; ++i) {
      const auto& a = avail_[static_cast<size_t>(op.inputs[i])];
      options[i] = a.empty() ? std::vector<Placements>{Placements(mesh_.ndim(), kRep)} : a;
    }
    std::vector<size_t> pick(n, 0), best_pick;
    double best = std::numeric_limits<double>::infinity();
    std::optional<OpSharding> best_rule;
    while (true) {
      std::vector<Placements> in(n);
      for (size_t i = 0; i < n; ++i) in[i] = options[i][pick[i]];
      STRATA_ASSIGN_OR_RETURN(OpSharding s, rule(in));
      double c = 0;
      for (size_t i = 0; i < n; ++i) {
        const GraphTensor& t = g_.tensors[static_cast<size_t>(op.inputs[i])];
        if (avail_[static_cast<size_t>(op.inputs[i])].empty()) continue;  // placed by this rule
        STRATA_ASSIGN_OR_RETURN(double ci, Price(t.name, t.shape, in[i], s.inputs[i], false,
                                                 op.unit, false));
        c += ci;
      }
      if (c < best) best = c, best_pick = pick, best_rule = s;
      size_t i = 0;
      while (i < n && ++pick[i] == options[i].size()) pick[i++] = 0;
      if (i == n) break;
    }
    for (size_t i = 0; i < n; ++i) {
      const int t = op.inputs[i];
      auto& a = avail_[static_cast<size_t>(t)];
      const Placements& want = best_rule->inputs[i];
      const GraphTensor& gt = g_.tensors[static_cast<size_t>(t)];
      if (a.empty()) {
        a = {Stored(want)};
        if (Stored(want) != want) a.push_back(want);
        Note(t, Stored(want));
        continue;
      }
      const Placements from = options[i][best_pick[i]];
      if (gt.kind != GraphTensor::Kind::kActivation && !noted_[t]) Note(t, from);
      noted_[t] = true;
      STRATA_RETURN_IF_ERROR(Move(gt.name, gt.shape, from, want, false, op.unit));
      bool have = false;
      for (const Placements& p : a) have = have || p == want;
      if (!have) a.push_back(want);
    }
    return *best_rule;
  }

  std::vector<Shape> Shapes(const GraphOp& op) const {
    std::vector<Shape> s;
    for (int t : op.inputs) s.push_back(g_.tensors[static_cast<size_t>(t)].shape);
    return s;
  }

  Status Forward(size_t i) {
    const GraphOp& op = g_.ops[i];
    const std::vector<Shape> shapes = Shapes(op);
    Rule rule;
    switch (op.kind) {
      case GraphOpKind::kEmbedding:
        rule = [](const auto& p) { return EmbeddingRule(p[0], p[1]); };
        break;
      case GraphOpKind::kAddPositions: {
        const Shape rows3 = {op.batch, shapes[1][0], shapes[1][1]};
        rule = [rows3, shapes](const auto& p) -> Result<OpSharding> {
          STRATA_ASSIGN_OR_RETURN(OpSharding s, ElementwiseRule(ElementwiseKind::kAdd,
                                                                {rows3, shapes[1]},
                                                                {To3d(p[0]), p[1]}));
          return OpSharding{{From3d(s.inputs[0]), s.inputs[1]}, {From3d(s.outputs[0])}};
        };
        break;
      }
      case GraphOpKind::kLayerNorm:
        rule = [](const auto& p) { return LayerNormRule(p[0]); };
        break;
      case GraphOpKind::kMatmul:
        rule = [](const auto& p) { return MatmulRule(p[0], p[1], false, false); };
        break;
      case GraphOpKind::kBiasAdd:
      case GraphOpKind::kAdd:
        rule = [shapes](const auto& p) {
          return ElementwiseRule(ElementwiseKind::kAdd, shapes, p);
        };
        break;
      case GraphOpKind::kGelu:
        rule = [shapes](const auto& p) {
          return ElementwiseRule(ElementwiseKind::kNonlinear, shapes, p);
        };
        break;
      case GraphOpKind::kSplitQkv:
        rule = [&, op](const auto& p) -> Result<OpSharding> {
          STRATA_ASSIGN_OR_RETURN(OpSharding s, SplitHeadsRule(mesh_, p[0], op.batch, op.heads));
          s.outputs.assign(3, s.outputs[0]);
          return s;
        };
        break;
      case GraphOpKind::kAttention:
        rule = [](const auto& p) -> Result<OpSharding> { return AttentionRule(p); };
        break;
      case GraphOpKind::kMergeHeads:
        rule = [&, op](const auto& p) { return MergeHeadsRule(mesh_, p[0], op.batch, op.heads); };
        break;
      case GraphOpKind::kCrossEntropy:
        return ForwardLoss(i);
    }
    STRATA_ASSIGN_OR_RETURN(OpSharding s, Inputs(op, rule));
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      avail_[static_cast<size_t>(op.outputs[k])] = {s.outputs[k]};
      Note(op.outputs[k], s.outputs[k]);
    }
    fwd_[i] = s;
    return Status::OK();
  }

  // Two feasible rules: gather the vocabulary (CrossEntropyRule), or keep the logits' vocabulary
  // shard and all-reduce, inside the op, each row's max and then its sum of exponentials and its
  // target's logit (Megatron's vocab-parallel cross-entropy): the cheaper wins.
  Status ForwardLoss(size_t i) {
    const GraphOp& op = g_.ops[i];
    const GraphTensor& logits = g_.tensors[static_cast<size_t>(op.inputs[0])];
    const Placements from = avail_[static_cast<size_t>(op.inputs[0])].front();
    std::vector<int> vocab_dims;
    Placements gathered = from;
    for (size_t d = 0; d < from.size(); ++d) {
      if (AxisOf(from[d]) == 1) vocab_dims.push_back(static_cast<int>(d)), gathered[d] = kRep;
    }
    const Placements targets = avail_[static_cast<size_t>(op.inputs[1])].front();
    STRATA_ASSIGN_OR_RETURN(OpSharding s, CrossEntropyRule(gathered, targets));
    OpSharding kept = s;
    // Rows on this rank after the rule's row shards: what each internal all-reduce carries.
    int64_t rows = logits.shape[0];
    for (size_t d = 0; d < from.size(); ++d) {
      if (AxisOf(s.inputs[0][d]) == 0) rows /= mesh_.dim_size(static_cast<int>(d));
    }
    double internal = 0;
    for (int d : vocab_dims) {
      kept.inputs[0][static_cast<size_t>(d)] = Shard{1};
      const double n = mesh_.dim_size(d);
      for (int floats : {1, 2}) {
        internal += static_cast<double>(o_.micro_batches) *
                    (o_.link.latency_s + 2 * (n - 1) / n * static_cast<double>(rows * floats * 4) /
                                             o_.link.bytes_per_s);
      }
    }
    STRATA_ASSIGN_OR_RETURN(double gather, Price("", logits.shape, from, s.inputs[0], false,
                                                 op.unit, false));
    STRATA_ASSIGN_OR_RETURN(double keep, Price("", logits.shape, from, kept.inputs[0], false,
                                               op.unit, false));
    const bool vocab_parallel = !vocab_dims.empty() && keep + internal < gather;
    const OpSharding& use = vocab_parallel ? kept : s;
    STRATA_RETURN_IF_ERROR(Move(logits.name, logits.shape, from, use.inputs[0], false, op.unit));
    const GraphTensor& tt = g_.tensors[static_cast<size_t>(op.inputs[1])];
    STRATA_RETURN_IF_ERROR(Move(tt.name, tt.shape, targets, use.inputs[1], false, op.unit));
    if (vocab_parallel) {
      cost_ += internal;
      for (int d : vocab_dims) {
        const uint64_t bytes = static_cast<uint64_t>(rows) * 3 * sizeof(float);
        if (record_) {
          record_->vocab_parallel_loss = true;
          record_->per_micro_batch["all_reduce"] += bytes;
          record_->reshards.push_back(
              {"loss (vocab-parallel)", {rows, 3}, {}, {},
               fmt::format("inside the op: all_reduce on {} of each row's max, then of its sum of "
                           "exponentials and target logit",
                           mesh_.dims()[static_cast<size_t>(d)].name),
               bytes, false, 0, 1});
        }
      }
    }
    avail_[static_cast<size_t>(op.outputs[0])] = {use.outputs[0]};
    Note(op.outputs[0], use.outputs[0]);
    fwd_[i] = use;
    return Status::OK();
  }

  // The gradient of output k of op i, resharded to `want` (a replicated loss gradient when
  // none flowed back).
  Status Dout(const GraphOp& op, size_t k, const Placements& want) {
    const int t = op.outputs[k];
    const GraphTensor& gt = g_.tensors[static_cast<size_t>(t)];
    auto& g = grad_[static_cast<size_t>(t)];
    const Placements have = g ? *g : Placements(mesh_.ndim(), kRep);
    STRATA_RETURN_IF_ERROR(Move("d " + gt.name, gt.shape, have, want, false, op.unit));
    g = want;
    return Status::OK();
  }
  // A saved forward input, from the placement it is available in closest to `want`.
  Status Saved(const GraphOp& op, size_t k, const Placements& want) {
    const int t = op.inputs[k];
    const GraphTensor& gt = g_.tensors[static_cast<size_t>(t)];
    for (const Placements& p : avail_[static_cast<size_t>(t)]) {
      if (p == want) return Status::OK();
    }
    return Move(gt.name, gt.shape, avail_[static_cast<size_t>(t)].front(), want, false, op.unit);
  }
  // Adds a gradient of input k (placed `p`) to what it has accumulated.
  Status Accumulate(const GraphOp& op, size_t k, const Placements& p) {
    const int t = op.inputs[k];
    const GraphTensor& gt = g_.tensors[static_cast<size_t>(t)];
    if (gt.kind == GraphTensor::Kind::kInput) return Status::OK();
    auto& g = grad_[static_cast<size_t>(t)];
    if (!g) {
      g = p;
      if (gt.kind == GraphTensor::Kind::kActivation) Note(t, p, "d ");
      return Status::OK();
    }
    STRATA_ASSIGN_OR_RETURN(OpSharding sum, ElementwiseRule(ElementwiseKind::kAdd,
                                                            {gt.shape, gt.shape}, {*g, p}));
    STRATA_RETURN_IF_ERROR(Move("d " + gt.name, gt.shape, *g, sum.inputs[0], false, op.unit));
    STRATA_RETURN_IF_ERROR(Move("d " + gt.name, gt.shape, p, sum.inputs[1], false, op.unit));
    g = sum.outputs[0];
    return Status::OK();
  }

  Status Backward(size_t i) {
    backward_ = true;
    const GraphOp& op = g_.ops[i];
    const OpSharding& f = fwd_[i];
    const std::vector<Shape> shapes = Shapes(op);
    auto dout = [&](size_t k) { return grad_[static_cast<size_t>(op.outputs[k])]; };
    switch (op.kind) {
      case GraphOpKind::kEmbedding: {
        STRATA_ASSIGN_OR_RETURN(OpSharding b, EmbeddingBackwardRule(f.inputs[0], f.inputs[1]));
        STRATA_RETURN_IF_ERROR(Dout(op, 0, b.inputs[2]));
        return Accumulate(op, 0, b.outputs[0]);
      }
      case GraphOpKind::kAddPositions: {
        const Shape rows3 = {op.batch, shapes[1][0], shapes[1][1]};
        const Placements d0 = dout(0) ? *dout(0) : Placements(mesh_.ndim(), kRep);
        STRATA_ASSIGN_OR_RETURN(
            OpSharding b, ElementwiseBackwardRule(ElementwiseKind::kAdd, {rows3, shapes[1]},
                                                  {To3d(f.inputs[0]), f.inputs[1]}, To3d(d0)));
        STRATA_RETURN_IF_ERROR(Dout(op, 0, From3d(b.inputs[2])));
        STRATA_RETURN_IF_ERROR(Accumulate(op, 0, From3d(b.outputs[0])));
        return Accumulate(op, 1, b.outputs[1]);
      }
      case GraphOpKind::kLayerNorm: {
        STRATA_ASSIGN_OR_RETURN(OpSharding b, LayerNormBackwardRule(f.inputs[0]));
        STRATA_RETURN_IF_ERROR(Saved(op, 0, b.inputs[0]));
        STRATA_RETURN_IF_ERROR(Dout(op, 0, b.inputs[1]));
        for (size_t k = 0; k < 3; ++k) STRATA_RETURN_IF_ERROR(Accumulate(op, k, b.outputs[k]));
        return Status::OK();
      }
      case GraphOpKind::kMatmul: {
        const Placements d0 = dout(0) ? *dout(0) : Placements(mesh_.ndim(), kRep);
        STRATA_ASSIGN_OR_RETURN(auto b, MatmulBackwardRule(f.inputs[0], f.inputs[1], d0, false, false));
        // da = dout @ w^T (inputs {dout, w}); dw = x^T @ dout (inputs {x, dout}).
        // Each from the gradient as it arrived.
        STRATA_RETURN_IF_ERROR(Dout(op, 0, b[0].inputs[0]));
        STRATA_RETURN_IF_ERROR(Saved(op, 1, b[0].inputs[1]));
        STRATA_RETURN_IF_ERROR(Accumulate(op, 0, b[0].outputs[0]));
        STRATA_RETURN_IF_ERROR(Saved(op, 0, b[1].inputs[0]));
        grad_[static_cast<size_t>(op.outputs[0])] = d0;
        STRATA_RETURN_IF_ERROR(Dout(op, 0, b[1].inputs[1]));
        return Accumulate(op, 1, b[1].outputs[0]);
      }
      case GraphOpKind::kBiasAdd:
      case GraphOpKind::kAdd:
      case GraphOpKind::kGelu: {
        const Placements d0 = dout(0) ? *dout(0) : Placements(mesh_.ndim(), kRep);
        const ElementwiseKind kind =
            op.kind == GraphOpKind::kGelu ? ElementwiseKind::kNonlinear : ElementwiseKind::kAdd;
        STRATA_ASSIGN_OR_RETURN(OpSharding b, ElementwiseBackwardRule(kind, shapes, f.inputs, d0));
        if (kind == ElementwiseKind::kNonlinear) STRATA_RETURN_IF_ERROR(Saved(op, 0, b.inputs[0]));
        STRATA_RETURN_IF_ERROR(Dout(op, 0, b.inputs.back()));
        for (size_t k = 0; k < op.inputs.size(); ++k) {
          STRATA_RETURN_IF_ERROR(Accumulate(op, k, b.outputs[k]));
        }
        return Status::OK();
      }
      case GraphOpKind::kSplitQkv: {
        const Placements d0 = dout(0) ? *dout(0) : f.outputs[0];
        STRATA_ASSIGN_OR_RETURN(OpSharding b, MergeHeadsRule(mesh_, d0, op.batch, op.heads));
        for (size_t k = 0; k < 3; ++k) STRATA_RETURN_IF_ERROR(Dout(op, k, b.inputs[0]));
        return Accumulate(op, 0, b.outputs[0]);
      }
      case GraphOpKind::kAttention: {
        for (size_t k = 0; k < 3; ++k) STRATA_RETURN_IF_ERROR(Saved(op, k, f.inputs[k]));
        STRATA_RETURN_IF_ERROR(Dout(op, 0, f.outputs[0]));
        for (size_t k = 0; k < 3; ++k) STRATA_RETURN_IF_ERROR(Accumulate(op, k, f.inputs[k]));
        return Status::OK();
      }
      case GraphOpKind::kMergeHeads: {
        const Placements d0 = dout(0) ? *dout(0) : f.outputs[0];
        STRATA_ASSIGN_OR_RETURN(OpSharding b, SplitHeadsRule(mesh_, d0, op.batch, op.heads));
        STRATA_RETURN_IF_ERROR(Dout(op, 0, b.inputs[0]));
        return Accumulate(op, 0, b.outputs[0]);
      }
      case GraphOpKind::kCrossEntropy:
        return Accumulate(op, 0, f.inputs[0]);  // dlogits: the logits' placement
    }
    return Status::OK();
  }

  const OpGraph& g_;
  const PropagateOptions& o_;
  const ProcessMesh& mesh_;
  const std::vector<int> coords_;
  std::vector<std::vector<Placements>> avail_;  // forward: the placements a tensor exists in
  std::vector<std::optional<Placements>> grad_;
  std::vector<OpSharding> fwd_;
  std::map<int, bool> noted_;
  Propagation* record_;
  double cost_ = 0;
  bool backward_ = false;
};

// Whether annotation `name` names tensor `t`: equal, or its dotted suffix.
bool Names(const std::string& name, const std::string& t) {
  return t == name || (t.size() > name.size() && t.compare(t.size() - name.size(), name.size(), name) == 0 &&
                       t[t.size() - name.size() - 1] == '.');
}

}  // namespace

Result<Propagation> Propagate(const OpGraph& g, const PropagateOptions& o) {
  const ProcessMesh& mesh = o.mesh;
  const int nd = mesh.ndim();
  // Annotations onto tensors.
  std::map<int, Placements> annotated;
  std::map<int, std::string> annotated_as;
  for (const NamedPlacements& a : o.annotations) {
    bool any = false;
    for (size_t t = 0; t < g.tensors.size(); ++t) {
      const GraphTensor& gt = g.tensors[t];
      if (gt.kind == GraphTensor::Kind::kActivation || !Names(a.name, gt.name)) continue;
      if (static_cast<int>(t) == g.targets) continue;  // placed with the input
      STRATA_RETURN_IF_ERROR(CheckPlacements(gt.name, gt.shape, mesh, a.placements)
                                 .WithContext("auto.placements '" + a.name + "'"));
      annotated[static_cast<int>(t)] = a.placements;
      annotated_as[static_cast<int>(t)] = a.name;
      any = true;
    }
    if (!any) {
      return Status::InvalidArgument(
          "auto.placements: no tensor '" + a.name + "' in the " + g.model +
          " (the input, or a parameter's name such as gpt.block0.attn.qkv.weight or its dotted "
          "suffix such as attn.qkv.weight for every block)");
    }
  }
  Propagation p;
  p.roles.assign(static_cast<size_t>(nd), "");
  for (int d = 0; d < nd; ++d) {
    if (mesh.dim_size(d) == 1) continue;
    bool model = false;
    for (const auto& [t, pl] : annotated) {
      model = model || (t != g.input && AxisOf(pl[static_cast<size_t>(d)]) >= 0);
    }
    p.roles[static_cast<size_t>(d)] = model ? "model" : "data";
  }
  // The input: annotated, or S(0) on data dimensions and replicated on model ones.
  Placements input(static_cast<size_t>(nd), kRep);
  std::string input_how = "default: S(0) on data dimensions, R on model ones";
  if (auto it = annotated.find(g.input); it != annotated.end()) {
    input = it->second, input_how = "annotated";
  } else {
    for (int d = 0; d < nd; ++d) {
      if (p.roles[static_cast<size_t>(d)] == "data") input[static_cast<size_t>(d)] = Shard{0};
    }
  }
  // Parameters: annotated ones fixed; those a layer can split chosen on model dimensions (and
  // replicated on data ones); the rest placed by the rule of the op that reads them.
  struct Choice {
    int tensor, dim;
    std::vector<int> axes;
    size_t pick = 0;
    std::vector<double> costs;
  };
  std::vector<Choice> choices;
  std::map<int, Placements> fixed;
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const GraphTensor& gt = g.tensors[t];
    if (gt.kind != GraphTensor::Kind::kParameter) continue;
    const int ti = static_cast<int>(t);
    if (auto it = annotated.find(ti); it != annotated.end()) {
      fixed[ti] = it->second;
      continue;
    }
    if (gt.shard_axes.empty()) continue;
    fixed[ti] = Placements(static_cast<size_t>(nd), kRep);
    for (int d = 0; d < nd; ++d) {
      if (p.roles[static_cast<size_t>(d)] == "model") choices.push_back({ti, d, gt.shard_axes, 0, {}});
    }
  }
  auto placed = [&](const std::vector<Choice>& cs) {
    std::map<int, Placements> f = fixed;
    for (const Choice& c : cs) {
      f[c.tensor][static_cast<size_t>(c.dim)] = Shard{c.axes[c.pick]};
    }
    return f;
  };
  auto cost = [&](const std::vector<Choice>& cs) -> Result<double> {
    Walk w(g, o, placed(cs), input, nullptr);
    STRATA_RETURN_IF_ERROR(w.Run());
    return w.cost();
  };
  // Coordinate descent: each free choice in turn takes its cheapest axis given the others, until
  // a sweep changes nothing (ties keep the current axis).
  for (int sweep = 0; sweep < 8; ++sweep) {
    bool changed = false;
    for (Choice& c : choices) {
      c.costs.assign(c.axes.size(), 0);
      const size_t was = c.pick;
      for (size_t k = 0; k < c.axes.size(); ++k) {
        c.pick = k;
        STRATA_ASSIGN_OR_RETURN(c.costs[k], cost(choices));
      }
      c.pick = was;
      for (size_t k = 0; k < c.axes.size(); ++k) {
        if (c.costs[k] < c.costs[c.pick] * (1 - 1e-9)) c.pick = k;
      }
      changed = changed || c.pick != was;
    }
    if (!changed) break;
  }
  Walk w(g, o, placed(choices), input, &p);
  w.how_[g.input] = input_how;
  for (const auto& [t, name] : annotated_as) w.how_[t] = "annotated '" + name + "'";
  for (const Choice& c : choices) {
    std::string& how = w.how_[c.tensor];
    how += fmt::format("{}{}: ", how.empty() ? "" : "; ", mesh.dims()[static_cast<size_t>(c.dim)].name);
    for (size_t k = 0; k < c.axes.size(); ++k) {
      how += fmt::format("{}S({}) {:.3g} ms{}", k ? ", " : "", c.axes[k], c.costs[k] * 1e3,
                         k == c.pick ? " (chosen)" : "");
    }
    if (c.axes.size() == 1) how += " (the only split a layer has)";
  }
  STRATA_RETURN_IF_ERROR(w.Run());
  p.cost_s = w.cost();
  return p;
}

}  // namespace strata
