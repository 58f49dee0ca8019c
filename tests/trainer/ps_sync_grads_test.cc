// ps_sync_grads_test.cc: an offload trainer's gradients (trainer/ps_sync_grads.cc) over real
// in-process servers: none between steps; a unit's made, zeroed, at its backward; with bf16 on
// the wire each freed as soon as it is pushed (the push keeps its rounded copy), so a backward
// holds its own unit's fp32 gradients alone; with fp32 freed once the push is acknowledged; and
// the bytes counted back to nothing after every step.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/ps/ps_fixture.h"
#include "trainer/models/model.h"
#include "trainer/ops/ops.h"
#include "trainer/ps_sync.h"

namespace strata {
namespace {

ModelOptions Mlp() {
  ModelOptions o;
  o.kind = ModelOptions::Kind::kMlp;
  o.mlp_in = 9;
  o.mlp_hidden = 27;
  o.mlp_out = 5;
  return o;
}

Batch MakeBatch(int step) {
  Batch b;
  b.samples = 6;
  b.x = ops::NewTensor(ops::Exec::Cpu(), {6, 9});
  b.target = ops::NewTensor(ops::Exec::Cpu(), {6, 5});
  for (int64_t i = 0; i < b.x.numel(); ++i) b.x.data_as<float>()[i] = std::sin(0.3f * i + 0.5f * step);
  for (int64_t i = 0; i < b.target.numel(); ++i) b.target.data_as<float>()[i] = std::cos(0.7f * i + step);
  return b;
}

// Forwards to the PsSync and, before each unit's backward, records which units' gradients exist
// and whether the unit's own start at zero.
class Recorder final : public UnitHooks {
 public:
  Recorder(PsSync& sync, const Model& model) : sync_(sync), model_(model) {}
  void BeforeUnit(int unit, Pass pass, UnitRange walk, const nn::Context& ctx) override {
    sync_.BeforeUnit(unit, pass, walk, ctx);
    if (pass != Pass::kBackward) return;
    std::string defined;
    for (int u = 0; u < model_.num_units(); ++u) {
      for (nn::Parameter* p : model_.UnitParameters(u)) {
        if (!p->grad.defined()) continue;
        defined += p->name + " ";
        if (u != unit) continue;
        for (int64_t i = 0; i < p->grad.numel(); ++i) zeroed_ = zeroed_ && p->grad.data_as<float>()[i] == 0.0f;
      }
    }
    seen.push_back(std::to_string(unit) + ": " + defined);
  }
  void AfterUnit(int unit, Pass pass, const nn::Context& ctx) override { sync_.AfterUnit(unit, pass, ctx); }
  std::vector<std::string> seen;  // "unit: the parameters with a gradient"
  bool zeroed() const { return zeroed_; }

 private:
  PsSync& sync_;
  const Model& model_;
  bool zeroed_ = true;
};

class PsSyncGradsTest : public PsTest, public ::testing::WithParamInterface<DType> {};

TEST_P(PsSyncGradsTest, AUnitsGradientsLiveFromItsBackwardUntilTheirPushIsAcknowledged) {
  const bool bf16 = GetParam() == DType::kBF16;
  Start();
  TrainJob job;
  job.model = Mlp();
  job.sync.mode = SyncOptions::Mode::kOffload;
  job.sync.consistency = Consistency::kAsp;  // the other trainers of the fixture never clock
  job.sync.wire = GetParam();
  job.train.steps = 3;
  auto model_or = CreateModel(job.model, ops::Exec::Cpu());
  ASSERT_TRUE(model_or.ok());
  Model& model = **model_or;
  auto sync_or = PsSync::Create(*clients_[0], model.params(), job, PsSyncOptions{}, nullptr);
  ASSERT_TRUE(sync_or.ok()) << sync_or.status().ToString();
  PsSync& sync = **sync_or;
  sync.SetUnits(model, /*delayed_from=*/-1, /*predict=*/false);
  Recorder rec(sync, model);
  model.set_unit_hooks(&rec);
  // The units with parameters: fc1 first, fc2 last.
  std::vector<int> units;
  int64_t largest = 0, psi = 0;
  for (int u = 0; u < model.num_units(); ++u) {
    int64_t floats = 0;
    for (nn::Parameter* p : model.UnitParameters(u)) floats += *ShapeNumel(p->shard.LocalShape());
    if (!model.UnitParameters(u).empty()) units.push_back(u);
    largest = std::max(largest, floats);
    psi += floats;
  }
  ASSERT_EQ(units.size(), 2u);
  for (auto& p : model.params().params()) EXPECT_FALSE(p->grad.defined()) << p->name << ": none before a step";
  for (int s = 0; s < job.train.steps; ++s) {
    std::vector<Batch> batches = {MakeBatch(s)};
    ASSERT_TRUE(sync.Prepare(batches, s).ok());
    sync.BeginStep(s);
    model.params().ZeroGrad();
    nn::Context ctx(model.exec(), true, 1);
    ctx.set_grad_ready([&](nn::Parameter& p) { sync.GradReady(p); });
    rec.seen.clear();
    const double loss = model.ForwardBackward(batches[0], ctx, 1.0f);
    EXPECT_TRUE(std::isfinite(loss));
    ASSERT_TRUE(sync.Finish(s).ok());
    for (auto& p : model.params().params()) EXPECT_FALSE(p->grad.defined()) << p->name << " after step " << s;
    EXPECT_TRUE(rec.zeroed()) << "a unit's gradients start at zero";
    ASSERT_EQ(rec.seen.size(), static_cast<size_t>(model.num_units()));
    const std::string last = std::to_string(units[1]) + ": ";
    const std::string first = std::to_string(units[0]) + ": ";
    // Walked backward: fc2's unit first, with its own gradients alone.
    auto at = [&](const std::string& prefix) {
      for (const std::string& line : rec.seen) {
        if (line.starts_with(prefix)) return line;
      }
      return std::string();
    };
    EXPECT_EQ(at(last), last + "mlp.fc2.weight mlp.fc2.bias ") << "step " << s;
    if (bf16) {
      // fc2's gradients went with their push (its bf16 copy stays until acknowledged).
      EXPECT_EQ(at(first), first + "mlp.fc1.weight mlp.fc1.bias ") << "step " << s;
    } else {
      // fc2's stay until its push is acknowledged, which may or may not have happened by now.
      EXPECT_TRUE(at(first).starts_with(first + "mlp.fc1.weight mlp.fc1.bias ")) << at(first);
    }
  }
  const int64_t peak = sync.grad_peak_bytes();
  EXPECT_GE(peak, largest * 4) << "at least the larger unit's fp32 gradients";
  // bf16: one unit's fp32 gradients and every push's bf16 copy; fp32: every gradient at worst.
  EXPECT_LE(peak, bf16 ? largest * 4 + psi * 2 : psi * 4);
}

INSTANTIATE_TEST_SUITE_P(Wire, PsSyncGradsTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace strata
