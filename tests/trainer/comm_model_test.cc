// comm_model_test.cc: the analytical communication model (comm_model.h) against counts by
// hand for a small gpt (pipeline boundaries per schedule, the data-parallel all-reduce of a
// rank's units, the first step's bucket order, the tensor-parallel all-reduces with and without
// recompute) and the mlp over tp, and the report (comm_report.h): its verdict, table and JSON.
#include "trainer/parallel/comm_model.h"

#include <gtest/gtest.h>

#include "trainer/parallel/comm_report.h"

namespace strata {
namespace {

// 2 blocks: units embed, block0, block1, final; width 32.
TrainJob Gpt(int pp, int vpp, const char* schedule) {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kGpt;
  job.model.layers = 2;
  job.model.width = 32;
  job.model.heads = 2;
  job.model.context = 16;
  job.parallel.pp = pp;
  job.parallel.vpp = vpp;
  job.parallel.schedule = schedule;
  job.train.micro_batches = 4;
  return job;
}

// The unit specs are the unsplit model's: the tp terms depend only on the model's widths.
CommLayout Layout(const TrainJob& job, int world, int pp_rank) {
  auto plan = ResolvePlan(job, world);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  auto units = ModelUnits(job.model);
  EXPECT_TRUE(units.ok());
  CommLayout l;
  l.plan = *plan;
  l.pp_rank = pp_rank;
  l.units = *units;
  l.micro_batch = {4, 16};  // 4 samples of 16 tokens
  l.model = job.model;
  l.recompute = job.parallel.recompute;
  return l;
}

uint64_t PerStep(const GroupTraffic& g, CommOp op) { return g.per_step[static_cast<size_t>(op)]; }

constexpr uint64_t kActivation = 4 * 16 * 32 * 4;  // [N, T, C] floats, 4 bytes each

TEST(CommModelTest, PipelineSendsEachBoundarysActivationAndGradientPerMicroBatch) {
  // 1f1b on 2 ranks, stages [0,2) [2,4): one boundary, crossed by 4 activations forward and 4
  // gradients back; each rank sends 4 and receives 4.
  for (int rank = 0; rank < 2; ++rank) {
    const CommModel m = ModelCommTraffic(Layout(Gpt(2, 1, "1f1b"), 2, rank));
    EXPECT_EQ(PerStep(m.pp, CommOp::kSend), 4 * kActivation) << rank;
    EXPECT_EQ(PerStep(m.pp, CommOp::kRecv), 4 * kActivation) << rank;
    EXPECT_EQ(PerStep(m.pp, CommOp::kHostAllReduce), 16u) << rank;  // loss and gradient norm
    EXPECT_EQ(m.dp.per_step, GroupTraffic().per_step) << rank;      // no replicas
  }
  // Interleaved, 4 stages on 2 ranks: rank 0 holds stages 0 and 2, three boundaries (0|1, 1|2,
  // 2|3) of which it sends across 0|1 (F), 1|2 (B) and 2|3 (F): 3 sends and 3 receives a
  // micro-batch.
  const CommModel m = ModelCommTraffic(Layout(Gpt(2, 2, "interleaved"), 2, 0));
  EXPECT_EQ(PerStep(m.pp, CommOp::kSend), 3 * 4 * kActivation);
  EXPECT_EQ(PerStep(m.pp, CommOp::kRecv), 3 * 4 * kActivation);
  // ZB-V puts stages 0 and 3 on rank 0: it crosses 0|1 and 2|3, twice each a micro-batch.
  const CommModel v = ModelCommTraffic(Layout(Gpt(2, 2, "zbv"), 2, 0));
  EXPECT_EQ(PerStep(v.pp, CommOp::kSend), 2 * 4 * kActivation);
}

TEST(CommModelTest, ReplicasAllReduceTheirUnitsGradientsOncePerStep) {
  const TrainJob job = Gpt(2, 1, "1f1b");
  for (int rank : {0, 1}) {  // pipeline ranks of a dp 2 x pp 2 world
    CommLayout l = Layout(job, 4, rank);
    l.dp_all_reduce = true;
    l.all_reduced_tensors = 7;
    const int64_t floats = l.units[2 * rank].params + l.units[2 * rank + 1].params;
    const CommModel m = ModelCommTraffic(l);
    EXPECT_EQ(PerStep(m.dp, CommOp::kAllReduce), static_cast<uint64_t>(floats) * 4) << rank;
    EXPECT_EQ(PerStep(m.dp, CommOp::kHostAllReduce), 8u) << rank;  // the loss
    // The bucket order, one float per tensor, once.
    EXPECT_EQ(m.dp.Bytes(CommOp::kHostBroadcast, 5), 7u * 4) << rank;
    EXPECT_EQ(m.dp.Bytes(CommOp::kAllReduce, 5), 5 * static_cast<uint64_t>(floats) * 4) << rank;
    EXPECT_EQ(m.dp.Bytes(CommOp::kHostBroadcast, 0), 0u);

    // Parameters on the servers (hybrid) are not all-reduced; without overlap no order is sent.
    l.server_floats = 1000;
    l.overlap = false;
    const CommModel h = ModelCommTraffic(l);
    EXPECT_EQ(PerStep(h.dp, CommOp::kAllReduce), static_cast<uint64_t>(floats - 1000) * 4);
    EXPECT_EQ(h.dp.Bytes(CommOp::kHostBroadcast, 5), 0u);
  }
}

// Per micro-batch of 64 tokens and width 32, a split block all-reduces [64, 32] twice in forward
// (attention's proj, the MLP's fc2) and twice in backward (qkv's and fc1's dL/dx); the
// embedding its rows once in forward; the head its dL/dx once in backward; the vocab-parallel
// loss [64] (max) and [2, 64] (sums) after the last stage's forward.
constexpr uint64_t kTpActivation = 64 * 32 * 4;
constexpr uint64_t kTpLoss = 3 * 64 * 4;

TEST(CommModelTest, TensorParallelGptAllReducesEachSplitLayerPerMicroBatch) {
  TrainJob job = Gpt(1, 1, "1f1b");
  job.parallel.tp = 2;
  const CommModel m = ModelCommTraffic(Layout(job, 2, 0));
  // Forward: embed 1 + 2 blocks x 2; backward: 2 blocks x 2 + head 1; 4 micro-batches.
  EXPECT_EQ(PerStep(m.tp, CommOp::kAllReduce), 4 * ((5 + 5) * kTpActivation + kTpLoss));
  EXPECT_EQ(PerStep(m.tp, CommOp::kHostAllReduce), 8u);  // the split gradients' squared norm
  EXPECT_EQ(m.tp.first_step, GroupTraffic().first_step);
  EXPECT_EQ(m.pp.per_step, GroupTraffic().per_step);  // pp 1: nothing

  // Full recompute runs every unit's forward again in backward: embed 1 + blocks 4 more.
  job.parallel.recompute = ParallelOptions::Recompute::kFull;
  EXPECT_EQ(PerStep(ModelCommTraffic(Layout(job, 2, 0)).tp, CommOp::kAllReduce),
            4 * ((5 + 5 + 5) * kTpActivation + kTpLoss));
  // Selective recomputes the attention core only (no collective); model.recompute the blocks.
  job.parallel.recompute = ParallelOptions::Recompute::kSelective;
  EXPECT_EQ(PerStep(ModelCommTraffic(Layout(job, 2, 0)).tp, CommOp::kAllReduce),
            4 * ((5 + 5) * kTpActivation + kTpLoss));
  job.model.recompute = true;
  EXPECT_EQ(PerStep(ModelCommTraffic(Layout(job, 2, 0)).tp, CommOp::kAllReduce),
            4 * ((5 + 5 + 4) * kTpActivation + kTpLoss));

  // Without tp there is no tp traffic.
  EXPECT_EQ(ModelCommTraffic(Layout(Gpt(1, 1, "1f1b"), 1, 0)).tp.per_step,
            GroupTraffic().per_step);
}

TEST(CommModelTest, TensorParallelGptCountsTheUnitsOfTheRanksStages) {
  // tp 2 x pp 2, stages [0,2) [2,4): rank 0 embed + block0, rank 1 block1 + final + the loss.
  for (const char* schedule : {"1f1b", "gpipe", "zb-h1"}) {
    TrainJob job = Gpt(2, 1, schedule);
    job.parallel.tp = 2;
    const CommModel m0 = ModelCommTraffic(Layout(job, 4, 0));
    const CommModel m1 = ModelCommTraffic(Layout(job, 4, 1));
    EXPECT_EQ(PerStep(m0.tp, CommOp::kAllReduce), 4 * (3 + 2) * kTpActivation) << schedule;
    EXPECT_EQ(PerStep(m1.tp, CommOp::kAllReduce), 4 * ((2 + 3) * kTpActivation + kTpLoss))
        << schedule;
    EXPECT_EQ(PerStep(m1.tp, CommOp::kHostAllReduce), 8u) << schedule;
    // The pipeline's terms are those of tp 1.
    EXPECT_EQ(PerStep(m0.pp, CommOp::kSend), 4 * kActivation) << schedule;

    // Full recompute: embed and block0 again on rank 0, block1 again on rank 1.
    job.parallel.recompute = ParallelOptions::Recompute::kFull;
    EXPECT_EQ(PerStep(ModelCommTraffic(Layout(job, 4, 0)).tp, CommOp::kAllReduce),
              4 * (3 + 2 + 3) * kTpActivation)
        << schedule;
    EXPECT_EQ(PerStep(ModelCommTraffic(Layout(job, 4, 1)).tp, CommOp::kAllReduce),
              4 * ((2 + 3 + 2) * kTpActivation + kTpLoss))
        << schedule;
  }
  // ZB-V on 2 ranks: rank 0 holds stages 0 (embed) and 3 (final, the loss), rank 1 stages 1
  // and 2 (the blocks).
  TrainJob job = Gpt(2, 2, "zbv");
  job.parallel.tp = 2;
  EXPECT_EQ(PerStep(ModelCommTraffic(Layout(job, 4, 0)).tp, CommOp::kAllReduce),
            4 * ((1 + 1) * kTpActivation + kTpLoss));
  EXPECT_EQ(PerStep(ModelCommTraffic(Layout(job, 4, 1)).tp, CommOp::kAllReduce),
            4 * (4 + 4) * kTpActivation);
}

TEST(CommModelTest, TensorParallelMlpAllReducesFc2Output) {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kMlp;
  job.model.mlp_in = 16;
  job.model.mlp_hidden = 32;
  job.model.mlp_out = 8;
  job.parallel.tp = 2;
  job.train.micro_batches = 2;
  CommLayout l = Layout(job, 2, 0);
  l.micro_batch = {5};  // 5 samples
  // Per micro-batch: fc2's y [5, 8] in forward; fc1 takes the data, so no dL/dx to all-reduce
  // in backward; MSE needs nothing over tp.
  EXPECT_EQ(PerStep(ModelCommTraffic(l).tp, CommOp::kAllReduce), 2u * 5 * 8 * 4);
  EXPECT_EQ(PerStep(ModelCommTraffic(l).tp, CommOp::kHostAllReduce), 8u);
  // model.recompute (every mlp unit) and full recompute both run fc2's forward again.
  l.model.recompute = true;
  EXPECT_EQ(PerStep(ModelCommTraffic(l).tp, CommOp::kAllReduce), 2u * 2 * 5 * 8 * 4);
  l.model.recompute = false;
  l.recompute = ParallelOptions::Recompute::kFull;
  EXPECT_EQ(PerStep(ModelCommTraffic(l).tp, CommOp::kAllReduce), 2u * 2 * 5 * 8 * 4);
}

TEST(CommReportTest, SaysWhetherMeasuredEqualsModelAndWritesBoth) {
  CommModel model;
  model.dp.per_step[static_cast<size_t>(CommOp::kAllReduce)] = 400;
  model.dp.first_step[static_cast<size_t>(CommOp::kHostBroadcast)] = 12;
  CommReport r;
  r.steps = 2;
  GroupCommReport g{"dp", "trainers/dp/0", 2, {}, model.dp};
  g.measured.Record(CommOp::kAllReduce, 300);
  g.measured.Record(CommOp::kAllReduce, 100);
  g.measured.Record(CommOp::kAllReduce, 400);
  g.measured.Record(CommOp::kHostBroadcast, 12);
  r.groups.push_back(g);
  EXPECT_TRUE(r.matches_model());

  const std::vector<std::string> lines = FormatCommReport(r);
  ASSERT_EQ(lines.size(), 5u);  // title, header, all_reduce, host_broadcast, verdict
  EXPECT_NE(lines[2].find("trainers/dp/0 (2)"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("all_reduce"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find(" 1.5 "), std::string::npos) << lines[2];  // calls/step
  EXPECT_NE(lines[2].find(" 400 "), std::string::npos) << lines[2];  // bytes/step, model, wire
  EXPECT_NE(lines[4].find("equal"), std::string::npos) << lines[4];

  const nlohmann::json j = CommReportJson(r);
  EXPECT_EQ(j["steps"], 2);
  const nlohmann::json& ar = j["groups"][0]["ops"]["all_reduce"];
  EXPECT_EQ(ar["calls"], 3);
  EXPECT_EQ(ar["bytes"], 800);
  EXPECT_EQ(ar["model_bytes"], 800);
  EXPECT_DOUBLE_EQ(ar["wire_bytes"].get<double>(), 800);  // 2 (n-1)/n = 1 for n = 2
  EXPECT_EQ(j["groups"][0]["group"], "trainers/dp/0");

  r.groups[0].measured.Record(CommOp::kHostAllReduce, 8);  // one the model does not expect
  EXPECT_FALSE(r.matches_model());
  EXPECT_NE(FormatCommReport(r).back().find("DIFFER"), std::string::npos);
}

}  // namespace
}  // namespace strata
