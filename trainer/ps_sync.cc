// ps_sync.cc: PsSync, whole-model pulls and pushes (ps, hybrid) and the unit pipeline of
// offload.
#include "trainer/ps_sync.h"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

#include "trainer/nn/tp_group.h"
#include "trainer/ops/ops.h"

namespace strata {
namespace {

// Seconds covered by the union of `spans`.
double UnionSeconds(std::vector<std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0;
  for (size_t i = 0; i < spans.size();) {
    auto [start, end] = spans[i];
    for (++i; i < spans.size() && spans[i].first <= end; ++i) end = std::max(end, spans[i].second);
    total += std::chrono::duration<double>(end - start).count();
  }
  return total;
}

}  // namespace

Result<std::unique_ptr<PsSync>> PsSync::Create(PsClient& client, nn::ParameterRegistry& reg,
                                               const TrainJob& job, const PsSyncOptions& options,
                                               Trace* trace) {
  const SyncOptions& sync = job.sync;
  const OptimizerOptions& o = job.optimizer;
  const bool all = sync.mode == SyncOptions::Mode::kPs || sync.mode == SyncOptions::Mode::kOffload;
  // The servers apply the learning rate each push carries (the schedule's at the pushing step).
  // Global clipping (ps, offload) needs a clock whose pushes are all known before any is applied:
  // BSP, every parameter a dense table, each table's pushes summed once (no tp copies).
  const std::string where = sync.mode == SyncOptions::Mode::kOffload ? "sync.mode: offload"
                            : all ? "sync.mode: ps" : "sync.mode: hybrid (embeddings on the servers)";
  if (o.nesterov) return Status::InvalidArgument("optimizer.nesterov is not available with " + where);
  const bool clip = all && o.clip_norm > 0;
  if (clip && sync.consistency != Consistency::kBsp) {
    return Status::InvalidArgument("optimizer.clip_norm (global) with " + where + " needs sync.consistency: bsp, not " +
                                   (sync.consistency == Consistency::kAsp ? "asp" : "ssp") +
                                   ": the servers apply each push as it arrives, so no clock has a global norm to clip by");
  }
  if (clip && !options.table_suffix.empty()) {
    return Status::InvalidArgument("optimizer.clip_norm (global) with " + where +
                                   " and tensor parallelism: each tp rank's tables hold their own copy of the whole "
                                   "parameters, which the servers' norm would count once per rank");
  }
  if (clip && SparseOnServers(job)) {
    for (const auto& p : reg.params()) {
      if (p->sparse) {
        return Status::InvalidArgument("optimizer.clip_norm (global) with " + where + ": parameter " + p->name +
                                       " is a sparse table, whose clock has no fixed number of pushes to wait for");
      }
    }
  }
  auto sync_ptr = std::unique_ptr<PsSync>(new PsSync(client, trace));
  PsSync& ps = *sync_ptr;
  ps.optimizer_ = o;
  ps.total_steps_ = job.train.steps;
  ps.early_prefetch_ = sync.prefetch && sync.consistency == Consistency::kAsp;
  // A BSP clock's pushes are averaged over every live trainer; a table here is pushed by this
  // stage's replicas only.
  if (sync.consistency == Consistency::kBsp) ps.push_scale_ = static_cast<float>(options.trainers) / options.replicas;
  // offload under BSP: a dense chunk is applied as soon as its replicas all pushed it (the mean
  // over them), not at the clock messages, so the servers' AdamW runs behind the rest of
  // backward and the next step's pulls are answered table by table.
  // With global clipping (ps too) the chunks are held until the clock messages bring the clock's
  // clipping factor, but counted the same way: the servers know when a clock's pushes are all in.
  const bool eager = (sync.mode == SyncOptions::Mode::kOffload || clip) && sync.consistency == Consistency::kBsp;
  ps.clip_norm_ = clip ? o.clip_norm : 0.0;
  ps.dense_scale_ = eager ? 1.0f : ps.push_scale_;
  ps.wire_bf16_ = sync.wire == DType::kBF16;
  ps.early_pulls_ = sync.pull_early && sync.consistency == Consistency::kBsp;
  ps.exec_ = reg.exec();
  uint32_t next_id = options.first_table_id;
  const bool sparse_tables = SparseOnServers(job);
  // The dense tables' bytes spread evenly over the servers (every trainer of the stage places
  // the same tables in the same order, so they agree).
  STRATA_ASSIGN_OR_RETURN(const uint32_t dense_servers, client.DenseServers());
  std::vector<uint64_t> loads(dense_servers);
  for (auto& p : reg.params()) {
    if (!all && !p->sparse) continue;
    const bool sparse = p->sparse && sparse_tables;
    TableSpec spec;
    spec.id = next_id++;
    spec.name = p->name + options.table_suffix;
    spec.init = p->init;
    spec.consistency = sync.consistency;
    spec.staleness = static_cast<uint32_t>(sync.staleness);
    spec.aggregate = Aggregate::kMean;
    OptimizerSpec& os = spec.optimizer;
    os.lr = static_cast<float>(o.lr);
    os.weight_decay = p->weight_decay ? static_cast<float>(o.weight_decay) : 0.0f;
    if (o.kind == OptimizerOptions::Kind::kSgd) {
      os.kind = OptimizerKind::kSgd;
      os.momentum = static_cast<float>(o.momentum);
    } else {
      os.kind = OptimizerKind::kAdamW;
      os.beta1 = static_cast<float>(o.beta1);
      os.beta2 = static_cast<float>(o.beta2);
      os.eps = static_cast<float>(o.eps);
    }
    if (sparse) {
      spec.kind = TableKind::kSparse;
      spec.dim = static_cast<uint32_t>(p->value.size(1));
      ps.sparse_.push_back({p.get(), spec.id, spec.dim});
      ps.capacity_ = p->value.size(0);
    } else {
      spec.kind = TableKind::kDense;
      spec.numel = static_cast<uint64_t>(p->value.numel());
      if (eager) spec.pushers = static_cast<uint32_t>(options.replicas);
      spec.clipped = clip;
      spec.chunk_floats = static_cast<uint32_t>(sync.chunk_kb * 1024 / sizeof(float));
      // An embedding held dense starts as its sparse table would: keyed by rows.
      if (p->sparse) spec.init.row_dim = static_cast<uint32_t>(p->value.size(1));
      PlaceDense(&spec, &loads);
      ps.dense_index_[p.get()] = ps.dense_.size();
      ps.dense_.push_back({p.get(), spec.id, 0});
    }
    STRATA_RETURN_IF_ERROR(client.CreateTable(spec).WithContext("creating table " + spec.name));
    p->remote = true;
  }
  return sync_ptr;
}

std::vector<uint64_t> PsSync::Keys(const std::vector<Batch>& batches) {
  std::vector<uint64_t> keys;
  for (const Batch& b : batches) {
    const int32_t* ids = b.ids.data_as<int32_t>();
    for (int64_t i = 0; i < b.ids.numel(); ++i) keys.push_back(static_cast<uint64_t>(ids[i]));
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

std::unique_ptr<PsSync::Pull> PsSync::StartPull(std::vector<uint64_t> keys) {
  auto pull = std::make_unique<Pull>();
  pull->keys = std::move(keys);
  for (const Remote& r : offload() ? std::vector<Remote>() : dense_) {
    pull->dense.emplace_back(static_cast<size_t>(r.param->value.numel()));
    pull->tickets.push_back({client_.PullDense(r.table, pull->dense.back().data(), wire_bf16_), Clock::now()});
  }
  for (const Remote& r : sparse_) {
    pull->sparse.emplace_back(pull->keys.size() * r.dim);
    pull->tickets.push_back({client_.Pull(r.table, pull->keys, pull->sparse.back().data(), wire_bf16_), Clock::now()});
  }
  return pull;
}

void PsSync::Prefetch(const std::vector<Batch>& batches) {
  prefetched_ = StartPull(sparse_.empty() ? std::vector<uint64_t>() : Keys(batches));
}

Status PsSync::Prepare(std::vector<Batch>& batches, int64_t step, bool training) {
  Trace::Scope scope(trace_, "pull", "ps", 0, step);
  const auto started = Clock::now();
  if (training) {
    // The schedule rides on this step's pushes: the servers apply the rate a local optimizer
    // would (the same float), not the tables' peak lr.
    client_.set_lr(static_cast<float>(LearningRate(optimizer_, step, total_steps_)));
  }
  if (offload() && training) {
    step_ = step;
    const bool delayed = delayed_from_ >= 0 && step >= delayed_from_;
    // Delayed: the pulls issued a step ago serve this step (at the first delayed step, those
    // issued after the last undelayed clock do).
    if (delayed && !ahead_.empty()) next_ = std::move(ahead_);
    if (next_.empty()) IssueUnitPulls(next_, /*staged=*/exec_.is_cuda());  // the first step
    // The step after this one runs on what the servers hold before this trainer's clock.
    if (delayed) {
      IssueUnitPulls(ahead_, /*staged=*/true);
      for (UnitPull& up : ahead_) up.predict = predict_;
    }
  }
  if (offload() && sparse_.empty()) return Status::OK();
  std::vector<uint64_t> keys = sparse_.empty() ? std::vector<uint64_t>() : Keys(batches);
  if (static_cast<int64_t>(keys.size()) > capacity_ && !sparse_.empty()) {
    return Status::Internal("a step touches " + std::to_string(keys.size()) + " ids, more than the " +
                            std::to_string(capacity_) + " rows kept locally");
  }
  std::unique_ptr<Pull> pull;
  if (prefetched_ && prefetched_->keys == keys) {
    pull = std::move(prefetched_);
  } else {
    prefetched_.reset();  // for other batches (an evaluation came between): pull afresh
    pull = StartPull(keys);
  }
  for (InFlight& f : pull->tickets) STRATA_RETURN_IF_ERROR(WaitRecorded(f, /*pull=*/true, "pull"));
  pull_exposed_ += SecondsSince(started);
  for (size_t i = 0; i < pull->dense.size(); ++i) {
    Tensor& v = dense_[i].param->value;
    STRATA_RETURN_IF_ERROR(v.CopyFrom(Tensor::HostView(pull->dense[i].data(), v)));
  }
  const int64_t n = static_cast<int64_t>(pull->keys.size());
  for (size_t i = 0; i < sparse_.size() && n > 0; ++i) {
    Tensor rows = sparse_[i].param->value.Narrow(0, 0, n);
    STRATA_RETURN_IF_ERROR(rows.CopyFrom(Tensor::HostView(pull->sparse[i].data(), rows)));
  }
  if (!sparse_.empty()) {
    // Ids become rows of the compact tables: the position of the id among the step's keys.
    for (Batch& b : batches) {
      Tensor local = ops::NewTensor(ops::Exec::Cpu(), b.ids.shape(), DType::kI32);
      const int32_t* ids = b.ids.data_as<int32_t>();
      int32_t* out = local.data_as<int32_t>();
      for (int64_t j = 0; j < b.ids.numel(); ++j) {
        out[j] = static_cast<int32_t>(std::lower_bound(pull->keys.begin(), pull->keys.end(),
                                                       static_cast<uint64_t>(ids[j])) - pull->keys.begin());
      }
      b.ids = local;
    }
  }
  keys_ = std::move(pull->keys);
  return Status::OK();
}

Status PsSync::Finish(int64_t step) {
  Trace::Scope scope(trace_, "push + clock", "ps", 0, step);
  if (offload()) {
    const auto started = Clock::now();
    for (const Remote& r : dense_) {
      if (!pushed_[dense_index_[r.param]]) PushDense(r);  // backward did not report it
    }
    const int64_t n = static_cast<int64_t>(keys_.size());
    for (const Remote& r : sparse_) {
      if (n == 0) break;
      if (push_scale_ != 1.0f) ops::Scale(exec_, r.param->grad.Narrow(0, 0, n), push_scale_);
      pushes_.emplace_back().f = {SendSparse(r, n), Clock::now()};
    }
    Status status = AcknowledgeAll();
    std::fill(pushed_.begin(), pushed_.end(), false);
    STRATA_RETURN_IF_ERROR(status);
    STRATA_ASSIGN_OR_RETURN(const float clip_scale, GlobalClipScale());
    STRATA_RETURN_IF_ERROR(client_.Clock(clip_scale));
    push_exposed_ += SecondsSince(started);
    // Undelayed: the next step's pulls now, answered once the servers applied this clock, but
    // for the units whose pulls backward issued already. (Delayed, they were issued at this
    // step's start.)
    if (ahead_.empty()) {
      next_ = std::move(early_);
      next_.resize(units_.size());
      for (size_t u = 0; u < units_.size(); ++u) {
        if (!next_[u].issued) IssueUnitPull(next_[u], u, /*staged=*/exec_.is_cuda(), /*next_clock=*/false);
      }
    }
    early_.clear();
    return Status::OK();
  }
  const auto started = Clock::now();
  if (dense_scale_ != 1.0f) {
    for (const Remote& r : dense_) ops::Scale(exec_, r.param->grad, dense_scale_);
  }
  if (push_scale_ != 1.0f) {
    for (const Remote& r : sparse_) ops::Scale(exec_, r.param->grad, push_scale_);
  }
  std::vector<Push> pushes;
  for (const Remote& r : dense_) pushes.push_back(SendDense(r.table, r.param->grad));
  const int64_t n = static_cast<int64_t>(keys_.size());
  for (const Remote& r : sparse_) {
    if (n == 0) break;
    pushes.emplace_back().f = {SendSparse(r, n), Clock::now()};
  }
  // Every push waited for, failed or not, before their copies may go.
  Status status;
  for (Push& p : pushes) {
    if (Status s = WaitRecorded(p.f, /*pull=*/false, "push"); !s.ok() && status.ok()) status = s;
  }
  STRATA_RETURN_IF_ERROR(status);
  STRATA_ASSIGN_OR_RETURN(const float clip_scale, GlobalClipScale());
  STRATA_RETURN_IF_ERROR(client_.Clock(clip_scale));
  push_exposed_ += SecondsSince(started);
  return Status::OK();
}

Result<float> PsSync::GlobalClipScale() {
  if (clip_norm_ <= 0) return 1.0f;
  STRATA_ASSIGN_OR_RETURN(const double sq, client_.GradSumSquares());
  grad_norm_ = std::sqrt(sq);
  // Trainer::ClipGradients' factor, from the same norm on every trainer.
  return grad_norm_ > clip_norm_ ? static_cast<float>(clip_norm_ / (grad_norm_ + 1e-6)) : 1.0f;
}

// ---------------------------------------------------------------------------------------------
// offload: the unit pipeline

PsSync::~PsSync() {
  // Pulls may still be in flight (the delayed update's, an unused prefetch): their replies
  // land in buffers this object owns, written only at Wait, which nobody calls now.
}

void PsSync::SetUnits(const Model& model, int64_t delayed_from, bool predict) {
  delayed_from_ = delayed_from;
  predict_ = predict;
  units_.assign(static_cast<size_t>(model.num_units()), {});
  for (int u = 0; u < model.num_units(); ++u) {
    for (nn::Parameter* p : model.UnitParameters(u)) {
      if (auto it = dense_index_.find(p); it != dense_index_.end()) units_[static_cast<size_t>(u)].push_back(it->second);
    }
  }
  pushed_.assign(dense_.size(), false);
  // The wire brings bf16 values: held so, they take half the bytes and lose nothing (the
  // prediction's extrapolated weights are rounded to bf16).
  if (wire_bf16_) HoldWeightsInBf16();
  // The previous pulls' buffers, allocated now so that the memory line counts them.
  const size_t predicted = predict && delayed_from >= 0 ? dense_.size() : 0;
  last_pull_.assign(wire_bf16_ ? 0 : predicted, {});
  last_pull_bf16_.assign(wire_bf16_ ? predicted : 0, {});
  for (size_t i = 0; i < last_pull_.size(); ++i) last_pull_[i].resize(Floats(i));
  for (size_t i = 0; i < last_pull_bf16_.size(); ++i) last_pull_bf16_[i].resize(Floats(i));
  last_valid_.assign(predicted, false);
  HoldGradsPerUnit();
}

void PsSync::IssueUnitPulls(std::vector<UnitPull>& into, bool staged) {
  into.assign(units_.size(), {});
  for (size_t u = 0; u < units_.size(); ++u) IssueUnitPull(into[u], u, staged, /*next_clock=*/false);
}

void PsSync::IssueUnitPull(UnitPull& up, size_t u, bool staged, bool next_clock) {
  const auto now = Clock::now();
  for (size_t i : units_[u]) {
    const uint32_t table = dense_[i].table;
    if (staged && !bf16_weights_.empty()) {  // kept as the wire brings them
      up.staged_bf16.emplace_back(Floats(i));
      up.pulls.push_back({client_.PullDenseBf16(table, up.staged_bf16.back().data(), next_clock), now});
    } else if (staged) {
      up.staged.emplace_back(Floats(i));
      up.pulls.push_back({client_.PullDense(table, up.staged.back().data(), wire_bf16_, next_clock), now});
    } else if (!bf16_weights_.empty()) {  // host bf16 weights (staged on CUDA)
      up.pulls.push_back({client_.PullDenseBf16(table, bf16_weights_[i].data_as<uint16_t>(), next_clock), now});
    } else {
      up.pulls.push_back(
          {client_.PullDense(table, dense_[i].param->value.data_as<float>(), wire_bf16_, next_clock), now});
    }
  }
  up.issued = true;
  up.pending = !units_[u].empty();
  unit_pulls_ += up.pending ? 1 : 0;
  early_unit_pulls_ += up.pending && next_clock ? 1 : 0;
}

void PsSync::PullEarly(int unit) {
  // The next step's pulls come after the clock (Finish) where the delayed update issued them
  // already, or outside BSP, where a pull is answered at once.
  if (!early_pulls_ || !ahead_.empty() || unit < 0 || static_cast<size_t>(unit) >= units_.size()) return;
  const std::vector<size_t>& idx = units_[static_cast<size_t>(unit)];
  if (idx.empty()) return;
  for (size_t i : idx) {
    if (!pushed_[i]) return;  // not this step's last backward of the unit (micro-batches, a split backward)
  }
  if (early_.size() != units_.size()) early_.assign(units_.size(), {});
  UnitPull& up = early_[static_cast<size_t>(unit)];
  if (up.issued) return;
  IssueUnitPull(up, static_cast<size_t>(unit), /*staged=*/exec_.is_cuda(), /*next_clock=*/true);
}

Status PsSync::WaitRecorded(InFlight& f, bool pull, const char* name) {
  Status s = client_.Wait(f.ticket);
  const Clock::time_point done = PsClient::CompletedAt(f.ticket).value_or(Clock::now());
  (pull ? pull_spans_ : push_spans_).emplace_back(f.issued, std::max(done, f.issued));
  if (trace_ && trace_->enabled()) {
    // On the communication row: the request's life from issue to reply, beside the compute.
    const double end_us = trace_->NowUs() - std::chrono::duration<double, std::micro>(Clock::now() - done).count();
    const double dur_us = std::chrono::duration<double, std::micro>(std::max(done, f.issued) - f.issued).count();
    trace_->Add({name, "ps", 1, end_us - dur_us, dur_us, step_});
  }
  return s;
}

Status PsSync::WaitUnit(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= next_.size()) return Status::OK();
  UnitPull& up = next_[static_cast<size_t>(unit)];
  if (!up.pending) return Status::OK();
  up.pending = false;
  const auto started = Clock::now();
  Status status;
  for (InFlight& f : up.pulls) {
    if (Status s = WaitRecorded(f, /*pull=*/true, "pull"); !s.ok() && status.ok()) status = s;
  }
  const std::vector<size_t>& idx = units_[static_cast<size_t>(unit)];
  for (size_t k = 0; k < up.staged.size() && status.ok(); ++k) {
    status = up.predict ? Predict(idx[k], up.staged[k]) : StoreWeights(idx[k], up.staged[k].data());
  }
  for (size_t k = 0; k < up.staged_bf16.size() && status.ok(); ++k) {
    status = up.predict ? PredictBf16(idx[k], up.staged_bf16[k]) : StoreWeightsBf16(idx[k], up.staged_bf16[k].data());
  }
  up.pulls.clear();
  up.staged.clear();
  up.staged_bf16.clear();
  pull_exposed_ += SecondsSince(started);
  return status.WithContext("pulling unit " + std::to_string(unit) + "'s parameters");
}

// The weights this step computes on, predicted: the pulled ones (one update behind) moved on by
// the update between them and the previous pull, w[n-1] + (w[n-1] - w[n-2]). Consecutive
// updates are close under Adam's momentum, so this tracks the undelayed run's weights far
// better than the stale ones do (PipeMare's and SpecTrain's weight prediction, at its
// simplest). The previous pull is kept per parameter on the host (the delayed update's third
// copy); at the first delayed step it is the parameter itself, pulled undelayed, and nothing
// moves.
Status PsSync::Predict(size_t index, std::vector<float>& pulled) {
  std::vector<float>& last = last_pull_[index];
  if (last.size() != pulled.size()) return Status::Internal("sync.delayed_predict: parameter " + dense_[index].param->name + " changed size");
  if (!last_valid_[index]) {
    STRATA_RETURN_IF_ERROR(LoadWeights(index, last.data()));
    last_valid_[index] = true;
  }
  for (size_t i = 0; i < pulled.size(); ++i) last[i] = 2.0f * pulled[i] - last[i];
  STRATA_RETURN_IF_ERROR(StoreWeights(index, last.data()));
  last.swap(pulled);  // the next prediction starts from this pull
  return Status::OK();
}

Status PsSync::WaitAllUnits() {
  for (size_t u = 0; u < next_.size(); ++u) STRATA_RETURN_IF_ERROR(WaitUnit(static_cast<int>(u)));
  return Status::OK();
}

void PsSync::BeforeUnit(int unit, Pass pass, UnitRange /*walk*/, const nn::Context& /*ctx*/) {
  if (pass == Pass::kForward) {
    if (Status s = WaitUnit(unit); !s.ok()) throw nn::CollectiveFailed(s);
  } else {
    Reap();  // the pushes of the units after this one, acknowledged by now, free their gradients
    MakeGrads(unit);
  }
  if (!bf16_weights_.empty()) MakeValues(unit);
}

void PsSync::AfterUnit(int unit, Pass pass, const nn::Context& /*ctx*/) {
  if (!bf16_weights_.empty()) FreeValues(unit);
  // Its weights are done with for this step once its gradients went: the next step's pull of
  // them can go now, answered as soon as the servers applied them.
  if (pass == Pass::kBackward) PullEarly(unit);
}

int64_t PsSync::staging_bytes() const {
  int64_t floats = 0, halves = 0;
  for (const std::vector<UnitPull>* set : {&next_, &ahead_}) {
    for (const UnitPull& up : *set) {
      for (const auto& v : up.staged) floats += static_cast<int64_t>(v.size());
      for (const auto& v : up.staged_bf16) halves += static_cast<int64_t>(v.size());
    }
  }
  for (const auto& v : last_pull_) floats += static_cast<int64_t>(v.size());
  for (const auto& v : last_pull_bf16_) halves += static_cast<int64_t>(v.size());
  return floats * static_cast<int64_t>(sizeof(float)) + halves * static_cast<int64_t>(sizeof(uint16_t));
}

PsOverlap PsSync::overlap() const {
  PsOverlap o;
  o.push_seconds = UnionSeconds(push_spans_);
  o.pull_seconds = UnionSeconds(pull_spans_);
  o.push_exposed_seconds = push_exposed_;
  o.pull_exposed_seconds = pull_exposed_;
  o.unit_pulls = unit_pulls_;
  o.early_unit_pulls = early_unit_pulls_;
  return o;
}

}  // namespace strata
