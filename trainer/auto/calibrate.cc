// calibrate.cc: Calibrate (per-unit F/B/I/W times and activation bytes) and its cache file.
#include "trainer/auto/calibrate.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/allocator.h"
#include "common/file.h"
#include "trainer/data.h"
#include "trainer/device.h"
#include "trainer/models/model.h"
#include "trainer/ops/ops.h"
#include "trainer/optim.h"
#include "trainer/parallel/plan.h"

namespace strata {
namespace {

using Recompute = ParallelOptions::Recompute;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// What one copy of a measurement saw: its repetitions' times and its bytes.
struct UnitSamples {
  std::vector<double> f, full, in, wt, saved, peak;
  int64_t output_bytes = 0;
};

// Unit `u` alone, on `sample`, in recompute mode `r`, `reps` times after a warm-up; `sync` is
// called before each repetition (the co-run copies' barrier). The allocator must be the exec's
// own (its counters are this measurement's).
Result<UnitSamples> SampleUnit(const ModelOptions& base, const ops::Exec& exec, const Batch& sample, int u,
                               int n_units, Recompute r, int reps, const std::function<void()>& sync) {
  UnitSelection one(n_units, false);
  one[u] = true;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, CreateRecomputingModel(base, r, exec, one));
  const Batch b = m->ToDevice(sample);
  const UnitRange range{u, u + 1};
  const bool last = u + 1 == n_units;
  Tensor x;
  if (u > 0) {
    x = ops::NewTensor(exec, m->OutputShape(u - 1, b));
    ops::Fill(exec, x, 0.01f);
  }
  Allocator& alloc = exec.alloc();
  UnitSamples s;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first is a warm-up
    sync();
    for (const bool split : {false, true}) {
      nn::Context ctx(exec, true, 1);
      SynchronizeDevice(exec);
      const int64_t before = alloc.stats().bytes_in_use;
      alloc.ResetPeak();
      auto t = Clock::now();
      Tensor out = m->ForwardUnits(range, b, x, ctx);
      if (last) m->loss_head().Forward(out, b.target, ctx);
      SynchronizeDevice(exec);
      const double tf = Since(t);
      const int64_t alive = alloc.stats().bytes_in_use - before;
      s.output_bytes = static_cast<int64_t>(out.nbytes());
      t = Clock::now();
      Tensor dy;
      if (last) {
        dy = m->loss_head().Backward(ctx);
      } else {
        dy = ops::NewTensor(exec, out.shape());
        ops::Fill(exec, dy, 0.01f);
      }
      if (!split) {
        m->BackwardUnits(range, dy, ctx, BackwardPart::kFull);
        SynchronizeDevice(exec);
        if (rep > 0) {
          s.f.push_back(tf);
          s.full.push_back(Since(t));
          s.saved.push_back(static_cast<double>(alive));
          s.peak.push_back(static_cast<double>(std::max<int64_t>(0, alloc.stats().peak_bytes_in_use - before - alive)));
        }
      } else {
        m->BackwardUnits(range, dy, ctx, BackwardPart::kInput);
        SynchronizeDevice(exec);
        const double ti = Since(t);
        t = Clock::now();
        m->BackwardWeightUnits(range, ctx);
        SynchronizeDevice(exec);
        if (rep > 0) {
          s.in.push_back(ti);
          s.wt.push_back(Since(t));
        }
      }
    }
  }
  return s;
}

// Runs `measure(exec, sync)` as `corun` copies at once, one thread each with its own allocator
// (copy 0 on the caller's exec when corun is 1), and returns every copy's result in order.
// `sync` is a barrier of the copies. A copy that runs out of memory fails the whole measurement.
template <typename T>
Result<std::vector<T>> CoRun(const ops::Exec& exec, int corun,
                             const std::function<Result<T>(const ops::Exec&, const std::function<void()>&)>& measure) {
  if (corun <= 1 || exec.is_cuda()) {
    STRATA_ASSIGN_OR_RETURN(T one, measure(exec, [] {}));  // out of memory throws to the caller, as any op
    return std::vector<T>{std::move(one)};
  }
  std::barrier<> barrier(corun);
  std::vector<std::unique_ptr<AlignedHostAllocator>> allocs;
  std::vector<Result<T>> out;
  for (int k = 0; k < corun; ++k) {
    allocs.push_back(std::make_unique<AlignedHostAllocator>());
    out.emplace_back(Status::Aborted("co-run copy " + std::to_string(k) + " did not run"));
  }
  {
    std::vector<std::jthread> threads;
    for (int k = 0; k < corun; ++k) {
      threads.emplace_back([&, k] {
        ops::Exec e = exec;
        e.allocator = allocs[k].get();
        auto sync = [&] { barrier.arrive_and_wait(); };
        try {
          out[k] = measure(e, sync);
        } catch (const ops::OutOfMemory& oom) {
          out[k] = oom.status();
        }
        // A copy that failed leaves the barrier, so the others never wait on it.
        if (!out[k].ok()) barrier.arrive_and_drop();
      });
    }
  }
  std::vector<T> all;
  for (Result<T>& r : out) {
    if (!r.ok()) return r.status();
    all.push_back(std::move(*r));
  }
  return all;
}

Result<UnitProfile> ProfileUnit(const ModelOptions& base, const ops::Exec& exec, const Batch& sample, int u,
                                int n_units, Recompute r, int reps, int corun) {
  STRATA_ASSIGN_OR_RETURN(
      std::vector<UnitSamples> copies,
      CoRun<UnitSamples>(exec, corun, [&](const ops::Exec& e, const std::function<void()>& sync) {
        return SampleUnit(base, e, sample, u, n_units, r, reps, sync);
      }));
  UnitSamples all;
  for (const UnitSamples& c : copies) {
    for (auto [to, from] : {std::pair{&all.f, &c.f}, {&all.full, &c.full}, {&all.in, &c.in}, {&all.wt, &c.wt}}) {
      to->insert(to->end(), from->begin(), from->end());
    }
  }
  UnitProfile p;
  p.f = Median(all.f);
  p.b = Median(all.full);
  p.i = Median(all.in);
  p.w = Median(all.wt);
  p.saved_bytes = static_cast<int64_t>(Median(copies[0].saved));
  p.peak_bytes = static_cast<int64_t>(Median(copies[0].peak));
  p.output_bytes = copies[0].output_bytes;
  return p;
}

// The gradient-norm pass and one optimizer step over the largest unit's parameters, per
// parameter (median over the repetitions of every co-run copy).
Result<double> ProfileOptimizer(const TrainJob& job, const ops::Exec& exec, int reps, int corun) {
  STRATA_ASSIGN_OR_RETURN(std::vector<UnitSpec> units, ModelUnits(job.model));
  int largest = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].params > units[largest].params) largest = static_cast<int>(u);
  }
  if (units[largest].params == 0) return 0.0;
  STRATA_ASSIGN_OR_RETURN(
      std::vector<std::vector<double>> copies,
      CoRun<std::vector<double>>(exec, corun, [&](const ops::Exec& e, const std::function<void()>& sync)
                                                  -> Result<std::vector<double>> {
        UnitSelection one(units.size(), false);
        one[largest] = true;
        STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, CreateModel(job.model, e, one));
        std::unique_ptr<Optimizer> opt = Optimizer::Create(job.optimizer, m->params());
        const double n = static_cast<double>(m->params().NumElements());
        double norm = 0;  // summed so the pass is not optimised away
        std::vector<double> t;
        for (int rep = 0; rep < reps + 1; ++rep) {
          sync();
          const auto start = Clock::now();
          // What the trainer's step does after backward, every step: the gradient norm's pass
          // over every gradient (ClipGradients), then the update.
          norm += GradSquaredSum(m->params());
          opt->Step(job.optimizer.lr);
          SynchronizeDevice(e);
          if (rep > 0) t.push_back(Since(start) / n);
        }
        if (!std::isfinite(norm)) return Status::Internal("calibration: the gradient norm is not finite");
        return t;
      }));
  std::vector<double> all;
  for (const std::vector<double>& c : copies) all.insert(all.end(), c.begin(), c.end());
  return Median(all);
}

const char* KindName(ModelOptions::Kind k) {
  switch (k) {
    case ModelOptions::Kind::kMlp: return "mlp";
    case ModelOptions::Kind::kGpt: return "gpt";
    case ModelOptions::Kind::kCtr: return "ctr";
  }
  return "?";
}

Result<Recompute> ParseRecompute(const std::string& s) {
  if (s == "none") return Recompute::kNone;
  if (s == "selective") return Recompute::kSelective;
  if (s == "full") return Recompute::kFull;
  return Status::Corruption("recompute \"" + s + "\"");
}

}  // namespace

std::string_view RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

Result<const std::vector<UnitProfile>*> Calibration::Find(int64_t micro_batch, Recompute r) const {
  auto it = units.find({micro_batch, r});
  if (it == units.end()) {
    return Status::NotFound("no calibration for micro-batch " + std::to_string(micro_batch) + ", recompute " +
                            std::string(RecomputeName(r)));
  }
  return &it->second;
}

int CalibrationCorun(int world, int cores, const std::string& device) {
  if (cores <= 0 || device != "cpu") return 1;
  return std::max(1, std::min(world, cores));
}

std::string CalibrationKey(const TrainJob& job, const std::string& device, int threads, int corun) {
  const ModelOptions& m = job.model;
  std::ostringstream k;
  k << KindName(m.kind) << " seed=" << m.seed << " recompute=" << m.recompute;
  switch (m.kind) {
    case ModelOptions::Kind::kMlp: k << " in=" << m.mlp_in << " hidden=" << m.mlp_hidden << " out=" << m.mlp_out; break;
    case ModelOptions::Kind::kGpt:
      k << " layers=" << m.layers << " heads=" << m.heads << " width=" << m.width << " context=" << m.context
        << " vocab=" << m.vocab << " dropout=" << m.dropout;
      break;
    case ModelOptions::Kind::kCtr:
      k << " fields=" << m.fields << " field_vocab=" << m.field_vocab << " dense=" << m.dense
        << " embed_dim=" << m.embed_dim << " hidden=" << m.ctr_hidden;
      break;
  }
  k << " optimizer=" << (job.optimizer.kind == OptimizerOptions::Kind::kAdamW ? "adamw" : "sgd")
    << " momentum=" << job.optimizer.momentum << " device=" << device << " threads=" << threads << " corun=" << corun;
  return k.str();
}

Status Calibrate(const TrainJob& job, const ops::Exec& exec, const std::vector<ProfileKey>& needed,
                 Calibration& cal) {
  STRATA_ASSIGN_OR_RETURN(std::vector<UnitSpec> units, ModelUnits(job.model));
  const int n = static_cast<int>(units.size());
  for (const ProfileKey& key : needed) {
    if (cal.units.count(key)) continue;
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                            CreateDataSource(job.data, job.model, key.first, {0, 1}));
    const Batch sample = data->Next();
    std::vector<UnitProfile> profiles;
    for (int u = 0; u < n; ++u) {
      STRATA_ASSIGN_OR_RETURN(UnitProfile p,
                              ProfileUnit(job.model, exec, sample, u, n, key.second, cal.reps, cal.corun));
      profiles.push_back(p);
    }
    cal.units[key] = std::move(profiles);
  }
  if (cal.optimizer_s_per_param <= 0) {
    STRATA_ASSIGN_OR_RETURN(cal.optimizer_s_per_param, ProfileOptimizer(job, exec, cal.reps, cal.corun));
  }
  return Status::OK();
}

Result<Calibration> LoadCalibration(const std::string& path, const std::string& key) {
  Calibration cal;
  cal.key = key;
  std::ifstream in(path);
  if (!in) return cal;
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return Status::Corruption(path + ": not a JSON object (strata-plan's calibration cache)");
  if (!doc.contains(key)) return cal;
  try {
    const nlohmann::json& c = doc.at(key);
    cal.optimizer_s_per_param = c.at("optimizer_s_per_param").get<double>();
    for (const nlohmann::json& e : c.at("profiles")) {
      STRATA_ASSIGN_OR_RETURN(Recompute r, ParseRecompute(e.at("recompute").get<std::string>()));
      std::vector<UnitProfile> ps;
      for (const nlohmann::json& u : e.at("units")) {
        UnitProfile p;
        p.f = u.at("f").get<double>();
        p.b = u.at("b").get<double>();
        p.i = u.at("i").get<double>();
        p.w = u.at("w").get<double>();
        p.saved_bytes = u.at("saved_bytes").get<int64_t>();
        p.peak_bytes = u.at("peak_bytes").get<int64_t>();
        p.output_bytes = u.at("output_bytes").get<int64_t>();
        ps.push_back(p);
      }
      cal.units[{e.at("micro_batch").get<int64_t>(), r}] = std::move(ps);
    }
    if (c.contains("pipeline_s")) {
      for (const auto& [k, v] : c.at("pipeline_s").items()) cal.pipeline_s[k] = v.get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(path + ": entry \"" + key + "\": " + e.what());
  }
  return cal;
}

Status SaveCalibration(const std::string& path, const Calibration& cal) {
  nlohmann::json doc = nlohmann::json::object();
  if (std::ifstream in(path); in) {
    doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object()) doc = nlohmann::json::object();
  }
  nlohmann::json profiles = nlohmann::json::array();
  for (const auto& [key, ps] : cal.units) {
    nlohmann::json units = nlohmann::json::array();
    for (const UnitProfile& p : ps) {
      units.push_back({{"f", p.f}, {"b", p.b}, {"i", p.i}, {"w", p.w}, {"saved_bytes", p.saved_bytes},
                       {"peak_bytes", p.peak_bytes}, {"output_bytes", p.output_bytes}});
    }
    profiles.push_back({{"micro_batch", key.first}, {"recompute", RecomputeName(key.second)}, {"units", units}});
  }
  doc[cal.key] = {{"optimizer_s_per_param", cal.optimizer_s_per_param},
                  {"profiles", profiles},
                  {"pipeline_s", nlohmann::json(cal.pipeline_s)}};
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  return WriteFileDurably(path, doc.dump(1) + "\n");  // a reader sees the old cache or the new
}

}  // namespace strata
