// model.cc: Model's unit walk, the whole-model shorthands and CreateModel.
#include "trainer/models/model.h"

#include <string>

#include "trainer/models/zoo.h"
#include "trainer/ops/ops.h"

namespace strata {

Tensor ToDevice(const Tensor& t, const ops::Exec& ex) {
  if (t.device() == ex.device) return t;
  Tensor d = ops::NewTensor(ex, t.shape(), t.dtype());
  STRATA_CHECK_OK(d.CopyFrom(t));
  return d;
}

Tensor ToHost(const Tensor& t) {
  if (t.is_cpu()) return t;
  Tensor h = ops::NewTensor(ops::Exec::Cpu(), t.shape(), t.dtype());
  STRATA_CHECK_OK(h.CopyFrom(t));
  return h;
}

Batch Model::ToDevice(const Batch& b) const {
  if (!exec().is_cuda()) return b;
  Batch d = b;
  for (Tensor* t : {&d.x, &d.ids, &d.target}) {
    if (t->defined()) *t = strata::ToDevice(*t, exec());
  }
  return d;
}

Shape Model::OutputShape(int unit, const Batch& batch) const {
  Shape s = LeadingShape(batch);
  const UnitSpec& spec = specs_.at(unit);
  if (spec.seq_parts > 1) s.at(1) /= spec.seq_parts;
  s.push_back(spec.out_width);
  return s;
}

nn::Layer& Model::unit(int i) {
  STRATA_CHECK(i >= 0 && i < num_units() && units_[i]) << "unit " << i << " is not built here";
  return *units_[i];
}

std::vector<nn::Parameter*> Model::UnitParameters(int i) const {
  std::vector<nn::Parameter*> out;
  const auto [first, last] = unit_params_.at(static_cast<size_t>(i));
  for (size_t k = first; k < last; ++k) out.push_back(reg_.params()[k].get());
  return out;
}

Tensor Model::ForwardUnits(UnitRange r, const Batch& b, const Tensor& x, nn::Context& ctx) {
  using Pass = UnitHooks::Pass;
  Tensor h = r.first == 0 ? Input(b) : x;
  for (int i = r.first; i < r.last; ++i) {
    if (hooks_) hooks_->BeforeUnit(i, Pass::kForward, r, ctx);
    h = unit(i).Forward(h, ctx);
    if (hooks_) hooks_->AfterUnit(i, Pass::kForward, ctx);
  }
  return h;
}

Tensor Model::BackwardUnits(UnitRange r, const Tensor& dy, nn::Context& ctx, BackwardPart part) {
  using Pass = UnitHooks::Pass;
  Tensor g = dy;
  for (int i = r.last - 1; i >= r.first; --i) {
    if (hooks_) hooks_->BeforeUnit(i, Pass::kBackward, r, ctx);
    g = part == BackwardPart::kFull ? unit(i).Backward(g, ctx) : unit(i).BackwardInput(g, ctx);
    if (hooks_) hooks_->AfterUnit(i, Pass::kBackward, ctx);
  }
  return g;
}

void Model::BackwardWeightUnits(UnitRange r, nn::Context& ctx) {
  for (int i = r.last - 1; i >= r.first; --i) unit(i).BackwardWeight(ctx);
}

double Model::ForwardBackward(const Batch& batch, nn::Context& ctx, float grad_scale) {
  const UnitRange all{0, num_units()};
  Batch b = ToDevice(batch);
  Tensor out = ForwardUnits(all, b, Tensor(), ctx);
  const double loss = head_.Forward(out, b.target, ctx, grad_scale);
  BackwardUnits(all, head_.Backward(ctx), ctx, BackwardPart::kFull);
  return loss;
}

double Model::Evaluate(const Batch& batch, nn::Context& ctx, Tensor* output) {
  Batch b = ToDevice(batch);
  Tensor out = ForwardUnits({0, num_units()}, b, Tensor(), ctx);
  const double loss = head_.Forward(out, b.target, ctx);
  if (output) *output = ToHost(out);
  return loss;
}

Tensor Model::Input(const Batch& b) const { return b.ids.defined() ? b.ids : b.x; }

Status CheckTensorParallel(const ModelOptions& o, int tp, bool sequence_parallel) {
  if (sequence_parallel && o.kind != ModelOptions::Kind::kGpt) {
    return Status::InvalidArgument("parallel.sequence_parallel splits a sequence: model gpt only");
  }
  if (tp == 1) return Status::OK();
  const std::string ways = " over parallel.tp " + std::to_string(tp);
  auto divides = [&](int64_t n, const char* field) {
    return n % tp == 0 ? Status::OK()
                       : Status::InvalidArgument(std::string(field) + " " + std::to_string(n) +
                                                 " does not split" + ways);
  };
  switch (o.kind) {
    case ModelOptions::Kind::kMlp:
      return divides(o.mlp_hidden, "model.mlp_hidden");
    case ModelOptions::Kind::kCtr:
      return Status::InvalidArgument("model ctr has no tensor-parallel split (parallel.tp must be 1)");
    case ModelOptions::Kind::kGpt:
      STRATA_RETURN_IF_ERROR(divides(o.heads, "model.heads"));
      if (sequence_parallel) STRATA_RETURN_IF_ERROR(divides(o.context, "model.context"));
      return divides(o.vocab, "model.vocab");
  }
  return Status::OK();
}

Result<std::unique_ptr<Model>> CreateModel(const ModelOptions& o, const ops::Exec& ex,
                                           const UnitSelection& build, nn::TpGroup tp, nn::CpGroup cp) {
  STRATA_RETURN_IF_ERROR(CheckTensorParallel(o, tp.size(), tp.sequence));
  if (cp.split() && o.kind == ModelOptions::Kind::kCtr) {
    return Status::InvalidArgument("parallel.cp " + std::to_string(cp.size()) +
                                   ": ctr's samples have no sequence to split (cp is for gpt and mlp)");
  }
  switch (o.kind) {
    case ModelOptions::Kind::kMlp: return MakeMlpModel(o, ex, build, tp);
    case ModelOptions::Kind::kCtr: return MakeCtrModel(o, ex, build);
    case ModelOptions::Kind::kGpt:
      if (o.width % o.heads != 0) return Status::InvalidArgument("model.width must be divisible by model.heads");
      return MakeGptModel(o, ex, build, tp, cp);
  }
  return Status::Internal("unknown model kind");
}

Result<std::vector<UnitSpec>> ModelUnits(const ModelOptions& o) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, CreateModel(o, ops::Exec::Cpu(), UnitSelection{false}));
  return m->units();
}

}  // namespace strata
