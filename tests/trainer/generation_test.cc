// generation_test.cc: incremental decoding with a KV cache against the whole-sequence forward
// (a batch of prompts of different lengths, right-padded in the prefill, then one token a step
// at each row's own position: every step's logits equal the full forward's at that position),
// and the token pickers (greedy, top-k, top-p, the draw's role).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "trainer/models/model.h"
#include "trainer/ops/ops.h"
#include "trainer/sampling.h"

namespace strata {
namespace {

ModelOptions Gpt() {
  ModelOptions o;
  o.kind = ModelOptions::Kind::kGpt;
  o.layers = 2;
  o.heads = 4;
  o.width = 32;
  o.context = 16;
  return o;
}

Tensor Ids(const std::vector<std::vector<int32_t>>& rows, int64_t width) {
  Tensor t = ops::NewZeros(ops::Exec::Cpu(), {static_cast<int64_t>(rows.size()), width}, DType::kI32);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t j = 0; j < rows[r].size() && static_cast<int64_t>(j) < width; ++j) {
      t.data_as<int32_t>()[static_cast<int64_t>(r) * width + static_cast<int64_t>(j)] = rows[r][j];
    }
  }
  return t;
}

// The model's logits [T, V] for one whole sequence.
std::vector<float> FullLogits(Model& model, const std::vector<int32_t>& seq) {
  nn::Context ctx(model.exec(), false, 0);
  Batch b;
  b.ids = Ids({seq}, static_cast<int64_t>(seq.size()));
  Tensor out = model.ForwardUnits({0, model.num_units()}, b, Tensor(), ctx);
  return std::vector<float>(out.data_as<float>(), out.data_as<float>() + out.numel());
}

TEST(Generation, KvCacheDecodingGivesTheFullForwardsLogits) {
  auto model_or = CreateModel(Gpt(), ops::Exec::Cpu());
  ASSERT_TRUE(model_or.ok());
  Model& model = **model_or;
  const int64_t vocab = 256;
  std::vector<std::vector<int32_t>> seqs = {{72, 101, 108, 108, 111}, {97, 98}, {10, 20, 30, 40, 50, 60, 70}};
  std::vector<size_t> lengths;
  size_t longest = 0;
  for (const auto& s : seqs) {
    lengths.push_back(s.size());
    longest = std::max(longest, s.size());
  }
  nn::DecodeState d;
  d.capacity = 16;
  d.starts.assign(seqs.size(), 0);
  Tensor ids = Ids(seqs, static_cast<int64_t>(longest));
  for (int step = 0; step < 6; ++step) {
    nn::Context ctx(model.exec(), false, 0);
    ctx.set_decode(&d);
    Batch b;
    b.ids = ids;
    Tensor out = model.ForwardUnits({0, model.num_units()}, b, Tensor(), ctx);
    const int64_t n = out.size(1);
    for (size_t r = 0; r < seqs.size(); ++r) {
      const int64_t pos = step == 0 ? static_cast<int64_t>(lengths[r]) - 1 : n - 1;
      const float* got = out.data_as<float>() + (static_cast<int64_t>(r) * n + pos) * vocab;
      const std::vector<float> want = FullLogits(model, seqs[r]);
      const float* w = want.data() + (static_cast<int64_t>(seqs[r].size()) - 1) * vocab;
      for (int64_t v = 0; v < vocab; ++v) {
        ASSERT_NEAR(got[v], w[v], 1e-5 * (1 + std::abs(w[v]))) << "row " << r << " step " << step << " logit " << v;
      }
      // Greedy's token joins the row.
      seqs[r].push_back(static_cast<int32_t>(std::max_element(got, got + vocab) - got));
    }
    // The next call: each row's newest token at its own position.
    ids = ops::NewTensor(ops::Exec::Cpu(), {static_cast<int64_t>(seqs.size()), 1}, DType::kI32);
    for (size_t r = 0; r < seqs.size(); ++r) {
      d.starts[r] = static_cast<int64_t>(seqs[r].size()) - 1;
      ids.data_as<int32_t>()[r] = seqs[r].back();
    }
  }
}

TEST(Generation, PastTheContextIsAnErrorNamingIt) {
  auto model_or = CreateModel(Gpt(), ops::Exec::Cpu());
  ASSERT_TRUE(model_or.ok());
  nn::DecodeState d;
  d.capacity = 16;
  d.starts = {15};
  nn::Context ctx((*model_or)->exec(), false, 0);
  ctx.set_decode(&d);
  Batch b;
  b.ids = Ids({{1, 2}}, 2);
  EXPECT_DEATH((*model_or)->ForwardUnits({0, (*model_or)->num_units()}, b, Tensor(), ctx), "context");
}

TEST(Sampling, GreedyTopKTopPAndTheDraw) {
  const std::vector<float> logits = {0.0f, 2.0f, 2.0f, 1.0f, -5.0f};
  InferOptions o;
  EXPECT_EQ(PickToken(logits.data(), 5, o, 0.7), 1) << "greedy: argmax, the lower index on a tie";
  o.greedy = false;
  o.top_k = 1;
  for (double draw : {0.0, 0.5, 0.999}) EXPECT_EQ(PickToken(logits.data(), 5, o, draw), 1);
  o.top_k = 0;
  o.top_p = 1e-3;  // the likeliest token alone reaches it
  EXPECT_EQ(PickToken(logits.data(), 5, o, 0.999), 1);
  o.top_p = 1.0;
  // Probabilities e^{0,2,2,1,-5} / Z in the order 1, 2, 3, 0, 4: a draw past the first three
  // tokens' share lands on 0.
  const double z = 1 + 2 * std::exp(2.0) + std::exp(1.0) + std::exp(-5.0);
  EXPECT_EQ(PickToken(logits.data(), 5, o, 0.0), 1);
  EXPECT_EQ(PickToken(logits.data(), 5, o, (2 * std::exp(2.0) + std::exp(1.0) + 0.5) / z), 0);
  EXPECT_EQ(PickToken(logits.data(), 5, o, 0.99999999), 4);
  // Top-k 2 keeps 1 and 2 only, whatever the draw.
  o.top_k = 2;
  for (double draw : {0.0, 0.3, 0.6, 0.99}) {
    const int64_t t = PickToken(logits.data(), 5, o, draw);
    EXPECT_TRUE(t == 1 || t == 2) << draw;
  }
  // A high temperature flattens: the draw 0.7 lands on token 2 at temperature 1 (cumulative
  // shares .40, .80, .95, ...) and on token 0 at 100 (nearly uniform: .20, .41, .61, .81, 1).
  o.top_k = 0;
  EXPECT_EQ(PickToken(logits.data(), 5, o, 0.7), 2);
  o.temperature = 100;
  EXPECT_EQ(PickToken(logits.data(), 5, o, 0.7), 0);
}

}  // namespace
}  // namespace strata
