// device_model_test.cc: planning for a stated device (trainer/auto/device_model.h), no timings:
// collectives take the NVLink or the InfiniBand fit by where their ranks sit; the device file's
// errors name the field; a block's stated costs are the FLOP and byte formulas the header
// gives; the mixed-precision memory formulas; and GPT-3 13B on 64 stated H100s, where pure data
// parallelism cannot fit and every ranked plan fits.
#include "trainer/auto/device_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "trainer/auto/planner.h"
#include "trainer/models/model.h"

namespace strata {
namespace {

using Recompute = ParallelOptions::Recompute;

std::string ExampleDevice() { return std::string(STRATA_SOURCE_DIR) + "/examples/auto/h100_dgx.yaml"; }

TrainJob Gpt3(int64_t layers, int64_t width, int64_t heads, int64_t batch) {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kGpt;
  job.model.layers = layers;
  job.model.width = width;
  job.model.heads = heads;
  job.model.context = 2048;
  job.model.vocab = 51200;
  job.train.batch_size = batch;
  job.optimizer.kind = OptimizerOptions::Kind::kAdamW;
  job.sync.mode = SyncOptions::Mode::kAllReduce;
  return job;
}

TEST(CommTopology, GroupsInsideANodeTakeTheIntraNodeLinkAndOthersTheInterNodeLink) {
  CommCosts c;
  c.ranks_per_node = 8;
  c.all_reduce[2] = {1e-5, 1.0 / 360e9};
  c.all_reduce_inter[2] = {3e-5, 1.0 / 40e9};
  c.p2p = {1e-5, 1.0 / 300e9};
  c.p2p_inter = {3e-5, 1.0 / 45e9};
  const double bytes = 1e9;
  // 8 consecutive ranks: one node. A ring's time is latency + bytes x 2(n-1)/n / busbw.
  EXPECT_DOUBLE_EQ(c.AllReduce(8, bytes, 1), 1e-5 + bytes * (2.0 * 7 / 8) / 360e9);
  // 8 ranks 2 apart, or 16 consecutive: they span two nodes.
  EXPECT_DOUBLE_EQ(c.AllReduce(8, bytes, 2), 3e-5 + bytes * (2.0 * 7 / 8) / 40e9);
  EXPECT_DOUBLE_EQ(c.AllReduce(16, bytes, 1), 3e-5 + bytes * (2.0 * 15 / 16) / 40e9);
  EXPECT_DOUBLE_EQ(c.ReduceScatter(4, bytes, 2), 1e-5 + bytes * (2.0 * 3 / 4) / 360e9 / 2);
  EXPECT_DOUBLE_EQ(c.ReduceScatter(4, bytes, 4), 3e-5 + bytes * (2.0 * 3 / 4) / 40e9 / 2);
  // A pipeline of 2 stages 8 ranks apart crosses nodes; 2 stages 4 apart do not.
  EXPECT_DOUBLE_EQ(c.P2P(bytes, 2, 8), 3e-5 + bytes / 45e9);
  EXPECT_DOUBLE_EQ(c.P2P(bytes, 2, 4), 1e-5 + bytes / 300e9);
  // One host: no topology, every group intra-node, as the measured costs are.
  c.ranks_per_node = 0;
  EXPECT_DOUBLE_EQ(c.AllReduce(64, bytes, 8), 1e-5 + bytes * (2.0 * 63 / 64) / 360e9);
  EXPECT_EQ(c.AllReduce(1, bytes, 1), 0);
}

TEST(DeviceModel, TheExampleFileLoads) {
  Result<DeviceModel> d = LoadDeviceModel(ExampleDevice());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->peak_tflops, 989);
  EXPECT_EQ(d->ranks_per_node, 8);
  EXPECT_EQ(d->inter_node.bus_gbps, 40);
  EXPECT_EQ(d->usable_bytes(), int64_t{76} << 30);
  const CommCosts c = StatedCommCosts(*d);
  EXPECT_EQ(c.ranks_per_node, 8);
  EXPECT_DOUBLE_EQ(c.AllReduce(2, 360e9, 1), 15e-6 + 1.0);
  EXPECT_DOUBLE_EQ(c.P2P(45e9, 2, 8), 30e-6 + 1.0);
}

TEST(DeviceModel, BadFilesAreRefusedNamingTheField) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("strata_device_model_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  std::filesystem::create_directories(dir);
  auto refused = [&](const std::string& text, const std::string& words) {
    const std::string path = (dir / "device.yaml").string();
    std::ofstream(path) << text;
    Result<DeviceModel> d = LoadDeviceModel(path);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_NE(d.status().ToString().find(words), std::string::npos) << d.status().ToString();
  };
  const std::string links = "intra_node: {latency_us: 1, bus_gbps: 1, p2p_gbps: 1}\n"
                            "inter_node: {latency_us: 1, bus_gbps: 1, p2p_gbps: 1}\n";
  refused("hbm_gbps: 1\nmemory_gib: 8\n" + links, "peak_tflops is required");
  refused("peak_tflops: 1\nhbm_gbps: 1\nmemory_gib: 8\nintra_node: {latency_us: 1, bus_gbps: 1, p2p_gbps: 1}\n",
          "inter_node is required");
  refused("peak_tflop: 1\nhbm_gbps: 1\nmemory_gib: 8\n" + links, "peak_tflop");
  refused("peak_tflops: -3\nhbm_gbps: 1\nmemory_gib: 8\n" + links, "peak_tflops");
  refused("peak_tflops: 1\nhbm_gbps: 1\nmemory_gib: 8\nreserved_gib: 9\n" + links, "reserved_gib");
  refused("peak_tflops: 1\nhbm_gbps: 1\nmemory_gib: 8\nmatmul_efficiency: 1.5\n" + links, "matmul_efficiency");
  std::filesystem::remove_all(dir);
}

TEST(DeviceModel, ABlocksStatedCostsAreTheFlopAndByteFormulas) {
  Result<DeviceModel> d = LoadDeviceModel(ExampleDevice());
  ASSERT_TRUE(d.ok());
  const TrainJob job = Gpt3(24, 2048, 16, 512);
  const std::vector<ProfileKey> keys = {{4, Recompute::kNone}, {4, Recompute::kSelective}, {4, Recompute::kFull}};
  Result<Calibration> cal = StatedCalibration(job, *d, keys);
  ASSERT_TRUE(cal.ok()) << cal.status().ToString();
  const double rate = 989e12 * 0.5, b = 4, s = 2048, h = 2048, a = 16, v = 51200;
  const double linear = 24 * b * s * h * h / rate, attention = 4 * b * s * s * h / rate;
  const UnitProfile none = (*cal->Find(4, Recompute::kNone))->at(1);
  EXPECT_DOUBLE_EQ(none.f, linear + attention);
  EXPECT_DOUBLE_EQ(none.w, linear);
  EXPECT_DOUBLE_EQ(none.i, linear + 2 * attention);
  EXPECT_DOUBLE_EQ(none.b, none.i + none.w);
  EXPECT_EQ(none.saved_bytes, static_cast<int64_t>(b * s * h * (34 + 5 * a * s / h)));
  EXPECT_EQ(none.output_bytes, static_cast<int64_t>(2 * b * s * h));
  const UnitProfile sel = (*cal->Find(4, Recompute::kSelective))->at(1);
  EXPECT_DOUBLE_EQ(sel.i, none.i + attention);
  EXPECT_EQ(sel.saved_bytes, static_cast<int64_t>(34 * b * s * h));
  const UnitProfile full = (*cal->Find(4, Recompute::kFull))->at(1);
  EXPECT_DOUBLE_EQ(full.i, none.i + none.f);
  EXPECT_EQ(full.saved_bytes, full.output_bytes);
  const std::vector<UnitProfile>& units = **cal->Find(4, Recompute::kNone);
  EXPECT_DOUBLE_EQ(units.back().f, 2 * b * s * h * v / rate);  // the head
  EXPECT_EQ(units.size(), ModelUnits(job.model)->size());

  TrainJob mlp;
  EXPECT_EQ(StatedCalibration(mlp, *d, keys).status().code(), StatusCode::kUnimplemented);
}

TEST(DeviceModel, MixedPrecisionMemoryIsBf16WeightsFp32GradientsAndAShardedFp32Master) {
  Result<DeviceModel> d = LoadDeviceModel(ExampleDevice());
  ASSERT_TRUE(d.ok());
  const TrainJob job = Gpt3(24, 2048, 16, 512);
  PlannerOptions o;
  o.world = 64;
  o.global_batch = 512;
  o.value_bytes = 2;
  o.mixed_precision = true;
  PlanChoice c;
  c.dp = 64;
  c.micro_batches = 1;
  c.micro_batch = 8;
  c.zero = 1;
  c.recompute = Recompute::kSelective;
  Result<Calibration> cal = StatedCalibration(job, *d, {{8, Recompute::kSelective}});
  ASSERT_TRUE(cal.ok());
  Result<PlanPrediction> p = Predict(job, c, *cal, StatedCommCosts(*d), o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Result<std::vector<UnitSpec>> units = ModelUnits(job.model);  // held: a range-for over *temporary dangles
  ASSERT_TRUE(units.ok());
  int64_t psi = 0;
  for (const UnitSpec& u : *units) psi += u.params;
  EXPECT_EQ(p->memory.params, 2 * psi);
  EXPECT_EQ(p->memory.grads, static_cast<int64_t>(4.0 * psi + 4.0 * psi / 64));
  EXPECT_EQ(p->memory.optimizer, static_cast<int64_t>(12.0 * psi / 64));  // master + two moments
  o.mixed_precision = false;
  o.value_bytes = 4;
  Result<PlanPrediction> fp32 = Predict(job, c, *cal, StatedCommCosts(*d), o);
  ASSERT_TRUE(fp32.ok());
  EXPECT_EQ(fp32->memory.params, 4 * psi);
  EXPECT_EQ(fp32->memory.optimizer, static_cast<int64_t>(8.0 * psi / 64));
}

TEST(DeviceModel, Gpt3ThirteenBillionOn64H100sNeedsItsStateSplitAndEveryRankedPlanFits) {
  Result<DeviceModel> d = LoadDeviceModel(ExampleDevice());
  ASSERT_TRUE(d.ok());
  const TrainJob job = Gpt3(40, 5120, 40, 1024);
  PlannerOptions o;
  o.world = 64;
  o.global_batch = 1024;
  o.memory_limit_bytes = d->usable_bytes();
  o.value_bytes = 2;
  o.mixed_precision = true;
  Result<std::vector<PlanChoice>> choices = EnumeratePlans(job, o);
  ASSERT_TRUE(choices.ok()) << choices.status().ToString();
  Result<Calibration> cal = StatedCalibration(job, *d, NeededProfiles(*choices));
  ASSERT_TRUE(cal.ok());
  Result<RankedPlans> ranked = RankPlans(job, *choices, *cal, StatedCommCosts(*d), o);
  ASSERT_TRUE(ranked.ok()) << ranked.status().ToString();
  ASSERT_FALSE(ranked->plans.empty());
  EXPECT_GT(ranked->over_memory, 0);
  for (const PlanPrediction& p : ranked->plans) {
    EXPECT_LE(p.memory.total(), o.memory_limit_bytes) << p.choice.ToString();
    // 13 B parameters x 18 bytes whole on every device is 240 GB: something must be split.
    EXPECT_TRUE(p.choice.tp > 1 || p.choice.pp > 1 || p.choice.zero > 0) << p.choice.ToString();
  }
  for (size_t i = 1; i < ranked->plans.size(); ++i) {
    EXPECT_LE(ranked->plans[i - 1].step_s, ranked->plans[i].step_s);
  }
}

}  // namespace
}  // namespace strata
