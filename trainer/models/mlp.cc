// mlp.cc: the regression MLP, in -> hidden -> out with ReLU (the seeds' 1024 -> 4096 -> 1024),
// as three units (fc1, act, fc2) so that two pipeline stages can split it.
#include "trainer/models/zoo.h"
#include "trainer/nn/tensor_parallel.h"

namespace strata {
namespace {

class MlpModel final : public Model {
 public:
  // The seeds' Paddle example over tp: fc1 (w0) split by columns, fc2 (w1) by rows, so the
  // hidden activation between them is a slice of its features on each rank.
  MlpModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build, nn::TpGroup tp)
      : Model(ex, o.seed, nn::LossKind::kMse, tp) {
    const int64_t hidden = o.mlp_hidden / tp.size();
    AddUnit({"mlp.fc1", o.mlp_in * hidden + hidden, hidden}, build, [&] {
      auto fc1 = std::make_unique<nn::ColumnParallelLinear>(reg_, "mlp.fc1", o.mlp_in, o.mlp_hidden, tp);
      fc1->set_input_grad(false);  // its input is the data: no dL/dx, and no all-reduce of it
      return fc1;
    });
    AddUnit({"mlp.act", 0, hidden}, build,
            [&] { return std::make_unique<nn::Activation>("mlp.act", nn::ActivationKind::kRelu); });
    AddUnit({"mlp.fc2", hidden * o.mlp_out + o.mlp_out, o.mlp_out}, build, [&] {
      return std::make_unique<nn::RowParallelLinear>(reg_, "mlp.fc2", o.mlp_hidden, o.mlp_out, tp);
    });
    for (auto& u : units_) {
      if (u) u->set_recompute(o.recompute);
    }
  }
  // [N], or [N, S] for samples of S tokens (data.seq_len).
  Shape LeadingShape(const Batch& b) const override {
    Shape lead = b.x.shape();
    lead.pop_back();
    return lead;
  }
};

}  // namespace

std::unique_ptr<Model> MakeMlpModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build,
                                    nn::TpGroup tp) {
  return std::make_unique<MlpModel>(o, ex, build, tp);
}

}  // namespace strata
