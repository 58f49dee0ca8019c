// sharding_rules.cc: the per-operator sharding rules, decided one mesh dimension at a time.
#include "trainer/auto/sharding_rules.h"

#include <utility>

namespace strata {
namespace {

const Placement kR = Replicate{};
const Placement kPSum = Partial{ReduceOp::kSum};

int AxisOf(const Placement& p) {
  const auto* s = std::get_if<Shard>(&p);
  return s == nullptr ? -1 : s->axis;
}
bool IsPartial(const Placement& p) { return std::holds_alternative<Partial>(p); }
bool IsPartialSum(const Placement& p) { return p == kPSum; }

Status SameDims(const char* op, const std::vector<const Placements*>& all) {
  for (const Placements* p : all) {
    if (p->size() != all.front()->size()) {
      return Status::InvalidArgument(std::string(op) + ": placements for meshes of different "
                                     "ranks (" + ToString(*all.front()) + " and " + ToString(*p) +
                                     ")");
    }
  }
  return Status::OK();
}

// The placements a one-input op over the last axis (layer norm, softmax) accepts for x: rows
// stay sharded, the last axis and Partial values are gathered.
Placements RowsOnly(const Placements& x) {
  Placements out = x;
  for (Placement& p : out) {
    if (AxisOf(p) != 0) p = kR;
  }
  return out;
}

// P(sum) where the rows are sharded, R elsewhere: the placement of a gradient summed over rows.
Placements SummedOverRows(const Placements& x) {
  Placements out(x.size(), kR);
  for (size_t d = 0; d < x.size(); ++d) {
    if (AxisOf(x[d]) == 0) out[d] = kPSum;
  }
  return out;
}

}  // namespace

std::string ToString(const OpSharding& s) {
  std::string out;
  for (size_t i = 0; i < s.inputs.size(); ++i) out += (i ? " x " : "") + ToString(s.inputs[i]);
  out += " ->";
  for (size_t i = 0; i < s.outputs.size(); ++i) out += (i ? ", " : " ") + ToString(s.outputs[i]);
  return out;
}

Result<OpSharding> MatmulRule(const Placements& a, const Placements& b, bool trans_a,
                              bool trans_b) {
  STRATA_RETURN_IF_ERROR(SameDims("matmul", {&a, &b}));
  const int m = trans_a ? 1 : 0, ka = trans_a ? 0 : 1;
  const int kb = trans_b ? 1 : 0, n = trans_b ? 0 : 1;
  OpSharding s{{a, b}, {Placements(a.size(), kR)}};
  for (size_t d = 0; d < a.size(); ++d) {
    Placement& pa = s.inputs[0][d];
    Placement& pb = s.inputs[1][d];
    Placement& out = s.outputs[0][d];
    const int xa = AxisOf(pa), xb = AxisOf(pb);
    if (xa == m) {
      pb = kR, out = Shard{0};
    } else if (xb == n) {
      pa = kR, out = Shard{1};
    } else if (xa == ka) {
      pb = Shard{kb}, out = kPSum;
    } else if (xb == kb) {
      pa = Shard{ka}, out = kPSum;
    } else if (IsPartialSum(pa)) {
      pb = kR, out = kPSum;
    } else if (IsPartialSum(pb)) {
      pa = kR, out = kPSum;
    } else {
      pa = kR, pb = kR, out = kR;  // R x R, or a Partial other than sum: reduce it
    }
  }
  return s;
}

MatmulGradFlags MatmulGradTransposes(bool trans_a, bool trans_b) {
  MatmulGradFlags f;
  // da = dout @ op(b)^T, or (trans_a) op(b) @ dout^T.
  if (trans_a) {
    f.da_trans_first = trans_b, f.da_trans_second = true;
  } else {
    f.da_trans_first = false, f.da_trans_second = !trans_b;
  }
  // db = op(a)^T @ dout, or (trans_b) dout^T @ op(a).
  if (trans_b) {
    f.db_trans_first = true, f.db_trans_second = trans_a;
  } else {
    f.db_trans_first = !trans_a, f.db_trans_second = false;
  }
  return f;
}

Result<std::vector<OpSharding>> MatmulBackwardRule(const Placements& a, const Placements& b,
                                                   const Placements& dout, bool trans_a,
                                                   bool trans_b) {
  STRATA_RETURN_IF_ERROR(SameDims("matmul backward", {&a, &b, &dout}));
  const MatmulGradFlags f = MatmulGradTransposes(trans_a, trans_b);
  std::vector<OpSharding> grads;
  STRATA_ASSIGN_OR_RETURN(OpSharding da, trans_a ? MatmulRule(b, dout, f.da_trans_first,
                                                              f.da_trans_second)
                                                 : MatmulRule(dout, b, f.da_trans_first,
                                                              f.da_trans_second));
  STRATA_ASSIGN_OR_RETURN(OpSharding db, trans_b ? MatmulRule(dout, a, f.db_trans_first,
                                                              f.db_trans_second)
                                                 : MatmulRule(a, dout, f.db_trans_first,
                                                              f.db_trans_second));
  grads.push_back(std::move(da));
  grads.push_back(std::move(db));
  return grads;
}

Result<OpSharding> ElementwiseRule(ElementwiseKind kind, const std::vector<Shape>& shapes,
                                   const std::vector<Placements>& inputs) {
  if (shapes.empty() || shapes.size() != inputs.size()) {
    return Status::InvalidArgument("element-wise rule: " + std::to_string(shapes.size()) +
                                   " shapes for " + std::to_string(inputs.size()) + " inputs");
  }
  if (kind == ElementwiseKind::kNonlinear && inputs.size() != 1) {
    return Status::InvalidArgument("element-wise rule: a nonlinear op takes one input");
  }
  std::vector<const Placements*> all;
  for (const Placements& p : inputs) all.push_back(&p);
  STRATA_RETURN_IF_ERROR(SameDims("element-wise", all));
  // The output's shape under numpy broadcasting.
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out_shape(rank, 1);
  for (const Shape& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out_shape[rank - s.size() + i];
      if (s[i] != 1 && o != 1 && s[i] != o) {
        return Status::InvalidArgument("element-wise rule: shapes " + ShapeToString(shapes[0]) +
                                       " and " + ShapeToString(s) + " do not broadcast");
      }
      if (s[i] != 1) o = s[i];
    }
  }
  // Input i's axis for output axis o, or -1 when it broadcasts along it.
  auto input_axis = [&](size_t i, int o) {
    const int a = o - static_cast<int>(rank - shapes[i].size());
    return a < 0 || shapes[i][a] != out_shape[o] ? -1 : a;
  };
  auto output_axis = [&](size_t i, int a) { return a + static_cast<int>(rank - shapes[i].size()); };
  OpSharding s{inputs, {Placements(inputs[0].size(), kR)}};
  for (size_t d = 0; d < inputs[0].size(); ++d) {
    int out_axis = -1;
    for (size_t i = 0; i < inputs.size() && out_axis < 0; ++i) {
      const int a = AxisOf(inputs[i][d]);
      if (a >= 0 && a < static_cast<int>(shapes[i].size()) &&
          input_axis(i, output_axis(i, a)) == a) {
        out_axis = output_axis(i, a);
      }
    }
    if (out_axis >= 0) {
      for (size_t i = 0; i < inputs.size(); ++i) {
        const int a = input_axis(i, out_axis);
        s.inputs[i][d] = a < 0 ? kR : Placement(Shard{a});
      }
      s.outputs[0][d] = Shard{out_axis};
      continue;
    }
    int partial_sums = 0;
    bool other_partial = false;
    for (const Placements& p : inputs) {
      partial_sums += IsPartialSum(p[d]);
      other_partial |= IsPartial(p[d]) && !IsPartialSum(p[d]);
    }
    const bool keep_partial = !other_partial && partial_sums > 0 &&
                              (kind == ElementwiseKind::kAdd ||
                               (kind == ElementwiseKind::kMul && partial_sums == 1));
    for (size_t i = 0; i < inputs.size(); ++i) {
      // kAdd partializes the replicated inputs too; kMul keeps its one P(sum) beside R ones.
      Placement& p = s.inputs[i][d];
      p = keep_partial && (kind == ElementwiseKind::kAdd || IsPartialSum(p)) ? kPSum : kR;
    }
    s.outputs[0][d] = keep_partial ? kPSum : kR;
  }
  return s;
}

Result<OpSharding> ElementwiseBackwardRule(ElementwiseKind kind, const std::vector<Shape>& shapes,
                                           const std::vector<Placements>& inputs,
                                           const Placements& dout) {
  // The forward rule checks the shapes and placements.
  STRATA_RETURN_IF_ERROR(ElementwiseRule(kind, shapes, inputs).status());
  size_t rank = 0;
  for (const Shape& sh : shapes) rank = std::max(rank, sh.size());
  OpSharding s{inputs, {}};
  s.inputs.push_back(dout);
  std::vector<Placements> grads(inputs.size(), Placements(dout.size(), kR));
  for (size_t d = 0; d < dout.size(); ++d) {
    const int o = AxisOf(dout[d]);
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int a = o - static_cast<int>(rank - shapes[i].size());
      const bool has = o >= 0 && a >= 0 && shapes[i][a] != 1;
      // Sharded dout: every input sharded alike where it has the axis, replicated where it
      // broadcasts (its gradient sums dout over that axis: a partial sum per rank). Otherwise
      // everything replicated: the local gradient is the dense one.
      s.inputs[i][d] = has ? Placement(Shard{a}) : kR;
      grads[i][d] = has ? Placement(Shard{a}) : (o >= 0 ? kPSum : kR);
    }
    if (o < 0) s.inputs.back()[d] = kR;
  }
  s.outputs = std::move(grads);
  return s;
}

Result<OpSharding> LayerNormRule(const Placements& x) {
  const Placements rows = RowsOnly(x);
  return OpSharding{{rows, Placements(x.size(), kR), Placements(x.size(), kR)}, {rows}};
}

Result<OpSharding> SoftmaxRule(const Placements& x) {
  const Placements rows = RowsOnly(x);
  return OpSharding{{rows}, {rows}};
}

Result<OpSharding> LayerNormBackwardRule(const Placements& x) {
  const Placements rows = RowsOnly(x);
  return OpSharding{{rows, rows}, {rows, SummedOverRows(rows), SummedOverRows(rows)}};
}

Result<OpSharding> SoftmaxBackwardRule(const Placements& y) {
  const Placements rows = RowsOnly(y);
  return OpSharding{{rows, rows}, {rows}};
}

namespace {

// Head split/merge: `rows_axis` and `heads_axis` of the input map to output axes 0 and 1 when
// the mesh dimensions sharding them divide batch and heads; other shards are gathered.
Result<OpSharding> HeadsRule(const ProcessMesh& mesh, const Placements& in, int64_t batch,
                             int64_t heads, int rows_axis, int heads_axis, int out_rows_axis,
                             int out_heads_axis) {
  if (static_cast<int>(in.size()) != mesh.ndim()) {
    return Status::InvalidArgument("head split/merge: " + ToString(in) + " for " +
                                   mesh.ToString());
  }
  if (batch < 1 || heads < 1) {
    return Status::InvalidArgument("head split/merge: batch " + std::to_string(batch) +
                                   " and heads " + std::to_string(heads) + " must be >= 1");
  }
  int64_t rows_parts = 1, heads_parts = 1;
  for (size_t d = 0; d < in.size(); ++d) {
    if (AxisOf(in[d]) == rows_axis) rows_parts *= mesh.dim_size(static_cast<int>(d));
    if (AxisOf(in[d]) == heads_axis) heads_parts *= mesh.dim_size(static_cast<int>(d));
  }
  OpSharding s{{in}, {in}};
  for (size_t d = 0; d < in.size(); ++d) {
    const int a = AxisOf(in[d]);
    if (a < 0) continue;  // Replicate and Partial pass through
    if (a == rows_axis && batch % rows_parts == 0) {
      s.outputs[0][d] = Shard{out_rows_axis};
    } else if (a == heads_axis && heads % heads_parts == 0) {
      s.outputs[0][d] = Shard{out_heads_axis};
    } else {
      s.inputs[0][d] = kR, s.outputs[0][d] = kR;
    }
  }
  return s;
}

}  // namespace

Result<OpSharding> SplitHeadsRule(const ProcessMesh& mesh, const Placements& x, int64_t batch,
                                  int64_t heads) {
  return HeadsRule(mesh, x, batch, heads, 0, 1, 0, 1);
}

Result<OpSharding> MergeHeadsRule(const ProcessMesh& mesh, const Placements& y, int64_t batch,
                                  int64_t heads) {
  return HeadsRule(mesh, y, batch, heads, 0, 1, 0, 1);
}

Result<OpSharding> EmbeddingRule(const Placements& table, const Placements& ids) {
  STRATA_RETURN_IF_ERROR(SameDims("embedding", {&table, &ids}));
  OpSharding s{{table, ids}, {Placements(table.size(), kR)}};
  for (size_t d = 0; d < table.size(); ++d) {
    Placement& pt = s.inputs[0][d];
    Placement& pi = s.inputs[1][d];
    Placement& out = s.outputs[0][d];
    if (AxisOf(pi) == 0) {
      pt = kR, out = Shard{0};
    } else if (AxisOf(pt) == 1) {
      pi = kR, out = Shard{1};
    } else if (AxisOf(pt) == 0 || IsPartialSum(pt)) {
      pi = kR, out = kPSum;
    } else {
      pt = kR, pi = kR, out = kR;
    }
  }
  return s;
}

Result<OpSharding> EmbeddingBackwardRule(const Placements& table, const Placements& ids) {
  STRATA_ASSIGN_OR_RETURN(OpSharding fwd, EmbeddingRule(table, ids));
  Placements drows = fwd.outputs[0], dtable = fwd.inputs[0];
  for (size_t d = 0; d < drows.size(); ++d) {
    if (IsPartialSum(drows[d])) drows[d] = kR;  // each slice's rows need the full dL/drows
    if (AxisOf(fwd.inputs[1][d]) == 0) dtable[d] = kPSum;
  }
  return OpSharding{{fwd.inputs[0], fwd.inputs[1], drows}, {dtable}};
}

Result<OpSharding> CrossEntropyRule(const Placements& logits, const Placements& targets) {
  STRATA_RETURN_IF_ERROR(SameDims("cross-entropy", {&logits, &targets}));
  OpSharding s{{logits, targets}, {Placements(logits.size(), kR)}};
  for (size_t d = 0; d < logits.size(); ++d) {
    if (AxisOf(logits[d]) == 0 || (AxisOf(targets[d]) == 0 && !IsPartial(logits[d]))) {
      s.inputs[0][d] = Shard{0}, s.inputs[1][d] = Shard{0}, s.outputs[0][d] = kPSum;
    } else {
      s.inputs[0][d] = kR, s.inputs[1][d] = kR;
    }
  }
  return s;
}

Result<OpSharding> ReductionRule(ReductionKind kind, const Placements& x) {
  (void)kind;  // the mean differs only in the local scale
  OpSharding s{{x}, {Placements(x.size(), kR)}};
  for (size_t d = 0; d < x.size(); ++d) {
    const auto* partial = std::get_if<Partial>(&x[d]);
    if (AxisOf(x[d]) >= 0) {
      s.outputs[0][d] = kPSum;
    } else if (partial != nullptr &&
               (partial->op == ReduceOp::kSum || partial->op == ReduceOp::kAvg)) {
      s.outputs[0][d] = x[d];  // sum and mean are linear
    } else if (partial != nullptr) {
      s.inputs[0][d] = kR;
    }
  }
  return s;
}

Result<OpSharding> ReductionBackwardRule(ReductionKind kind, const Placements& x) {
  STRATA_ASSIGN_OR_RETURN(OpSharding fwd, ReductionRule(kind, x));
  Placements dx = fwd.inputs[0];
  for (Placement& p : dx) {
    if (IsPartial(p)) p = kR;
  }
  return OpSharding{{Placements(x.size(), kR)}, {dx}};
}

}  // namespace strata
