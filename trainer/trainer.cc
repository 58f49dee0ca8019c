// trainer.cc: the training loop, evaluation and checkpoints.
#include "trainer/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "cluster/node.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/grad_sync.h"
#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"
#include "trainer/trace.h"
#if STRATA_HAVE_CUDA
#include "common/cuda_check.h"
#include "trainer/comm/nccl_communicator.h"
#include "trainer/ops/cuda_exec.h"
#endif

namespace strata {

struct Trainer::DeviceState {
#if STRATA_HAVE_CUDA
  std::unique_ptr<ops::CudaExec> cuda;
#endif
  ops::Exec exec;
};

Trainer::Trainer(const TrainJob& job) : job_(job) {
  const char* progress = std::getenv("STRATA_PROGRESS");
  launched_ = progress && std::string(progress) == "launcher";
}

Trainer::~Trainer() {
  // The communication thread goes first; the model's tensors before the allocator and stream
  // they live on.
  reducer_.reset();
  ps_.reset();
  client_.reset();
  comm_.reset();
  eval_set_.clear();
  lookahead_.clear();
  optimizer_.reset();
  model_.reset();
}

namespace {

// "{rank}" in `path` becomes the rank.
std::string ForRank(std::string path, int rank) {
  for (size_t at; (at = path.find("{rank}")) != std::string::npos;) path.replace(at, 6, std::to_string(rank));
  return path;
}

// Ids one sample feeds to the embedding tables (what a compact sparse table must hold).
int64_t IdsPerSample(const ModelOptions& m) {
  switch (m.kind) {
    case ModelOptions::Kind::kCtr: return m.fields;
    case ModelOptions::Kind::kGpt: return m.context;
    case ModelOptions::Kind::kMlp: return 0;
  }
  return 0;
}

// Runs f, returning an ops::OutOfMemory thrown inside it as its ResourceExhausted Status with
// what was being done and what the job can change.
template <typename Doing, typename F>
auto CatchOutOfMemory(Doing&& doing, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ops::OutOfMemory& e) {
    return Status::ResourceExhausted(
        std::string(doing()) + ": out of memory allocating " + e.status().message() +
        " (lower train.batch_size, raise train.micro_batches, set model.recompute, or shrink the model)");
  }
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::Create(const TrainJob& job, Node* node) {
  return CatchOutOfMemory([] { return "building the model"; }, [&] { return Build(job, node); });
}

Result<TrainSummary> Trainer::Run() {
  return CatchOutOfMemory([this] { return "training, step " + std::to_string(step_ + 1); },
                          [this] { return RunSteps(); });
}

Result<std::unique_ptr<Trainer>> Trainer::Build(const TrainJob& job, Node* node) {
  auto t = std::unique_ptr<Trainer>(new Trainer(job));
  const SyncOptions& sync = job.sync;
  const bool cluster = sync.mode != SyncOptions::Mode::kLocal;
  if (cluster) {
    if (!node) return Status::InvalidArgument("sync.mode " + std::string(sync.mode == SyncOptions::Mode::kPs ? "ps" : "allreduce/hybrid") + " needs a cluster (strata-launch, or --set cluster.scheduler=...)");
    t->node_ = node;
    t->rank_ = node->rank();
    t->world_ = node->view().Count(Role::kTrainer);
    if (t->rank_ < 0 || t->rank_ >= t->world_) {
      return Status::Internal("trainer rank " + std::to_string(t->rank_) + " of " + std::to_string(t->world_));
    }
    if (job.train.checkpoint_every > 0 && sync.mode != SyncOptions::Mode::kAllReduce) {
      return Status::InvalidArgument(
          "train.checkpoint_every: trainer checkpoints cover sync.mode local and allreduce; with "
          "parameters on the servers, use the servers' durability (server.store.durability)");
    }
  }
  STRATA_ASSIGN_OR_RETURN(Device device, ParseDevice(job.train.device));
  t->device_ = std::make_unique<DeviceState>();
  if (device.is_cuda()) {
#if STRATA_HAVE_CUDA
    if (cluster && job.train.device == "cuda") {
      // No index given: trainers of one host take a device each (ranks are assigned in address
      // order, so a host's trainers have consecutive ranks), as NCCL wants one rank per device.
      int count = 0;
      if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0) device.index = t->rank_ % count;
    }
    STRATA_ASSIGN_OR_RETURN(t->device_->cuda, ops::CudaExec::Create(device.index));
    t->device_->exec = t->device_->cuda->exec();
#else
    return Status::Unimplemented("train.device is " + job.train.device + " but this build has no CUDA");
#endif
  }
  if (job.train.batch_size % t->world_ != 0) {
    return Status::InvalidArgument("train.batch_size " + std::to_string(job.train.batch_size) +
                                   " (the global batch) must be divisible by the " +
                                   std::to_string(t->world_) + " trainers");
  }
  const int64_t local_batch = job.train.batch_size / t->world_;
  const bool servers = sync.mode == SyncOptions::Mode::kPs || sync.mode == SyncOptions::Mode::kHybrid;
  ModelOptions model = job.model;
  if (servers) model.sparse_rows = local_batch * job.train.micro_batches * IdsPerSample(job.model);
  STRATA_ASSIGN_OR_RETURN(t->model_, CreateModel(model, t->device_->exec));
  t->trace_ = std::make_unique<Trace>(!sync.trace_path.empty());
  if (cluster) STRATA_RETURN_IF_ERROR(t->Connect(node));
  t->optimizer_ = Optimizer::Create(job.optimizer, t->model_->params());
  STRATA_ASSIGN_OR_RETURN(t->data_, CreateDataSource(job.data, job.model, job.train.batch_size,
                                                     {t->rank_, t->world_}));
  if (t->rank_ == 0) t->eval_set_ = t->data_->EvalSet(local_batch);
  if (job.data.kind == DataOptions::Kind::kText) {
    // The bar a language model must clear: a model without context reaches this loss at best.
    std::ifstream in(job.data.path, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    t->unigram_entropy_ = UnigramEntropy(bytes);
    if (t->rank_ == 0) {
      spdlog::info("{}: {} bytes, byte-unigram entropy {:.4f} nats", job.data.path, bytes.size(),
                   t->unigram_entropy_);
    }
  }
  std::string metrics = job.train.metrics_path;
  if (!metrics.empty() && (t->rank_ == 0 || metrics.find("{rank}") != std::string::npos)) {
    metrics = ForRank(metrics, t->rank_);
    t->metrics_.open(metrics, std::ios::app);
    if (!t->metrics_) return Status::IOError("cannot open metrics file " + metrics);
  }
  return t;
}

Status Trainer::Connect(Node* node) {
  const SyncOptions& sync = job_.sync;
  const Millis timeout(sync.timeout_ms);
  nn::ParameterRegistry& reg = model_->params();
  if (sync.mode == SyncOptions::Mode::kPs || sync.mode == SyncOptions::Mode::kHybrid) {
    client_ = std::make_unique<PsClient>(*node, timeout);
    STRATA_ASSIGN_OR_RETURN(ps_, PsSync::Create(*client_, reg, job_, trace_.get()));
  }
  if (sync.mode == SyncOptions::Mode::kAllReduce || sync.mode == SyncOptions::Mode::kHybrid) {
    void* compute_stream = nullptr;
    if (reg.exec().is_cuda()) {
#if STRATA_HAVE_CUDA
      // Device gradients all-reduce over NCCL on its own stream, ordered by events.
      NcclOptions nccl;
      nccl.device = reg.exec().device.index;
      nccl.timeout = timeout;
      STRATA_ASSIGN_OR_RETURN(comm_, MakeNcclCommunicator(*node, "trainers/dp", rank_, world_, nccl));
      compute_stream = reg.exec().stream;
#endif
    } else {
      GlooOptions gloo;
      gloo.timeout = timeout;
      STRATA_ASSIGN_OR_RETURN(comm_, MakeGlooCommunicator(*node, "trainers/dp", rank_, world_, gloo));
    }
    // Every replica starts from the same values: the initialisers are seeded by name, so they
    // already are; the broadcast makes it so whatever the model did at construction.
#if STRATA_HAVE_CUDA
    if (reg.exec().is_cuda()) {
      // The values were uploaded on the legacy stream, and NCCL's stream does not wait for it.
      CUDA_CHECK(cudaDeviceSynchronize());
    }
#endif
    std::vector<nn::Parameter*> local;
    for (auto& p : reg.params()) {
      if (p->remote) continue;
      local.push_back(p.get());
      STRATA_RETURN_IF_ERROR(comm_->Broadcast(p->value.data_as<float>(), p->value.numel(), 0)
                                 .WithContext("broadcasting " + p->name));
    }
    // A stream-ordered (NCCL) communicator has only enqueued the broadcasts.
    STRATA_RETURN_IF_ERROR(comm_->Synchronize().WithContext("broadcasting the parameters"));
    const auto bytes = static_cast<size_t>(sync.bucket_mb * 1024 * 1024);
    reducer_ = std::make_unique<BucketAllReducer>(*comm_, std::move(local), bytes, sync.overlap,
                                                  trace_.get(), compute_stream);
    if (rank_ == 0) {
      spdlog::info("all-reduce over {} trainers: {} buckets of up to {} MiB{}", world_,
                   reducer_->num_buckets(), sync.bucket_mb, sync.overlap ? ", overlapped with backward" : "");
    }
  }
  return Status::OK();
}

std::vector<Batch> Trainer::NextBatches() {
  if (!lookahead_.empty()) return std::move(lookahead_);
  std::vector<Batch> batches;
  for (int64_t m = 0; m < job_.train.micro_batches; ++m) batches.push_back(data_->Next());
  return batches;
}

Result<double> Trainer::TrainStep() {
  nn::ParameterRegistry& reg = model_->params();
  const int64_t micro = job_.train.micro_batches;
  std::vector<Batch> batches = NextBatches();
  lookahead_.clear();
  const bool prefetch = ps_ && job_.sync.prefetch;
  if (ps_) {
    STRATA_RETURN_IF_ERROR(ps_->Prepare(batches, step_));
    if (prefetch && ps_->prefetch_before_compute()) {
      lookahead_ = NextBatches();
      ps_->Prefetch(lookahead_);
    }
  }
  reg.ZeroGrad();
  double loss = 0;
  {
    Trace::Scope fb(trace_.get(), "forward + backward", "compute", 0, step_);
    for (int64_t m = 0; m < micro; ++m) {
      // Dropout masks depend on (step, micro-batch) only, so a resumed run draws the same ones.
      nn::Context ctx(reg.exec(), true, rng::Hash(job_.model.seed, (step_ * micro + m) * world_ + rank_));
      if (reducer_ && m == micro - 1) {
        reducer_->BeginStep(step_);
        ctx.set_grad_ready([this](nn::Parameter& p) { reducer_->GradReady(p); });
      }
      loss += model_->ForwardBackward(batches[m], ctx, 1.0f / static_cast<float>(micro));
    }
  }
  loss /= micro;
  if (reducer_) {
    STRATA_RETURN_IF_ERROR(reducer_->Finish());
    // On NCCL this goes after the step's buckets on its stream and waits for all of them.
    float l = static_cast<float>(loss);
    STRATA_RETURN_IF_ERROR(comm_->AllReduceHost(&l, 1, ReduceOp::kAvg).WithContext("all-reducing the loss"));
    loss = l;
  }
  if (ps_) {
    STRATA_RETURN_IF_ERROR(ps_->PushAndClock(step_));
    if (prefetch && !ps_->prefetch_before_compute()) {
      lookahead_ = NextBatches();
      ps_->Prefetch(lookahead_);
    }
  }
  return loss;
}

Status Trainer::Finish() {
  // Every trainer has pushed its last gradients before rank 0 evaluates.
  Status s = node_->Barrier("train/done", wire::BarrierScope::TRAINERS, Millis(job_.sync.timeout_ms));
  if (s.ok()) return s;
  if (ps_ && job_.sync.consistency == Consistency::kAsp) {
    spdlog::warn("not every trainer finished ({}); asynchronous training goes on without it", s.ToString());
    return Status::OK();
  }
  return s.WithContext("waiting for the other trainers to finish");
}

Result<TrainSummary> Trainer::RunSteps() {
  const TrainOptions& to = job_.train;
  if (to.resume && !to.checkpoint_dir.empty()) {
    const std::string latest = to.checkpoint_dir + "/latest";
    std::ifstream in(latest);
    std::string name;
    if (in && std::getline(in, name) && !name.empty()) {
      STRATA_RETURN_IF_ERROR(LoadCheckpoint(to.checkpoint_dir + "/" + name));
      spdlog::info("resumed from {} at step {}", name, step_);
    }
  }
  TrainSummary summary;
  summary.first_step = step_;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double window_start = elapsed();
  while (step_ < to.steps) {
    const double lr = LearningRate(job_.optimizer, step_, to.steps);
    STRATA_ASSIGN_OR_RETURN(const double loss, TrainStep());
    double norm = 0;
    {
      Trace::Scope opt(trace_.get(), "optimizer", "optim", 0, step_);
      norm = ClipGradNorm(model_->params(), job_.optimizer.clip_norm);
      optimizer_->Step(lr);
    }
    ++step_;
    summary.losses.push_back(loss);
    if (!std::isfinite(loss)) return Status::Aborted("loss is " + std::to_string(loss) + " at step " + std::to_string(step_));
    if (step_ % to.log_every == 0 || step_ == to.steps) {
      const double now = elapsed();
      Log(loss, lr, norm, (now - window_start) / std::min<int64_t>(to.log_every, step_ - summary.first_step), now);
      window_start = now;
    }
    if (to.eval_every > 0 && step_ % to.eval_every == 0 && step_ != to.steps && rank_ == 0) Evaluate();
    if (to.checkpoint_every > 0 && step_ % to.checkpoint_every == 0 && rank_ == 0) {
      STRATA_RETURN_IF_ERROR(SaveCheckpoint());
    }
  }
  summary.seconds = elapsed();
  const int64_t steps_run = step_ - summary.first_step;
  summary.samples_per_second = summary.seconds > 0 ? steps_run * to.batch_size * to.micro_batches / summary.seconds : 0;
  if (to.progress && isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
  if (reducer_) {
    summary.comm_seconds = reducer_->comm_seconds();
    summary.exposed_comm_seconds = reducer_->exposed_seconds();
  }
  if (trace_->enabled()) {
    const std::string path = ForRank(job_.sync.trace_path, rank_);
    STRATA_RETURN_IF_ERROR(trace_->Write(path, rank_));
    spdlog::info("wrote the timeline to {}", path);
  }
  if (node_) STRATA_RETURN_IF_ERROR(Finish());
  if (rank_ == 0) summary.eval = Evaluate();
  return summary;
}

void Trainer::Log(double loss, double lr, double grad_norm, double step_seconds, double elapsed) {
  const TrainOptions& to = job_.train;
  const int64_t samples = to.batch_size * to.micro_batches;
  const int64_t tokens = job_.model.kind == ModelOptions::Kind::kGpt ? samples * job_.model.context : 0;
  const double sps = samples / step_seconds;
  const double eta = step_seconds * static_cast<double>(to.steps - step_);
  nlohmann::json j = {{"step", step_},          {"loss", loss},
                      {"lr", lr},              {"grad_norm", grad_norm},
                      {"samples_per_s", sps},  {"elapsed_s", elapsed}};
  if (tokens) j["tokens_per_s"] = tokens / step_seconds;
  if (launched_) {
    // strata-launch folds every trainer's progress into one line.
    nlohmann::json p = {{"rank", rank_}, {"step", step_}, {"steps", to.steps}, {"loss", loss},
                        {"samples_per_s", sps / world_}, {"eta_s", eta}};
    std::printf("@progress %s\n", p.dump().c_str());
    std::fflush(stdout);
  } else if (to.progress && rank_ == 0) {
    const int e = static_cast<int>(eta);
    std::string rate = tokens ? std::to_string(static_cast<int64_t>(tokens / step_seconds)) + " tok/s"
                              : std::to_string(static_cast<int64_t>(sps)) + " samples/s";
    std::fprintf(stderr, "%sstep %lld/%lld | loss %.5f | lr %.2e | %s | ETA %02d:%02d:%02d%s",
                 isatty(STDERR_FILENO) ? "\r" : "", static_cast<long long>(step_),
                 static_cast<long long>(to.steps), loss, lr, rate.c_str(), e / 3600, e / 60 % 60,
                 e % 60, isatty(STDERR_FILENO) ? "   " : "\n");
    std::fflush(stderr);
  }
  WriteMetrics(j.dump());
}

void Trainer::WriteMetrics(const std::string& json_line) {
  if (metrics_.is_open()) {
    metrics_ << json_line << "\n";
    metrics_.flush();
  }
}

EvalMetrics Trainer::Evaluate() {
  EvalMetrics m;
  std::vector<float> scores, labels, oracle;
  double weighted = 0;
  for (const Batch& held : eval_set_) {
    std::vector<Batch> one = {held};
    if (ps_) {
      // The servers hold the parameters: pull them (and this batch's rows) first.
      if (Status st = ps_->Prepare(one, step_); !st.ok()) {
        spdlog::error("evaluation: {}", st.ToString());
        m.loss = std::nan("");
        return m;
      }
    }
    const Batch& b = one[0];
    nn::Context ctx(model_->exec(), false, 0);
    Tensor out;
    const double loss = model_->Evaluate(b, ctx, &out);
    weighted += loss * b.samples;
    m.samples += b.samples;
    if (job_.model.kind == ModelOptions::Kind::kCtr) {
      scores.insert(scores.end(), out.data_as<float>(), out.data_as<float>() + out.numel());
      labels.insert(labels.end(), b.target.data_as<float>(), b.target.data_as<float>() + b.samples);
      if (b.oracle.defined()) {
        oracle.insert(oracle.end(), b.oracle.data_as<float>(), b.oracle.data_as<float>() + b.samples);
      }
    }
  }
  m.loss = m.samples ? weighted / m.samples : 0;
  nlohmann::json j = {{"step", step_}, {"eval_loss", m.loss}, {"eval_samples", m.samples}};
  if (unigram_entropy_ > 0) j["unigram_entropy"] = unigram_entropy_;
  if (!scores.empty()) {
    m.auc = Auc(scores, labels);
    j["auc"] = m.auc;
    if (oracle.size() == labels.size()) {
      m.oracle_auc = Auc(oracle, labels);
      j["oracle_auc"] = m.oracle_auc;
    }
  }
  WriteMetrics(j.dump());
  return m;
}

// --- Checkpoints: "STRATACK", u32 version, i64 step, i64 data position, i64 optimizer step,
// u32 count, then per tensor: u32 name length, name, i64 numel, f32 values; u64 FNV-1a of all
// preceding bytes.

namespace {

constexpr char kMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'C', 'K'};
constexpr uint32_t kVersion = 1;

class HashingWriter {
 public:
  explicit HashingWriter(std::ofstream& out) : out_(out) {}
  void Write(const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) hash_ = (hash_ ^ b[i]) * 1099511628211ull;
    out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
  }
  template <class T>
  void Put(T v) { Write(&v, sizeof(v)); }
  uint64_t hash() const { return hash_; }

 private:
  std::ofstream& out_;
  uint64_t hash_ = 1469598103934665603ull;
};

class HashingReader {
 public:
  explicit HashingReader(std::ifstream& in) : in_(in) {}
  bool Read(void* p, size_t n) {
    if (!in_.read(static_cast<char*>(p), static_cast<std::streamsize>(n))) return false;
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) hash_ = (hash_ ^ b[i]) * 1099511628211ull;
    return true;
  }
  template <class T>
  bool Get(T& v) { return Read(&v, sizeof(v)); }
  uint64_t hash() const { return hash_; }

 private:
  std::ifstream& in_;
  uint64_t hash_ = 1469598103934665603ull;
};

std::vector<std::pair<std::string, Tensor>> CheckpointTensors(Model& model, Optimizer& opt) {
  std::vector<std::pair<std::string, Tensor>> all;
  for (auto& p : model.params().params()) all.emplace_back(p->name, p->value);
  for (auto& s : opt.State()) all.push_back(s);
  return all;
}

}  // namespace

Status Trainer::SaveCheckpoint() {
  const std::string& dir = job_.train.checkpoint_dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  const std::string name = "ckpt-" + std::to_string(step_) + ".bin";
  const std::string tmp = dir + "/" + name + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IOError("cannot write " + tmp);
    HashingWriter w(out);
    w.Write(kMagic, sizeof(kMagic));
    w.Put(kVersion);
    w.Put<int64_t>(step_);
    w.Put<int64_t>(data_->position());
    w.Put<int64_t>(optimizer_->step());
    auto tensors = CheckpointTensors(*model_, *optimizer_);
    w.Put(static_cast<uint32_t>(tensors.size()));
    for (auto& [tname, t] : tensors) {
      Tensor host = ToHost(t);
      w.Put(static_cast<uint32_t>(tname.size()));
      w.Write(tname.data(), tname.size());
      w.Put<int64_t>(host.numel());
      w.Write(host.data(), host.nbytes());
    }
    const uint64_t h = w.hash();
    out.write(reinterpret_cast<const char*>(&h), sizeof(h));
    out.flush();
    if (!out) return Status::IOError("writing " + tmp + " failed");
  }
  std::filesystem::rename(tmp, dir + "/" + name, ec);
  if (ec) return Status::IOError("cannot rename " + tmp + ": " + ec.message());
  {
    std::ofstream latest(dir + "/latest.tmp", std::ios::trunc);
    latest << name << "\n";
    if (!latest) return Status::IOError("cannot write " + dir + "/latest.tmp");
  }
  std::filesystem::rename(dir + "/latest.tmp", dir + "/latest", ec);
  if (ec) return Status::IOError("cannot update " + dir + "/latest: " + ec.message());
  WriteMetrics(nlohmann::json{{"step", step_}, {"checkpoint", dir + "/" + name}}.dump());
  return Status::OK();
}

Status Trainer::LoadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open checkpoint " + path);
  HashingReader r(in);
  auto bad = [&](const std::string& what) { return Status::Corruption(path + ": " + what); };
  char magic[8];
  uint32_t version = 0, count = 0;
  int64_t step = 0, position = 0, opt_step = 0;
  if (!r.Read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0) return bad("not a strata checkpoint");
  if (!r.Get(version) || version != kVersion) return bad("unsupported version");
  if (!r.Get(step) || !r.Get(position) || !r.Get(opt_step) || !r.Get(count)) return bad("truncated header");
  std::map<std::string, Tensor> want;
  for (auto& [name, t] : CheckpointTensors(*model_, *optimizer_)) want[name] = t;
  if (count != want.size()) {
    return Status::InvalidArgument(path + ": holds " + std::to_string(count) + " tensors, the model and optimizer have " + std::to_string(want.size()));
  }
  std::vector<std::pair<Tensor, Tensor>> loaded;  // (destination, host values): applied after the checksum
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = 0;
    if (!r.Get(len) || len > 4096) return bad("bad tensor name");
    std::string name(len, '\0');
    int64_t numel = 0;
    if (!r.Read(name.data(), len) || !r.Get(numel)) return bad("truncated tensor header");
    auto it = want.find(name);
    if (it == want.end()) return Status::InvalidArgument(path + ": unknown tensor " + name);
    if (numel != it->second.numel()) return Status::InvalidArgument(path + ": " + name + " has a different size");
    Tensor host = ops::NewTensor(ops::Exec::Cpu(), it->second.shape());
    if (!r.Read(host.data(), host.nbytes())) return bad("truncated values of " + name);
    loaded.emplace_back(it->second, host);
  }
  const uint64_t h = r.hash();
  uint64_t stored = 0;
  if (!in.read(reinterpret_cast<char*>(&stored), sizeof(stored)) || stored != h) return bad("checksum mismatch");
  for (auto& [dst, host] : loaded) STRATA_RETURN_IF_ERROR(dst.CopyFrom(host));
  step_ = step;
  data_->Seek(position);
  optimizer_->set_step(opt_step);
  return Status::OK();
}

}  // namespace strata
