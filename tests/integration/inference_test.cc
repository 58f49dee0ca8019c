// inference_test.cc: inference on another device count than training (strata-launch, real
// trainer processes on loopback): a gpt checkpoint written under (dp, tp, pp) = (2, 2, 2) is
// served under tp 2, tp 4, pp 2, tp 2 x pp 2 and dp 2 x tp 2, and by one process; every layout
// generates the same greedy tokens and the same seeded samples, with logits equal to the one
// process's within 1e-5 of each row's scale; evaluation gives the same loss; a tp that does not
// divide the heads is refused naming both numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/integration/launch_fixture.h"
#include "tests/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

const char* kGpt =
    "model: {kind: gpt, layers: 2, heads: 4, width: 32, context: 32}\n"
    "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 256}\n"
    "optimizer: {kind: adamw, lr: 0.003}\n"
    "train: {steps: 12, batch_size: 8, log_every: 4, progress: false}\n"
    "sync: {mode: allreduce}\n";

class InferenceTest : public testing::LaunchFixture {
 protected:
  void SetUp() override {
    job_ = Job("gpt", kGpt);
    ckpt_ = dir_.File("ckpt");
    std::string log;
    // Trained under dp 2 x tp 2 x pp 2, one checkpoint at the end.
    ASSERT_EQ(Launch(job_, 0, 8, {"parallel.tp=2", "parallel.pp=2", "train.checkpoint_dir=" + ckpt_,
                                  "train.checkpoint_every=12"}, &log), 0) << log;
    ASSERT_TRUE(fs::exists(ckpt_ + "/step-12/manifest.json")) << log;
  }

  std::vector<std::string> Generate(const std::string& tag, bool greedy) {
    return {"infer.mode=generate", "infer.checkpoint=" + ckpt_,
            R"(infer.prompts=["The ", "strata is a", "x", "Pipeline parallelism"])", "infer.max_new_tokens=8",
            "infer.save_logits=true", std::string("infer.greedy=") + (greedy ? "true" : "false"), "infer.top_k=20",
            "infer.temperature=0.8", "infer.seed=5", "infer.output_path=" + dir_.File(tag + "-{rank}.jsonl")};
  }

  // Every prompt's result, from whichever rank wrote it.
  std::map<int, nlohmann::json> Results(const std::string& tag) {
    std::map<int, nlohmann::json> out;
    for (const auto& e : fs::directory_iterator(dir_.File(""))) {
      const std::string name = e.path().filename().string();
      if (!name.starts_with(tag + "-") || !name.ends_with(".jsonl")) continue;
      std::ifstream in(e.path());
      for (std::string line; std::getline(in, line);) {
        auto j = nlohmann::json::parse(line);
        out[j["prompt_index"].get<int>()] = j;
      }
    }
    return out;
  }

  void ExpectSame(const std::map<int, nlohmann::json>& want, const std::map<int, nlohmann::json>& got,
                  const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (const auto& [i, w] : want) {
      const nlohmann::json& g = got.at(i);
      EXPECT_EQ(g["tokens"], w["tokens"]) << what << " prompt " << i;
      ASSERT_EQ(g["logits"].size(), w["logits"].size()) << what << " prompt " << i;
      for (size_t s = 0; s < w["logits"].size(); ++s) {
        const auto a = g["logits"][s].get<std::vector<float>>(), b = w["logits"][s].get<std::vector<float>>();
        ASSERT_EQ(a.size(), 256u);
        float scale = 0, diff = 0;
        for (size_t v = 0; v < b.size(); ++v) {
          scale = std::max(scale, std::abs(b[v]));
          diff = std::max(diff, std::abs(a[v] - b[v]));
        }
        EXPECT_LE(diff, 1e-5f * scale) << what << " prompt " << i << " step " << s;
      }
    }
  }

  std::string job_, ckpt_;
};

TEST_F(InferenceTest, GptCheckpointOf2x2x2ServedUnderEveryLayoutGeneratesTheSame) {
  std::string log;
  ASSERT_EQ(RunLocal(job_, [&] {
              auto s = Generate("one", true);
              s.push_back("sync.mode=local");
              return s;
            }(), &log), 0) << log;
  const auto one = Results("one");
  ASSERT_EQ(one.size(), 4u) << log;
  for (const auto& [i, r] : one) EXPECT_EQ(r["tokens"].size(), 8u) << i;
  // A stop token ends each sequence at its first occurrence (and is kept); the others run on.
  const int64_t stop = one.at(0)["tokens"][0].get<int64_t>();
  ASSERT_EQ(RunLocal(job_, [&] {
              auto s = Generate("stop", true);
              s.insert(s.end(), {"sync.mode=local", "infer.stop=" + std::to_string(stop)});
              return s;
            }(), &log), 0) << log;
  for (const auto& [i, r] : Results("stop")) {
    const auto all = one.at(i)["tokens"].get<std::vector<int64_t>>();
    const auto at = std::find(all.begin(), all.end(), stop);
    const std::vector<int64_t> want(all.begin(), at == all.end() ? all.end() : at + 1);
    EXPECT_EQ(r["tokens"].get<std::vector<int64_t>>(), want) << "prompt " << i;
  }
  struct Layout {
    const char* tag;
    int dp, tp, pp;
  };
  for (const Layout& l : {Layout{"tp2", 1, 2, 1}, Layout{"tp4", 1, 4, 1}, Layout{"pp2", 1, 1, 2},
                          Layout{"tp2pp2", 1, 2, 2}, Layout{"dp2tp2", 2, 2, 1}}) {
    auto sets = Generate(l.tag, true);
    sets.insert(sets.end(), {"parallel.dp=" + std::to_string(l.dp), "parallel.tp=" + std::to_string(l.tp),
                             "parallel.pp=" + std::to_string(l.pp)});
    ASSERT_EQ(Launch(job_, 0, l.dp * l.tp * l.pp, sets, &log), 0) << l.tag << "\n" << log;
    ExpectSame(one, Results(l.tag), l.tag);
  }
}

TEST_F(InferenceTest, SeededSamplingDrawsTheSameTokensUnderTp2Pp2) {
  std::string log;
  auto local = Generate("sample-one", false);
  local.push_back("sync.mode=local");
  ASSERT_EQ(RunLocal(job_, local, &log), 0) << log;
  auto sets = Generate("sample-tp2pp2", false);
  sets.insert(sets.end(), {"parallel.tp=2", "parallel.pp=2"});
  ASSERT_EQ(Launch(job_, 0, 4, sets, &log), 0) << log;
  const auto one = Results("sample-one");
  ExpectSame(one, Results("sample-tp2pp2"), "sampled tp2 x pp2");
  // Sampling is not greedy: some step picked a token that was not the argmax.
  bool differs = false;
  for (const auto& [i, r] : one) {
    for (size_t s = 0; s < r["tokens"].size(); ++s) {
      const auto l = r["logits"][s].get<std::vector<float>>();
      differs |= r["tokens"][s].get<int64_t>() != std::max_element(l.begin(), l.end()) - l.begin();
    }
  }
  EXPECT_TRUE(differs);
}

TEST_F(InferenceTest, EvaluationGivesTheSameLossUnderTp2Pp2AndATpThatDoesNotSplitTheHeadsIsRefused) {
  std::string log;
  const std::vector<std::string> eval = {"infer.mode=eval", "infer.checkpoint=" + ckpt_};
  auto local = eval;
  local.insert(local.end(), {"sync.mode=local", "infer.output_path=" + dir_.File("eval-one.jsonl")});
  ASSERT_EQ(RunLocal(job_, local, &log), 0) << log;
  auto sets = eval;
  sets.insert(sets.end(), {"parallel.tp=2", "parallel.pp=2", "infer.output_path=" + dir_.File("eval-tp2pp2-{rank}.jsonl")});
  ASSERT_EQ(Launch(job_, 0, 4, sets, &log), 0) << log;
  auto loss = [&](const std::string& file) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);
    return nlohmann::json::parse(line)["eval_loss"].get<double>();
  };
  const double one = loss(dir_.File("eval-one.jsonl")), split = loss(dir_.File("eval-tp2pp2-0.jsonl"));
  EXPECT_GT(one, 0);
  EXPECT_NEAR(split, one, 1e-5 * one);
  auto bad = eval;
  bad.push_back("parallel.tp=3");
  EXPECT_NE(Launch(job_, 0, 3, bad, &log), 0);
  EXPECT_NE(log.find("model.heads 4 does not split over parallel.tp 3"), std::string::npos) << log;
}

// ctr trained on 2 all-reduce replicas evaluates its held-out set to the same AUC and loss on
// one process from the checkpoint (the training run's own final evaluation is the reference).
class CtrInferenceTest : public testing::LaunchFixture {};

TEST_F(CtrInferenceTest, CtrOfTwoReplicasEvaluatesToTheSameAucOnOneProcess) {
  const std::string job = Job("ctr",
      "model: {kind: ctr, fields: 8, field_vocab: 300, embed_dim: 8, ctr_hidden: 32}\n"
      "data: {kind: click_log, eval_samples: 4000}\n"
      "optimizer: {kind: adamw, lr: 0.01}\n"
      "train: {steps: 40, batch_size: 64, log_every: 20, progress: false}\n"
      "sync: {mode: allreduce}\n");
  const std::string ckpt = dir_.File("ckpt");
  std::string log;
  ASSERT_EQ(Launch(job, 0, 2, {"train.checkpoint_dir=" + ckpt, "train.checkpoint_every=40",
                               "train.metrics_path=" + Metrics("train")}, &log), 0) << log;
  nlohmann::json trained;
  {
    std::ifstream in(Rank("train", 0));
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("auc")) trained = j;
    }
  }
  ASSERT_TRUE(trained.is_object()) << log;
  ASSERT_EQ(RunLocal(job, {"sync.mode=local", "infer.mode=eval", "infer.checkpoint=" + ckpt,
                           "infer.output_path=" + dir_.File("eval.jsonl")}, &log), 0) << log;
  std::ifstream in(dir_.File("eval.jsonl"));
  std::string line;
  std::getline(in, line);
  const auto got = nlohmann::json::parse(line);
  EXPECT_GT(trained["auc"].get<double>(), 0.6);
  EXPECT_NEAR(got["auc"].get<double>(), trained["auc"].get<double>(), 1e-6) << line;
  EXPECT_NEAR(got["eval_loss"].get<double>(), trained["eval_loss"].get<double>(), 1e-6) << line;
}

}  // namespace
}  // namespace strata
