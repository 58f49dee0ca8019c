// mlp.cc: the regression MLP, in -> hidden -> out with ReLU (the seeds' 1024 -> 4096 -> 1024),
// as three units (fc1, act, fc2) so that two pipeline stages can split it.
#include "trainer/models/zoo.h"

namespace strata {
namespace {

class MlpModel final : public Model {
 public:
  MlpModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build)
      : Model(ex, o.seed, nn::LossKind::kMse) {
    AddUnit({"mlp.fc1", o.mlp_in * o.mlp_hidden + o.mlp_hidden, o.mlp_hidden}, build,
            [&] { return std::make_unique<nn::Linear>(reg_, "mlp.fc1", o.mlp_in, o.mlp_hidden); });
    AddUnit({"mlp.act", 0, o.mlp_hidden}, build,
            [&] { return std::make_unique<nn::Activation>("mlp.act", nn::ActivationKind::kRelu); });
    AddUnit({"mlp.fc2", o.mlp_hidden * o.mlp_out + o.mlp_out, o.mlp_out}, build,
            [&] { return std::make_unique<nn::Linear>(reg_, "mlp.fc2", o.mlp_hidden, o.mlp_out); });
    for (auto& u : units_) {
      if (u) u->set_recompute(o.recompute);
    }
  }
  Shape LeadingShape(const Batch& b) const override { return {b.x.size(0)}; }
};

}  // namespace

std::unique_ptr<Model> MakeMlpModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build) {
  return std::make_unique<MlpModel>(o, ex, build);
}

}  // namespace strata
