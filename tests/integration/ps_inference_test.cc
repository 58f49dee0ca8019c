// ps_inference_test.cc: parameter-server models served from another number of servers than
// trained them (strata-launch, real processes on loopback): ctr trained on 2 servers writes its
// tables into its checkpoint; served from 1 and from 3 servers (each loading the keys it holds
// from every old shard) it evaluates to the training cluster's own AUC and loss within 1e-6, and
// the servers take no push and add no row. Bad checkpoints are refused naming the file.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>

#include "tests/integration/launch_fixture.h"
#include "tests/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// field_vocab 300 over 30 steps of 64 samples leaves ids the training never saw but the
// held-out set holds: those rows are absent from the checkpoint.
const char* kCtr =
    "model: {kind: ctr, fields: 8, field_vocab: 300, embed_dim: 8, ctr_hidden: 32}\n"
    "data: {kind: click_log, eval_samples: 4000}\n"
    "optimizer: {kind: adamw, lr: 0.01}\n"
    "train: {steps: 30, batch_size: 64, log_every: 10, progress: false}\n"
    "sync: {mode: ps, consistency: asp}\n"
    "server: {store: {kind: memory}}\n";

// The servers' final statistics lines of a run.
std::vector<std::string> FinalStats(const std::string& log) {
  std::vector<std::string> out;
  const std::regex line("final stats: ([^\\n]*)");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

// The sum over `lines` of the first number each one's `pattern` captures.
uint64_t Sum(const std::vector<std::string>& lines, const std::regex& pattern) {
  uint64_t total = 0;
  for (const std::string& l : lines) {
    for (auto it = std::sregex_iterator(l.begin(), l.end(), pattern); it != std::sregex_iterator(); ++it) {
      total += std::stoull((*it)[1]);
    }
  }
  return total;
}

class PsInferenceTest : public testing::LaunchFixture {
 protected:
  // Trains on 2 servers and 2 trainers with a checkpoint at the last step; returns the
  // training cluster's final evaluation (rank 0's metrics line with "auc").
  nlohmann::json Train(const std::string& mode, int steps, std::string* log) {
    job_ = Job("ctr-" + mode, kCtr);
    ckpt_ = dir_.File("ckpt-" + mode);
    const std::vector<std::string> sets = {"sync.mode=" + mode, "train.steps=" + std::to_string(steps),
                                           "train.checkpoint_dir=" + ckpt_,
                                           "train.checkpoint_every=" + std::to_string(steps),
                                           "train.metrics_path=" + Metrics("train-" + mode)};
    EXPECT_EQ(Launch(job_, 2, 2, sets, log), 0) << *log;
    nlohmann::json trained;
    std::ifstream in(Rank("train-" + mode, 0));
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("auc")) trained = j;
    }
    return trained;
  }

  // Evaluates checkpoint `ckpt` on `servers` and `trainers`; returns the exit code and the
  // evaluation (null on failure).
  int Serve(const std::string& mode, const std::string& ckpt, int servers, int trainers, const std::string& tag,
            std::string* log, nlohmann::json* eval, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> sets = {"sync.mode=" + mode, "infer.mode=eval", "infer.checkpoint=" + ckpt,
                                     "infer.output_path=" + dir_.File(tag + ".jsonl")};
    sets.insert(sets.end(), extra.begin(), extra.end());
    const int code = Launch(job_, servers, trainers, sets, log);
    std::ifstream in(dir_.File(tag + ".jsonl"));
    std::string line;
    if (code == 0 && std::getline(in, line)) *eval = nlohmann::json::parse(line, nullptr, false);
    return code;
  }

  // Serves the trained checkpoint from 1 server (1 trainer) and from 3 (2 trainers): the same
  // AUC and loss as the training cluster's, no push, no row added, every row loaded once.
  void ServeFromOneAndThree(const std::string& mode, const nlohmann::json& trained, uint64_t trained_rows) {
    ASSERT_TRUE(trained.is_object());
    EXPECT_GT(trained["auc"].get<double>(), 0.55) << trained;
    uint64_t loaded_by_one = 0;
    for (const auto& [servers, trainers] : {std::pair{1, 1}, std::pair{3, 2}}) {
      const std::string tag = mode + "-on-" + std::to_string(servers);
      std::string log;
      nlohmann::json eval;
      ASSERT_EQ(Serve(mode, ckpt_, servers, trainers, tag, &log, &eval), 0) << log;
      ASSERT_TRUE(eval.is_object()) << log;
      EXPECT_NEAR(eval["auc"].get<double>(), trained["auc"].get<double>(), 1e-6) << tag;
      EXPECT_NEAR(eval["eval_loss"].get<double>(), trained["eval_loss"].get<double>(), 1e-6) << tag;
      EXPECT_EQ(eval["eval_samples"], trained["eval_samples"]) << tag;
      const std::vector<std::string> stats = FinalStats(log);
      ASSERT_EQ(stats.size(), static_cast<size_t>(servers)) << log;
      for (const std::string& s : stats) {
        EXPECT_NE(s.find("serving "), std::string::npos) << s;
        EXPECT_NE(s.find(" 0 pushes"), std::string::npos) << s;
        EXPECT_NE(s.find("rows added since loading 0"), std::string::npos) << s;
        EXPECT_EQ(s.find(" 0 pulls"), std::string::npos) << s;  // the evaluation went through them
      }
      const uint64_t loaded = Sum(stats, std::regex("\\(([0-9]+) rows loaded\\)"));
      if (servers == 1) loaded_by_one = loaded;
      EXPECT_EQ(loaded, loaded_by_one) << tag << ": every row loaded by exactly one server";
      // The held-out set read rows the checkpoint lacks (the training cluster's evaluation
      // created them; inference answered them without storing them).
      EXPECT_LT(loaded, trained_rows) << tag;
    }
    EXPECT_GT(loaded_by_one, 0u);
  }

  std::string job_, ckpt_;
};

// The rows the training servers held at the end (after their own evaluation).
uint64_t TrainedRows(const std::string& log) {
  return Sum(FinalStats(log), std::regex("; [^;]+?: ([0-9]+) rows,"));
}

TEST_F(PsInferenceTest, CtrTrainedOnTwoServersServesFromOneAndThree) {
  std::string log;
  const nlohmann::json trained = Train("ps", 30, &log);
  ASSERT_TRUE(trained.is_object()) << log;
  for (const char* f : {"server-0-of-2.tables", "server-1-of-2.tables"}) {
    EXPECT_TRUE(fs::exists(ckpt_ + "/step-30/ps/" + f)) << f;
  }
  ServeFromOneAndThree("ps", trained, TrainedRows(log));
}

// hybrid: the MLP comes from the trainers' checkpoint file, the embeddings from the servers.
TEST_F(PsInferenceTest, HybridCtrServesItsEmbeddingsFromOneAndThreeServers) {
  std::string log;
  const nlohmann::json trained = Train("hybrid", 30, &log);
  ASSERT_TRUE(trained.is_object()) << log;
  ServeFromOneAndThree("hybrid", trained, TrainedRows(log));
}

TEST_F(PsInferenceTest, BadServerCheckpointsAreRefusedNamingTheFile) {
  std::string log;
  ASSERT_TRUE(Train("ps", 10, &log).is_object()) << log;
  const std::string step = ckpt_ + "/step-10";
  // A copy of the checkpoint, damaged by `damage`, must be refused with a message holding `want`.
  auto refused = [&](const std::string& tag, const std::function<std::string(const std::string& ps)>& damage,
                     const std::vector<std::string>& extra = {}) {
    const std::string copy = dir_.File("bad-" + tag);
    fs::copy(step, copy, fs::copy_options::recursive);
    const std::string want = damage(copy + "/ps");
    nlohmann::json eval;
    EXPECT_NE(Serve("ps", copy, 3, 1, tag, &log, &eval, extra), 0) << tag << "\n" << log;
    EXPECT_NE(log.find(want), std::string::npos) << tag << ": no \"" << want << "\" in\n" << log;
    EXPECT_EQ(log.find("inference from "), std::string::npos) << tag << ": nothing may be evaluated\n" << log;
  };
  auto first_rows = [](const std::string& ps) {
    std::vector<std::string> rows;
    for (const auto& e : fs::directory_iterator(ps)) {
      if (e.path().string().ends_with(".rows") && e.path().filename().string().starts_with("server-1-of-2.")) {
        rows.push_back(e.path().string());
      }
    }
    std::sort(rows.begin(), rows.end());
    return rows.at(0);
  };
  refused("missing", [](const std::string& ps) {
    fs::remove(ps + "/server-1-of-2.tables");
    return ps + "/server-1-of-2.tables: missing";
  });
  refused("missing-rows", [&](const std::string& ps) {
    const std::string rows = first_rows(ps);
    fs::remove(rows);
    return rows + ": missing";
  });
  refused("corrupt", [&](const std::string& ps) {
    const std::string rows = first_rows(ps);
    std::fstream f(rows, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x5a');
    return "export file " + rows + ": ";
  });
  refused("no-tables", [](const std::string& ps) {
    fs::remove_all(ps);
    return ps + ": no server tables there";
  });
  // Another model's tables: the trainers' embedding is not the one the servers serve.
  refused("other-model", [](const std::string&) { return "the served checkpoint"; }, {"model.embed_dim=4"});
}

}  // namespace
}  // namespace strata
