// train.precision bf16 on the CPU (bf16 matmuls, activations saved for backward in bf16) against
// fp32 on the same job: the losses within bf16's tolerance at every step, the saved activations
// in about half the bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "trainer/trainer.h"

namespace strata {
namespace {

TrainJob SmallGpt() {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kGpt;
  job.model.layers = 2;
  job.model.heads = 2;
  job.model.width = 32;
  job.model.context = 32;
  job.data.kind = DataOptions::Kind::kText;
  job.data.path = "/usr/share/common-licenses/GPL-3";
  job.data.eval_samples = 64;
  job.optimizer.lr = 0.003;
  job.train.steps = 20;
  job.train.batch_size = 8;
  job.train.progress = false;
  return job;
}

TrainJob SmallMlp() {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kMlp;
  job.model.mlp_in = 32;
  job.model.mlp_hidden = 256;
  job.model.mlp_out = 32;
  job.data.kind = DataOptions::Kind::kRegression;
  job.data.latent_dim = 8;
  job.data.eval_samples = 128;
  job.optimizer.lr = 0.003;
  job.train.steps = 20;
  job.train.batch_size = 64;
  job.train.progress = false;
  return job;
}

TrainSummary Train(TrainJob job, DType precision) {
  job.train.precision = precision;
  auto trainer = Trainer::Create(job);
  EXPECT_TRUE(trainer.ok()) << trainer.status().ToString();
  if (!trainer.ok()) return {};
  auto summary = (*trainer)->Run();
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  return summary.ok() ? *summary : TrainSummary{};
}

// The bound: bf16 rounds each matmul input and saved activation to 8 significant bits (half an
// ulp is 2^-9 relative); a step's loss moves with those roundings and with every earlier step's
// update computed from them. Over 20 steps the losses stay within 0.5% of fp32's; not equal (the
// bf16 path ran), and the saved activations take between 50% and 55% of fp32's bytes (the
// norms' statistics and the embeddings' ids stay as they are).
void ExpectBf16Tracks(const TrainJob& job, const char* name) {
  const TrainSummary fp32 = Train(job, DType::kF32), bf16 = Train(job, DType::kBF16);
  ASSERT_EQ(fp32.losses.size(), bf16.losses.size());
  ASSERT_EQ(fp32.losses.size(), 20u);
  double worst = 0;
  for (size_t i = 0; i < fp32.losses.size(); ++i) {
    worst = std::max(worst, std::abs(bf16.losses[i] - fp32.losses[i]) / std::abs(fp32.losses[i]));
  }
  const int64_t b16 = bf16.pipeline.peak_saved_bytes, b32 = fp32.pipeline.peak_saved_bytes;
  const double saved = static_cast<double>(b16) / static_cast<double>(b32);
  std::cout << name << ": bf16 loss within " << worst << " of fp32 (relative, worst of 20 steps); final "
            << bf16.losses.back() << " vs " << fp32.losses.back() << "; saved activations " << b16
            << " vs " << b32 << " bytes (" << saved << ")\n";
  EXPECT_LE(worst, 5e-3);
  EXPECT_GT(worst, 0.0);
  EXPECT_GE(saved, 0.5);
  EXPECT_LE(saved, 0.55);
}

TEST(PrecisionTest, Bf16GptTracksFp32) {
  if (!std::filesystem::exists(SmallGpt().data.path)) GTEST_SKIP() << SmallGpt().data.path << " is not installed";
  ExpectBf16Tracks(SmallGpt(), "gpt");
}

TEST(PrecisionTest, Bf16MlpTracksFp32) { ExpectBf16Tracks(SmallMlp(), "mlp"); }

}  // namespace
}  // namespace strata
