// recompute_test.cc: activation recomputation (parallel.recompute) changes memory, never the
// result: gpt's gradients with selective (attention core) and full (every unit) recompute are
// bit for bit those without, and the saved activations shrink.
#include <gtest/gtest.h>

#include <cstring>

#include "trainer/data.h"
#include "trainer/models/model.h"

namespace strata {
namespace {

struct Outcome {
  int64_t saved_bytes = 0;  // after forward
  std::vector<std::vector<float>> grads;
  double loss = 0;
};

Outcome ForwardBackward(const std::string& mode) {
  ModelOptions o;
  o.kind = ModelOptions::Kind::kGpt;
  o.layers = 2;
  o.width = 32;
  o.heads = 2;
  o.context = 32;
  o.recompute_attention_core = mode == "selective";
  auto model = CreateModel(o, ops::Exec::Cpu());
  STRATA_CHECK(model.ok());
  Model& m = **model;
  if (mode == "full") {
    for (int u = 0; u < m.num_units(); ++u) m.unit(u).set_recompute(true);
  }
  Batch b;
  b.ids = ops::NewTensor(ops::Exec::Cpu(), {4, 32}, DType::kI32);
  b.target = ops::NewTensor(ops::Exec::Cpu(), {4, 32}, DType::kI32);
  for (int64_t i = 0; i < 4 * 32; ++i) {
    b.ids.data_as<int32_t>()[i] = static_cast<int32_t>((i * 37) % 256);
    b.target.data_as<int32_t>()[i] = static_cast<int32_t>((i * 91 + 5) % 256);
  }
  nn::Context ctx(m.exec(), true, 1);
  Outcome r;
  const UnitRange all{0, m.num_units()};
  Tensor out = m.ForwardUnits(all, b, Tensor(), ctx);
  r.saved_bytes = ctx.saved_bytes();
  r.loss = m.loss_head().Forward(out, b.target, ctx);
  m.BackwardUnits(all, m.loss_head().Backward(ctx), ctx, BackwardPart::kFull);
  for (auto& p : m.params().params()) {
    r.grads.emplace_back(p->grad.data_as<float>(), p->grad.data_as<float>() + p->grad.numel());
  }
  return r;
}

TEST(RecomputeTest, SelectiveAndFullGiveTheSameGradientsWithLessMemory) {
  const Outcome none = ForwardBackward("none"), selective = ForwardBackward("selective"),
            full = ForwardBackward("full");
  for (const Outcome* r : {&selective, &full}) {
    EXPECT_EQ(r->loss, none.loss);
    ASSERT_EQ(r->grads.size(), none.grads.size());
    for (size_t i = 0; i < none.grads.size(); ++i) {
      ASSERT_EQ(0, std::memcmp(r->grads[i].data(), none.grads[i].data(), none.grads[i].size() * sizeof(float))) << i;
    }
  }
  // Selective drops the [B, H, T, T] probabilities of both blocks: 2 * 4 * 2 * 32 * 32 floats.
  EXPECT_EQ(none.saved_bytes - selective.saved_bytes, 2 * 4 * 2 * 32 * 32 * 4);
  EXPECT_LT(full.saved_bytes, selective.saved_bytes);
}

}  // namespace
}  // namespace strata
