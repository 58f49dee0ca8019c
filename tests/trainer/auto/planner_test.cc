// planner_test.cc: the planner (trainer/auto/planner.h) on synthetic calibrations, no timings:
// every enumerated plan is one the trainer accepts and ZeRO-3 never meets pp > 1; a memory
// budget drops exactly the plans the ZeRO formulas put over it; the predicted bubble and step
// are the schedule simulator's for the same per-stage costs; the dp sync is hidden behind
// backward only as far as backward lasts; the chosen plan's JSON round-trips and bad JSON names
// its field; the calibration cache round-trips; a real calibration of gpt units shows full
// recomputation keeping fewer bytes than none; PlanJob ranks only the plans asked for.
#include "trainer/auto/planner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "trainer/auto/auto_select.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/pipeline/simulate.h"

namespace strata {
namespace {

using Recompute = ParallelOptions::Recompute;
using pipeline::ScheduleKind;

TrainJob Gpt() {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kGpt;
  job.model.layers = 4;
  job.model.heads = 4;
  job.model.width = 32;
  job.model.context = 16;
  job.model.vocab = 64;
  job.train.batch_size = 8;
  job.sync.mode = SyncOptions::Mode::kAllReduce;
  return job;
}

// Gpt() with data a calibration can read: the test corpus, bytes as tokens.
TrainJob GptOnText() {
  TrainJob job = Gpt();
  job.model.vocab = 256;
  job.data.kind = DataOptions::Kind::kText;
  job.data.path = std::string(STRATA_SOURCE_DIR) + "/tests/data/corpus.txt";
  job.data.eval_samples = 64;
  return job;
}

// Every unit: F = 1 ms x micro-batch, B = 2 F, I = W = F; saved 1 KiB x micro-batch (a quarter
// of it the output), no working memory beyond.
Calibration Synthetic(const TrainJob& job, const std::vector<PlanChoice>& choices) {
  Calibration cal;
  const size_t n = ModelUnits(job.model)->size();
  for (const ProfileKey& k : NeededProfiles(choices)) {
    UnitProfile p;
    p.f = 1e-3 * static_cast<double>(k.first);
    p.b = 2 * p.f;
    p.i = p.f;
    p.w = p.f;
    p.saved_bytes = 1024 * k.first;
    p.output_bytes = 256 * k.first;
    cal.units[k] = std::vector<UnitProfile>(n, p);
  }
  return cal;
}

PlannerOptions Options(int world, int64_t global_batch) {
  PlannerOptions o;
  o.world = world;
  o.global_batch = global_batch;
  return o;
}

TEST(Planner, EveryEnumeratedPlanIsOneTheTrainerAccepts) {
  const TrainJob job = Gpt();
  auto choices = EnumeratePlans(job, Options(4, 16));
  ASSERT_TRUE(choices.ok()) << choices.status().ToString();
  bool saw[3] = {false, false, false};  // dp 4, tp 2 x dp 2, pp 2 interleaved
  for (const PlanChoice& c : *choices) {
    EXPECT_EQ(c.dp * c.tp * c.pp, 4) << c.ToString();
    EXPECT_EQ(c.micro_batch * c.micro_batches * c.dp, 16) << c.ToString();
    EXPECT_TRUE(ResolvePlan(ApplyChoice(job, c), 4).ok()) << c.ToString();
    if (c.zero == 3) {
      EXPECT_EQ(c.pp, 1) << c.ToString();
    }
    if (c.dp == 1) {
      EXPECT_EQ(c.zero, 0) << c.ToString();
    }
    if (c.schedule == ScheduleKind::kInterleaved) {
      EXPECT_EQ(c.micro_batches % c.pp, 0) << c.ToString();
    }
    saw[0] = saw[0] || (c.dp == 4);
    saw[1] = saw[1] || (c.tp == 2 && c.dp == 2);
    saw[2] = saw[2] || (c.pp == 2 && c.schedule == ScheduleKind::kInterleaved);
  }
  EXPECT_TRUE(saw[0] && saw[1] && saw[2]);
}

TEST(Planner, RefusesWhatItCannotPlanNamingTheField) {
  TrainJob job = Gpt();
  job.sync.mode = SyncOptions::Mode::kLocal;
  auto r = EnumeratePlans(job, Options(2, 8));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sync.mode"), std::string::npos) << r.status().ToString();
  auto empty = EnumeratePlans(Gpt(), Options(2, 0));
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("global batch"), std::string::npos) << empty.status().ToString();
  TrainJob ctr = Gpt();
  ctr.model.kind = ModelOptions::Kind::kCtr;
  auto r2 = EnumeratePlans(ctr, Options(2, 8));
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("model.kind"), std::string::npos) << r2.status().ToString();
}

TEST(Planner, MemoryBudgetDropsExactlyThePlansOverIt) {
  const TrainJob job = Gpt();
  PlannerOptions o = Options(2, 8);
  auto choices = EnumeratePlans(job, o);
  ASSERT_TRUE(choices.ok());
  const Calibration cal = Synthetic(job, *choices);
  const CommCosts none;
  // The ZeRO formulas: ZeRO-0 holds 4 + 4 + 8 bytes a parameter of AdamW, ZeRO-1 8 + 4 / 2
  // of gradients during a step and 8 / 2 of state.
  const std::vector<UnitSpec> units = ModelUnits(job.model).value();
  int64_t psi = 0;
  for (const UnitSpec& u : units) psi += u.params;
  std::vector<int64_t> totals;
  for (const PlanChoice& c : *choices) {
    auto p = Predict(job, c, cal, none, o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    totals.push_back(p->memory.total());
    if (c.dp == 2 && c.pp == 1 && c.tp == 1 && c.zero < 3) {
      EXPECT_EQ(p->memory.params, 4 * psi) << c.ToString() << " " << p->choice.partition;
      EXPECT_EQ(p->memory.optimizer, c.zero == 0 ? 8 * psi : 4 * psi) << c.ToString();
      EXPECT_EQ(p->memory.grads, c.zero == 0 ? 4 * psi : 4 * psi + 2 * psi) << c.ToString();
    }
  }
  std::vector<int64_t> sorted = totals;
  std::sort(sorted.begin(), sorted.end());
  o.memory_limit_bytes = sorted[sorted.size() / 2];
  int over = 0;
  for (int64_t t : totals) over += t > o.memory_limit_bytes ? 1 : 0;
  ASSERT_GT(over, 0);
  auto ranked = RankPlans(job, *choices, cal, none, o);
  ASSERT_TRUE(ranked.ok());
  EXPECT_EQ(ranked->over_memory, over);
  EXPECT_EQ(ranked->plans.size() + over, choices->size());
  for (const PlanPrediction& p : ranked->plans) EXPECT_LE(p.memory.total(), o.memory_limit_bytes);
  for (size_t i = 1; i < ranked->plans.size(); ++i) EXPECT_LE(ranked->plans[i - 1].step_s, ranked->plans[i].step_s);
}

TEST(Planner, PredictedBubbleIsTheSimulatorsForTheSameStageCosts) {
  const TrainJob job = Gpt();
  const PlannerOptions o = Options(2, 8);
  auto choices = EnumeratePlans(job, o);
  ASSERT_TRUE(choices.ok());
  Calibration cal = Synthetic(job, *choices);
  // Uneven units, so that stages differ: unit u costs (u + 1) ms forward.
  for (auto& [k, units] : cal.units) {
    for (size_t u = 0; u < units.size(); ++u) {
      units[u].f = 1e-3 * static_cast<double>(u + 1);
      units[u].b = 2 * units[u].f;
      units[u].i = units[u].w = units[u].f;
    }
  }
  int checked = 0;
  for (const PlanChoice& c : *choices) {
    if (c.pp != 2 || c.recompute != Recompute::kNone) continue;
    auto p = Predict(job, c, cal, CommCosts{}, o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto plan = ResolvePlan(ApplyChoice(job, p->choice), 2);
    ASSERT_TRUE(plan.ok());
    pipeline::Costs costs;
    const auto& prof = cal.units.at({c.micro_batch, c.recompute});
    for (const UnitRange& s : plan->stages) {
      double f = 0, b = 0, i = 0, w = 0;
      for (int u = s.first; u < s.last; ++u) {
        f += prof[u].f;
        b += prof[u].b;
        i += prof[u].i;
        w += prof[u].w;
      }
      costs.f_stage.push_back(f);
      costs.b_stage.push_back(b);
      costs.i_stage.push_back(i);
      costs.w_stage.push_back(w);
    }
    auto sim = pipeline::Simulate(c.schedule, plan->shape(), costs);
    ASSERT_TRUE(sim.ok());
    // No communication and no optimizer time: the step is the simulated makespan, and the
    // bubble rank 0's idle time in it.
    EXPECT_DOUBLE_EQ(p->step_s, sim->makespan) << c.ToString();
    EXPECT_DOUBLE_EQ(p->bubble_s, sim->makespan - sim->busy[0]) << c.ToString();
    EXPECT_DOUBLE_EQ(p->comm_s, 0) << c.ToString();
    ++checked;
  }
  EXPECT_GT(checked, 5);
}

TEST(Planner, GradientSyncHidesBehindBackwardOnlyAsFarAsBackwardLasts) {
  const TrainJob job = Gpt();
  PlannerOptions o = Options(2, 8);
  PlanChoice c;
  c.dp = 2;
  c.micro_batch = 4;
  c.micro_batches = 1;
  Calibration cal = Synthetic(job, {c});
  CommCosts comm;
  comm.all_reduce[2] = LinkFit{0, 1e-9};  // 1 GB/s
  const std::vector<UnitSpec> units = ModelUnits(job.model).value();
  int64_t psi = 0;
  for (const UnitSpec& u : units) psi += u.params;
  const double sync = 4.0 * psi * 1e-9;
  const double backward = 6 * 2 * 4e-3;  // 6 units, B = 2 x 4 ms
  auto hidden = Predict(job, c, cal, comm, o);
  ASSERT_TRUE(hidden.ok());
  o.overlap = false;
  auto exposed = Predict(job, c, cal, comm, o);
  ASSERT_TRUE(exposed.ok());
  const double loss = 8e-9;  // the loss averaged over dp: one double
  EXPECT_NEAR(exposed->comm_s, sync + loss, 1e-12);
  const double first_share = static_cast<double>(units[0].params) / static_cast<double>(psi);
  EXPECT_NEAR(hidden->comm_s, std::max(sync * first_share, sync - backward) + loss, 1e-12);
  EXPECT_LT(hidden->comm_s, exposed->comm_s);
}

TEST(Planner, APipelineWhoseRanksOutnumberTheCoresIsReplayedAndItsMeasurementUsed) {
  const TrainJob job = Gpt();
  PlannerOptions o = Options(4, 8);
  PlanChoice c;
  c.pp = 4;
  c.schedule = ScheduleKind::k1F1B;
  c.micro_batches = 4;
  c.micro_batch = 2;
  Calibration cal = Synthetic(job, {c});
  CommCosts comm;
  comm.all_reduce[4] = LinkFit{1e-4, 0};
  comm.scalar_all_reduce[4] = 3e-4;
  // A core per rank: simulated, nothing to replay.
  o.cores = 4;
  auto simulated = Predict(job, c, cal, comm, o);
  ASSERT_TRUE(simulated.ok()) << simulated.status().ToString();
  EXPECT_FALSE(simulated->replay.has_value());
  EXPECT_TRUE(simulated->pipeline_key.empty());
  // Two cores for four ranks: the prediction asks for a replay of one copy of its pipeline, with
  // the units' own costs, the scalar all-reduces and the optimizer.
  o.cores = 2;
  auto asks = Predict(job, c, cal, comm, o);
  ASSERT_TRUE(asks.ok());
  ASSERT_TRUE(asks->replay.has_value());
  EXPECT_FALSE(asks->pipeline_replayed);
  EXPECT_EQ(asks->pipeline_key, PipelineKey(asks->choice));
  EXPECT_EQ(asks->replay->dp, 1);
  EXPECT_EQ(asks->replay->tp, 1);
  EXPECT_EQ(asks->replay->shape.pp, 4);
  EXPECT_EQ(asks->replay->costs.scalars, "pdtp");  // the loss over pp and dp, the norm over tp and pp
  EXPECT_EQ(asks->replay->costs.grad_bytes, std::vector<int64_t>(4, 0));  // dp 1: no sync
  ASSERT_EQ(asks->replay->costs.compute.f_stage.size(), 4u);
  double f = 0;
  for (double x : asks->replay->costs.compute.f_stage) f += x;
  EXPECT_NEAR(f, 6 * 2e-3, 1e-12);  // every unit's forward once, unslowed
  // Measured: the step is the measurement (which holds the step's tail) plus what the replay
  // does not run (a tp scalar), whatever the simulator says.
  cal.pipeline_s[asks->pipeline_key] = 0.5;
  auto used = Predict(job, c, cal, comm, o);
  ASSERT_TRUE(used.ok());
  EXPECT_TRUE(used->pipeline_replayed);
  EXPECT_FALSE(used->replay.has_value());
  EXPECT_NEAR(used->step_s, 0.5, 1e-12);  // dp 1, tp 1: nothing beside the pipeline
  EXPECT_NEAR(used->compute_s + used->bubble_s + used->comm_s, used->step_s, 1e-12);
  // ZeRO changes the step's sync: its own key.
  PlanChoice z = asks->choice;
  z.zero = 1;
  EXPECT_NE(PipelineKey(z), asks->pipeline_key);
  // dp 2 x pp 2: each pipeline rank's dp group all-reduces its stages' gradients, fp32.
  PlanChoice d = c;
  d.dp = 2;
  d.pp = 2;
  d.micro_batch = 1;
  Calibration cal2 = Synthetic(job, {d});
  auto two = Predict(job, d, cal2, comm, o);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  ASSERT_TRUE(two->replay.has_value());
  EXPECT_EQ(two->replay->dp, 2);
  ASSERT_EQ(two->replay->costs.grad_bytes.size(), 2u);
  auto plan = ResolvePlan(ApplyChoice(job, two->choice), 4);
  ASSERT_TRUE(plan.ok());
  const std::vector<UnitSpec> units = ModelUnits(job.model).value();
  for (int r = 0; r < 2; ++r) {
    int64_t psi = 0;
    for (int u = plan->stages[r].first; u < plan->stages[r].last; ++u) psi += units[u].params;
    EXPECT_EQ(two->replay->costs.grad_bytes[r], 4 * psi) << r;
  }
  // Tensor parallelism is replayed too (its collectives run in the replayed model), and its
  // scalar is in the replay's tail, not added beside it. ZeRO-3 is not replayed.
  PlanChoice t = c;
  t.tp = 2;
  t.pp = 2;
  Calibration cal3 = Synthetic(job, {t});
  auto tensor = Predict(job, t, cal3, comm, o);
  ASSERT_TRUE(tensor.ok()) << tensor.status().ToString();
  ASSERT_TRUE(tensor->replay.has_value());
  EXPECT_EQ(tensor->replay->tp, 2);
  EXPECT_EQ(tensor->replay->costs.scalars, "pdtp");
  cal3.pipeline_s[tensor->pipeline_key] = 0.25;
  auto measured = Predict(job, t, cal3, comm, o);
  ASSERT_TRUE(measured.ok());
  EXPECT_NEAR(measured->step_s, 0.25, 1e-12);
  // With a core per rank a plan is simulated, unless replay_all (the CPU's planner) asks for
  // its model to run; a plan of one rank has nothing to replay.
  o.cores = 4;
  auto alone = Predict(job, t, cal3, comm, o);
  ASSERT_TRUE(alone.ok());
  EXPECT_FALSE(alone->replay.has_value());
  EXPECT_FALSE(alone->pipeline_replayed);
  o.replay_all = true;
  auto layers = Predict(job, t, Synthetic(job, {t}), comm, o);
  ASSERT_TRUE(layers.ok());
  ASSERT_TRUE(layers->replay.has_value());
  EXPECT_EQ(layers->replay->tp, 2);
  auto pipeline = Predict(job, c, Synthetic(job, {c}), comm, o);
  ASSERT_TRUE(pipeline.ok());
  EXPECT_TRUE(pipeline->replay.has_value());
  PlanChoice single;
  single.micro_batches = 1;
  single.micro_batch = 8;
  PlannerOptions one = Options(1, 8);
  one.replay_all = true;
  auto lone = Predict(job, single, Synthetic(job, {single}), comm, one);
  ASSERT_TRUE(lone.ok()) << lone.status().ToString();
  EXPECT_FALSE(lone->replay.has_value());
  o.cores = 2;
  o.replay_all = false;
  PlanChoice z3 = d;
  z3.zero = 3;
  z3.pp = 1;
  z3.dp = 4;
  Calibration cal4 = Synthetic(job, {z3});
  auto sharded = Predict(job, z3, cal4, comm, o);
  ASSERT_TRUE(sharded.ok()) << sharded.status().ToString();
  EXPECT_FALSE(sharded->replay.has_value());
}

TEST(Planner, ChoiceJsonRoundTripsAndBadFieldsAreNamed) {
  PlanChoice c;
  c.dp = 2;
  c.pp = 2;
  c.vpp = 2;
  c.schedule = ScheduleKind::kInterleaved;
  c.micro_batches = 4;
  c.zero = 1;
  c.recompute = Recompute::kSelective;
  c.micro_batch = 3;
  c.partition = "2,3,5";
  auto back = ChoiceFromJson(ChoiceToJson(c));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ToString(), c.ToString());
  EXPECT_EQ(back->partition, "2,3,5");
  EXPECT_EQ(back->micro_batch, 3);
  auto bad = ChoiceFromJson(R"({"dp": 2, "tp": "two"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("\"tp\""), std::string::npos) << bad.status().ToString();
}

TEST(Planner, CalibrationCacheRoundTripsAndRefusesGarbage) {
  const std::string path = ::testing::TempDir() + "/planner_cache.json";
  std::filesystem::remove(path);
  Calibration cal;
  cal.key = "k1";
  cal.optimizer_s_per_param = 2e-9;
  cal.units[{4, Recompute::kFull}] = {UnitProfile{1, 2, 3, 4, 5, 6, 7}};
  ASSERT_TRUE(SaveCalibration(path, cal).ok());
  CommCosts comm;
  comm.all_reduce[2] = {1e-4, 2e-9};
  comm.p2p = {5e-5, 1e-9};
  comm.shm_all_reduce[2] = {2e-5, 1e-10};
  comm.shm_all_reduce_together[2] = {3e-5, 1e-10};
  ASSERT_TRUE(SaveCommCosts(path, "host", comm).ok());
  auto back = LoadCalibration(path, "k1");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_DOUBLE_EQ(back->optimizer_s_per_param, 2e-9);
  auto units = back->Find(4, Recompute::kFull);
  ASSERT_TRUE(units.ok());
  EXPECT_EQ((**units)[0].saved_bytes, 5);
  EXPECT_EQ((**units)[0].output_bytes, 7);
  EXPECT_FALSE(back->Find(4, Recompute::kNone).ok());
  auto other = LoadCalibration(path, "k2");  // another model: nothing cached
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->units.empty());
  auto c = LoadCommCosts(path, "host");
  ASSERT_TRUE(c.ok());
  EXPECT_DOUBLE_EQ(c->all_reduce.at(2).s_per_byte, 2e-9);
  EXPECT_DOUBLE_EQ(c->P2P(1000), 5e-5 + 1e-6);
  EXPECT_DOUBLE_EQ(c->shm_all_reduce.at(2).latency_s, 2e-5);
  EXPECT_DOUBLE_EQ(c->shm_all_reduce_together.at(2).latency_s, 3e-5);
  std::ofstream(path) << "[1, 2]";
  EXPECT_EQ(LoadCalibration(path, "k1").status().code(), StatusCode::kCorruption);
}

TEST(Planner, CalibrationMeasuresFewerSavedBytesWithFullRecompute) {
  TrainJob job = GptOnText();
  Calibration cal;
  cal.reps = 1;
  const Status s = Calibrate(job, ops::Exec::Cpu(), {{2, Recompute::kNone}, {2, Recompute::kFull}}, cal);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const auto& none = cal.units.at({2, Recompute::kNone});
  const auto& full = cal.units.at({2, Recompute::kFull});
  ASSERT_EQ(none.size(), 6u);  // embedding, 4 blocks, head
  const int64_t block_out = 2 * 16 * 32 * 4;
  EXPECT_EQ(none[1].output_bytes, block_out);
  EXPECT_GT(none[1].saved_bytes, 2 * block_out);  // a block keeps far more than its output
  EXPECT_LT(full[1].saved_bytes, none[1].saved_bytes);
  EXPECT_GT(cal.optimizer_s_per_param, 0);
}

TEST(Planner, CalibrationUnderCoRunKeepsTheBytesOfOneCopyAndTimesEveryCopy) {
  TrainJob job = GptOnText();
  Calibration alone, loaded;
  alone.reps = loaded.reps = 1;
  loaded.corun = 3;  // more copies than this host's cores: the barrier must still let all through
  ASSERT_TRUE(Calibrate(job, ops::Exec::Cpu(), {{2, Recompute::kSelective}}, alone).ok());
  const Status s = Calibrate(job, ops::Exec::Cpu(), {{2, Recompute::kSelective}}, loaded);
  ASSERT_TRUE(s.ok()) << s.ToString();
  const auto& a = alone.units.at({2, Recompute::kSelective});
  const auto& l = loaded.units.at({2, Recompute::kSelective});
  ASSERT_EQ(a.size(), l.size());
  for (size_t u = 0; u < a.size(); ++u) {
    // Each copy has its own allocator, so its counters see only its own tensors.
    EXPECT_EQ(l[u].saved_bytes, a[u].saved_bytes) << "unit " << u;
    EXPECT_EQ(l[u].output_bytes, a[u].output_bytes) << "unit " << u;
    EXPECT_EQ(l[u].peak_bytes, a[u].peak_bytes) << "unit " << u;
    for (double t : {l[u].f, l[u].b, l[u].i, l[u].w}) EXPECT_GT(t, 0) << "unit " << u;
  }
  EXPECT_GT(loaded.optimizer_s_per_param, 0);
}

TEST(Planner, CalibrationCoRunIsTheCoresTheTrainersKeepBusyOnTheCpuOnly) {
  EXPECT_EQ(CalibrationCorun(4, 2, "cpu"), 2);
  EXPECT_EQ(CalibrationCorun(2, 16, "cpu"), 2);
  EXPECT_EQ(CalibrationCorun(1, 2, "cpu"), 1);
  EXPECT_EQ(CalibrationCorun(4, 0, "cpu"), 1);   // cores unknown
  EXPECT_EQ(CalibrationCorun(4, 8, "cuda"), 1);  // a GPU a trainer: nothing shared
  TrainJob job = Gpt();
  EXPECT_NE(CalibrationKey(job, "cpu", 1, 2), CalibrationKey(job, "cpu", 2, 1));
  EXPECT_NE(CalibrationKey(job, "cpu", 1, 2).find("threads=1 corun=2"), std::string::npos);
}

// `only` ranks just the named plans, each predicted as the whole ranking predicts it (the same
// cache), and names a label that is no valid plan.
TEST(Planner, PlanJobRanksOnlyTheNamedPlansAndNamesAnUnknownOne) {
  TrainJob job = GptOnText();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "strata_planner_only_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  PlanRequest req;
  req.planner = Options(1, 8);
  req.planner.max_micro_batches = 4;
  req.cache_path = (dir / "calibration.json").string();
  auto all = PlanJob(job, ops::Exec::Cpu(), req);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_GE(all->plans.size(), 3u);
  const PlanPrediction& a = all->plans[2];
  const PlanPrediction& b = all->plans[0];
  req.only = {a.choice.ToString(), b.choice.ToString()};
  std::vector<std::string> log;
  req.log = [&](const std::string& s) { log.push_back(s); };
  auto some = PlanJob(job, ops::Exec::Cpu(), req);
  ASSERT_TRUE(some.ok()) << some.status().ToString();
  EXPECT_TRUE(log.empty()) << log.front();  // nothing to calibrate: the cache has it
  EXPECT_EQ(some->enumerated, 2);
  ASSERT_EQ(some->plans.size(), 2u);
  EXPECT_EQ(some->plans[0].choice.ToString(), b.choice.ToString());
  EXPECT_EQ(some->plans[0].step_s, b.step_s);
  EXPECT_EQ(some->plans[1].choice.ToString(), a.choice.ToString());
  EXPECT_EQ(some->plans[1].step_s, a.step_s);
  EXPECT_EQ(some->plans[1].memory.total(), a.memory.total());
  req.only = {"dp1 tp1 pp9 m1 zero0 rc=none"};
  auto none = PlanJob(job, ops::Exec::Cpu(), req);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("\"dp1 tp1 pp9 m1 zero0 rc=none\" is none of the"), std::string::npos)
      << none.status().ToString();
  std::filesystem::remove_all(dir);
}

// An all-reduce of at most kShmAllReduceMaxBytes inside a node costs what the shared-memory
// fit says (its bytes term n - 1 times, from rank 0), a larger one or one across nodes the ring's.
TEST(Planner, SmallAllReducesCostWhatSharedMemoryMeasured) {
  CommCosts comm;
  comm.all_reduce[2] = {1e-3, 1e-9};
  comm.all_reduce_together[2] = {2e-3, 1e-9};
  const double limit = static_cast<double>(kShmAllReduceMaxBytes);
  // No shared-memory fit (a stated device): the ring's, whatever the size.
  EXPECT_DOUBLE_EQ(comm.AllReduce(2, 8192), 1e-3 + 8192e-9);
  comm.shm_all_reduce[2] = {1e-5, 1e-10};
  comm.shm_all_reduce_together[2] = {2e-5, 1e-10};
  EXPECT_DOUBLE_EQ(comm.AllReduce(2, 8192), 1e-5 + 8192e-10);
  EXPECT_DOUBLE_EQ(comm.AllReduce(2, limit), 1e-5 + limit * 1e-10);
  EXPECT_DOUBLE_EQ(comm.AllReduce(2, limit + 4), 1e-3 + (limit + 4) * 1e-9);
  EXPECT_DOUBLE_EQ(comm.AllReduceTogether(2, 8192), 2e-5 + 8192e-10);
  EXPECT_DOUBLE_EQ(comm.AllReduceTogether(2, limit + 4), 2e-3 + (limit + 4) * 1e-9);
  EXPECT_DOUBLE_EQ(comm.AllReduce(4, 8192), 1e-5 + 3 * 8192e-10);  // three buffers through rank 0
  // Across nodes: the inter-node ring.
  comm.ranks_per_node = 2;
  comm.all_reduce_inter[2] = {5e-3, 1e-8};
  EXPECT_DOUBLE_EQ(comm.AllReduce(2, 8192, 2), 5e-3 + 8192e-8);
  EXPECT_DOUBLE_EQ(comm.AllReduce(2, 8192, 1), 1e-5 + 8192e-10);
}

}  // namespace
}  // namespace strata
