// equivalence.cc: EquivalenceTest (equivalence.h).
#include "tests/integration/equivalence.h"

#include <stdlib.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace strata::testing {

void EquivalenceTest::RunReference(const std::string& job, int steps) {
  steps_ = steps;
  const std::string last = std::to_string(steps);
  std::string log;
  ASSERT_EQ(RunLocal(job, {"sync.mode=local", "train.steps=" + last, "train.metrics_path=" + Rank("local", 0),
                           "train.checkpoint_every=" + last, "train.checkpoint_dir=" + dir_.File("ckpt/local")},
                     &log), 0) << log;
  base_ = Losses(Rank("local", 0));
  ASSERT_EQ(base_.size(), static_cast<size_t>(steps)) << log;
  base_weights_ = ReadCheckpoint(dir_.File("ckpt/local/step-" + last));
  ASSERT_FALSE(base_weights_.empty());
}

void EquivalenceTest::UseWeightsOf(const std::string& job, const std::string& tag, int trainers,
                                   std::vector<std::string> sets) {
  const std::string last = std::to_string(steps_), ckpt = dir_.File("ckpt/" + tag);
  sets.insert(sets.end(), {"train.steps=" + last, "train.checkpoint_every=" + last, "train.checkpoint_dir=" + ckpt,
                           "train.metrics_path=" + Metrics(tag)});
  std::string log;
  ASSERT_EQ(Launch(job, 0, trainers, sets, &log), 0) << log;
  if (!base_.empty()) {
    EXPECT_LT(MaxRelativeDifference(base_, Losses(Rank(tag, 0))), 1e-5) << tag << "\n" << log;
  }
  base_weights_ = ReadCheckpoint(ckpt + "/step-" + last);
  ASSERT_FALSE(base_weights_.empty());
}

void EquivalenceTest::ExpectMatchesReference(const std::string& job, const std::string& tag,
                                             int trainers, int shard_files,
                                             std::vector<std::string> sets) {
  std::string log;
  const std::string last = std::to_string(steps_), ckpt = dir_.File("ckpt/" + tag);
  sets.insert(sets.end(), {"train.steps=" + last, "sync.bucket_mb=0.01", "train.metrics_path=" + Metrics(tag),
                           "train.checkpoint_every=" + last, "train.checkpoint_dir=" + ckpt});
  ASSERT_EQ(Launch(job, 0, trainers, sets, &log), 0) << log;
  const auto losses = Losses(Rank(tag, 0));
  ASSERT_EQ(losses.size(), base_.size()) << log;
  EXPECT_LT(MaxRelativeDifference(base_, losses), 1e-5) << tag << "\n" << log;
  const auto gathered = ReadCheckpoint(ckpt + "/step-" + last);
  const auto manifest = nlohmann::json::parse(ReadFile(ckpt + "/step-" + last + "/manifest.json"));
  EXPECT_EQ(manifest["files"].size(), static_cast<size_t>(shard_files)) << tag << ": one file per (pp, tp) shard";
  ASSERT_EQ(gathered.size(), base_weights_.size()) << tag;
  for (const auto& [name, w] : base_weights_) {
    ASSERT_TRUE(gathered.contains(name)) << tag << ": " << name << " on no shard";
    const auto& got = gathered.at(name);
    ASSERT_EQ(got.size(), w.size()) << name;
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_NEAR(got[i], w[i], weight_abs_tol_ + weight_rel_tol_ * std::abs(w[i])) << tag << ": " << name << "[" << i << "]";
    }
  }
}

}  // namespace strata::testing
