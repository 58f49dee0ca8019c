// calibrate.cc: Calibrate (per-unit F/B/I/W times and activation bytes) and its cache file.
#include "trainer/auto/calibrate.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/allocator.h"
#include "common/file.h"
#include "trainer/data.h"
#include "trainer/device.h"
#include "trainer/models/model.h"
#include "trainer/ops/ops.h"

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

// Unit `u` alone, on `sample`, in recompute mode `r`. The allocator must be the exec's own (its
// counters are this measurement's).
Result<UnitProfile> ProfileUnit(const ModelOptions& base, const ops::Exec& exec, const Batch& sample, int u,
                                int n_units, Recompute r, int reps) {
  ModelOptions options = base;
  options.recompute_attention_core = r == Recompute::kSelective;
  UnitSelection one(n_units, false);
  one[u] = true;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, CreateModel(options, exec, one));
  if (r == Recompute::kFull) m->unit(u).set_recompute(true);
  const Batch b = m->ToDevice(sample);
  const UnitRange range{u, u + 1};
  const bool last = u + 1 == n_units;
  Tensor x;
  if (u > 0) {
    x = ops::NewTensor(exec, m->OutputShape(u - 1, b));
    ops::Fill(exec, x, 0.01f);
  }
  Allocator& alloc = exec.alloc();
  std::vector<double> f, full, in, wt, saved, peak;
  int64_t output_bytes = 0;
  for (int rep = 0; rep < reps + 1; ++rep) {  // the first is a warm-up
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
      output_bytes = static_cast<int64_t>(out.nbytes());
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
          f.push_back(tf);
          full.push_back(Since(t));
          saved.push_back(static_cast<double>(alive));
          peak.push_back(static_cast<double>(std::max<int64_t>(0, alloc.stats().peak_bytes_in_use - before - alive)));
        }
      } else {
        m->BackwardUnits(range, dy, ctx, BackwardPart::kInput);
        SynchronizeDevice(exec);
        const double ti = Since(t);
        t = Clock::now();
        m->BackwardWeightUnits(range, ctx);
        SynchronizeDevice(exec);
        if (rep > 0) {
          in.push_back(ti);
          wt.push_back(Since(t));
        }
      }
    }
  }
  UnitProfile p;
  p.f = Median(f);
  p.b = Median(full);
  p.i = Median(in);
  p.w = Median(wt);
  p.saved_bytes = static_cast<int64_t>(Median(saved));
  p.peak_bytes = static_cast<int64_t>(Median(peak));
  p.output_bytes = output_bytes;
  return p;
}

// One optimizer step over the largest unit's parameters, per parameter.
Result<double> ProfileOptimizer(const TrainJob& job, const ops::Exec& exec, int reps) {
  STRATA_ASSIGN_OR_RETURN(std::vector<UnitSpec> units, ModelUnits(job.model));
  int largest = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    if (units[u].params > units[largest].params) largest = static_cast<int>(u);
  }
  if (units[largest].params == 0) return 0.0;
  UnitSelection one(units.size(), false);
  one[largest] = true;
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, CreateModel(job.model, exec, one));
  std::unique_ptr<Optimizer> opt = Optimizer::Create(job.optimizer, m->params());
  std::vector<double> t;
  for (int rep = 0; rep < reps + 1; ++rep) {
    const auto start = Clock::now();
    opt->Step(job.optimizer.lr);
    SynchronizeDevice(exec);
    if (rep > 0) t.push_back(Since(start));
  }
  return Median(t) / static_cast<double>(m->params().NumElements());
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

std::string CalibrationKey(const TrainJob& job, const std::string& device) {
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
    << " momentum=" << job.optimizer.momentum << " device=" << device;
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
      STRATA_ASSIGN_OR_RETURN(UnitProfile p, ProfileUnit(job.model, exec, sample, u, n, key.second, cal.reps));
      profiles.push_back(p);
    }
    cal.units[key] = std::move(profiles);
  }
  if (cal.optimizer_s_per_param <= 0) {
    STRATA_ASSIGN_OR_RETURN(cal.optimizer_s_per_param, ProfileOptimizer(job, exec, cal.reps));
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
  doc[cal.key] = {{"optimizer_s_per_param", cal.optimizer_s_per_param}, {"profiles", profiles}};
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  return WriteFileDurably(path, doc.dump(1) + "\n");  // a reader sees the old cache or the new
}

}  // namespace strata
