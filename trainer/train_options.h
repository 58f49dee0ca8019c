// train_options.h: the option sections of a training job (model, data, train, sync) and
// TrainJob, what a Trainer is built from. They are sections of the job file every binary reads
// (tools/job_config.h). Bound with the common config machinery (config.h), so unknown keys,
// types and ranges are checked at start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/logging.h"
#include "ps/replication.h"
#include "ps/table.h"
#include "trainer/ops/exec.h"
#include "trainer/optim.h"

namespace strata {

struct ModelOptions {
  enum class Kind { kMlp, kGpt, kCtr };
  Kind kind = Kind::kMlp;
  uint64_t seed = 1;          // parameter init: the same seed gives the same model anywhere
  bool recompute = false;     // drop block activations in forward, recompute them in backward
  // mlp: in -> hidden -> out, ReLU (the seeds' 1024 -> 4096 -> 1024).
  int64_t mlp_in = 1024;
  int64_t mlp_hidden = 4096;
  int64_t mlp_out = 1024;
  // gpt: byte-level tokens (vocab 256 unless raised), learned positions, pre-norm blocks.
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t width = 128;
  int64_t context = 64;
  int64_t vocab = 256;
  double dropout = 0.0;
  // ctr: `fields` categorical fields of `field_vocab` ids each, `dense` numeric features;
  // embeddings of `embed_dim` feed an MLP with `ctr_hidden` units, plus a per-id scalar (wide).
  int64_t fields = 8;
  int64_t field_vocab = 1000;
  int64_t dense = 0;
  int64_t embed_dim = 8;
  int64_t ctr_hidden = 64;
  // Not a job field (parallel.recompute: selective sets it): attention keeps q, k, v and
  // recomputes its probabilities in backward.
  bool recompute_attention_core = false;
  // Not a job field: with parameter servers, the trainer keeps only the rows a step touches, so
  // every embedding table is built with this many rows (0: the full vocabulary).
  int64_t sparse_rows = 0;
};
void Bind(config::Binder& b, ModelOptions& o);

struct DataOptions {
  enum class Kind { kRegression, kClickLog, kCriteo, kText };
  Kind kind = Kind::kRegression;
  uint64_t seed = 7;          // data stream and planted models
  std::string path;           // criteo: a TSV file; text: any file (bytes are tokens)
  double zipf_exponent = 1.1; // click_log: id popularity
  double planted_scale = 0.6; // click_log: std of each planted id weight
  int64_t eval_samples = 20000;  // held-out samples (regression, click_log) or bytes (text)
  int64_t latent_dim = 32;    // regression: inputs lie on a random k-dim subspace; 0: full rank
  // regression: 0 for samples of one point (x [N, in]); S for samples of S independent points,
  // x [N, S, in] and targets [N, S, out] (the seeds' [seq_len, hidden] samples).
  int64_t seq_len = 0;
  // Context parallelism (parallel.cp): the axis of each sample the cp ranks split (0: the
  // sequence, gpt's tokens and mlp's seq_len points).
  int64_t shard_axis = 0;
};
void Bind(config::Binder& b, DataOptions& o);

struct TrainOptions {
  std::string device = "cpu";   // "cpu" or "cuda[:N]"
  int64_t steps = 1000;
  // The global micro-batch: samples (sequences for gpt) per micro-batch over all data-parallel
  // replicas, each reading batch_size / dp of it; a step reads batch_size x micro_batches.
  int64_t batch_size = 64;
  int64_t micro_batches = 1;    // micro-batches per step; gradients accumulate (the pipeline's m)
  int64_t log_every = 10;       // progress line and metrics every N steps
  int64_t eval_every = 0;       // 0: only at the end
  int64_t checkpoint_every = 0; // 0: no periodic checkpoints
  std::string checkpoint_dir;   // where ckpt-<step>.bin and `latest` go
  bool resume = true;           // continue from checkpoint_dir/latest when present
  std::string metrics_path;     // JSON lines; empty: none
  // Trainer 0 draws the loss (and AUC) curve here as a PNG at the end, with gnuplot; where
  // gnuplot is absent the run notes it in one line and succeeds. Empty: no picture.
  std::string plot_path;
  bool progress = true;         // the progress line on stderr
  // Most MiB the trainer's tensors (parameters, gradients, optimizer state, activations) may
  // hold on its device; past it an allocation fails with ResourceExhausted naming this field.
  // 0: whatever the device has.
  int64_t memory_limit_mb = 0;
  // How matmuls multiply (ops::MatmulPrecision, trainer/ops/exec.h): fp32, or with their inputs
  // rounded to tf32 / bf16 and fp32 accumulation (the tensor cores on CUDA; the CPU rounds and
  // uses sgemm), tensors staying fp32.
  ops::MatmulPrecision matmul_precision = ops::MatmulPrecision::kFp32;
  // kF32, or kBF16: matmuls in bf16 (as matmul_precision bf16) and the activations saved for
  // backward kept in bf16 (nn::Context::SaveActivation), widened when backward reads them;
  // parameters, gradients and every other op stay fp32. PyTorch's autocast to bf16 does the
  // same. No loss scaling: bf16 has fp32's exponent range.
  DType precision = DType::kF32;
  // What precision and matmul_precision make of the matmuls, and the saved activations' type.
  ops::MatmulPrecision Matmul() const {
    return precision == DType::kBF16 ? ops::MatmulPrecision::kBf16 : matmul_precision;
  }
  DType Saved() const { return precision; }
  // Not in the job file: this process's index among the tasks on its machine (SLURM_LOCALID,
  // LOCAL_RANK, STRATA_LOCAL_TASK), which strata-trainer's main() reads from the environment;
  // -1: none. Picks the GPU of a plain `device: cuda` (ChooseCudaDevice, trainer/device.h).
  int local_task = -1;
};
void Bind(config::Binder& b, TrainOptions& o);

// How the trainers of a job keep their parameters in step (the job's `sync` section).
struct SyncOptions {
  enum class Mode { kLocal, kAllReduce, kPs, kHybrid, kOffload };
  // local: one trainer, no cluster. allreduce: every trainer holds a replica, gradients are
  // all-reduced in buckets during backward, the optimizer runs locally. ps: parameters live on
  // the servers (dense tensors in dense tables, embeddings in sparse tables), the optimizer
  // runs there. hybrid: dense parameters by all-reduce, embeddings through the servers.
  // offload: as ps (the servers hold the fp32 masters and the optimizer state), pipelined: a
  // gradient is pushed as backward finishes it, parameters are pulled unit by unit ahead of
  // the forward that needs them (trainer/ps_sync.h).
  Mode mode = Mode::kLocal;
  Consistency consistency = Consistency::kBsp;  // of the servers' tables (ps, hybrid)
  int64_t staleness = 0;       // ssp: a pull at clock c waits for the slowest trainer's c - s
  double bucket_mb = 25;       // all-reduce bucket size
  bool overlap = true;         // all-reduce buckets while backward still runs
  bool prefetch = true;        // pull the next step's parameters while this one computes
  // ps, hybrid, offload: the type of dense tensors and sparse rows on the wire: fp32, or bf16
  // (half the bytes both ways: gradients pushed in bf16, which the servers widen and apply to
  // fp32 masters and state; weights pulled rounded to bf16, the trainer computing in fp32 on
  // those values).
  DType wire = DType::kF32;
  double chunk_kb = 2048;      // ps, offload: dense tables travel and are stored in chunks of this size
  bool delayed_update = false; // offload: compute on the weights one update behind (DPU)
  int64_t delayed_warmup = 10; // offload: undelayed steps before that
  // offload, delayed_update: compute on the predicted current weights, the pulled ones moved
  // on by the last update seen (w[n-1] + (w[n-1] - w[n-2])), instead of the stale ones as they
  // are (false: DeepSpeed's DPU exactly). No extra memory: the difference is taken in place.
  bool delayed_predict = true;
  // offload under BSP: a unit's pull for the next step goes as soon as backward pushed its
  // gradients (stamped with the next clock, the servers answer once they applied them), not
  // after the clock: the same values, sooner (false: every pull after the clock).
  bool pull_early = true;
  int64_t timeout_ms = 120000; // rendezvous and every collective or server call
  std::string trace_path;      // a Chrome-trace JSON timeline per rank ("{rank}" is replaced)
};
void Bind(config::Binder& b, SyncOptions& o);
const char* ModeName(SyncOptions::Mode m);  // as the job spells it
// Whether trainers of this mode talk to parameter servers (ps, hybrid, offload).
inline bool UsesServers(SyncOptions::Mode m) {
  return m == SyncOptions::Mode::kPs || m == SyncOptions::Mode::kHybrid || m == SyncOptions::Mode::kOffload;
}

// How the world of trainers is cut (the job's `parallel` section; see docs/architecture.md).
// Ranks are laid out Megatron's way: tp fastest, then dp, then pp. The world must be
// dp * tp * pp; dp 0 means world / (tp * pp).
struct ParallelOptions {
  enum class Recompute { kNone, kSelective, kFull };
  int64_t dp = 0;             // data-parallel replicas (0: what the world leaves)
  int64_t tp = 1;             // tensor-parallel ways within a layer
  // Megatron's sequence parallelism (with tp > 1, gpt): norms, dropout and residuals on 1/tp of
  // the sequence; all-reduces become reduce-scatter + all-gather.
  bool sequence_parallel = false;
  int64_t pp = 1;             // pipeline ranks
  // Context parallelism: every sample's sequence split over cp ranks (gpt: ring attention;
  // mlp on [seq, features] samples: per token). Gradients are averaged over dp x cp.
  int64_t cp = 1;
  int64_t vpp = 1;            // model chunks (virtual stages) per pipeline rank
  // Micro-batches a step runs through the pipeline, per data-parallel replica. 0: take
  // train.micro_batches (the two name one thing; giving both, different, is an error).
  int64_t micro_batches = 0;
  std::string schedule = "1f1b";  // gpipe | 1f1b | interleaved | zb-h1 | zbv
  int64_t zero = 0;           // 0: replicated optimizer state; 1-3: ZeRO stages (sharded_optim.h, zero3.h)
  // none: keep every activation; selective: recompute the attention core (the [T, T] scores)
  // in backward; full: every unit keeps only its input and recomputes its forward.
  Recompute recompute = Recompute::kNone;
  // How the model's units are cut into pp * vpp stages: "params" (balanced parameter counts),
  // "cost" (balanced measured forward+backward time of each unit), or the first unit of every
  // stage after the first as a comma list ("3,6,9" for 4 stages).
  std::string partition = "params";
  // Pipeline hand-offs between trainers on one host go through shared memory (a ring of this
  // many MiB per peer, trainer/comm/shm_p2p.h) instead of loopback TCP; 0: always TCP.
  double shm_ring_mb = 4;
  // The planner (trainer/auto/planner.h) chooses dp, tp, pp, vpp, schedule, micro-batches, zero,
  // recompute and partition (and train.batch_size, keeping batch_size x micro-batches) from
  // measured costs; trainer 0 decides and publishes, every trainer runs its top plan.
  bool auto_plan = false;
  // Where the planner's calibration is cached (JSON); empty: measured afresh by every job.
  std::string auto_cache;
};
void Bind(config::Binder& b, ParallelOptions& o);

// Inference instead of training (the job's `infer` section; trainer/infer.h): the trainers load
// a checkpoint's parameters into their own plan (any tp, pp and replicas; no optimizer state)
// and evaluate the data's held-out set, or (gpt) generate from prompts with a KV cache.
struct InferOptions {
  enum class Mode { kOff, kEval, kGenerate };
  Mode mode = Mode::kOff;
  std::string checkpoint;          // a step directory, or a checkpoint_dir (its latest step)
  std::vector<std::string> prompts;  // generate: the prompts (bytes are tokens)
  int64_t max_new_tokens = 32;     // generate: tokens after each prompt, at most
  int64_t stop = -1;               // generate: a token (byte) that ends a sequence (-1: none)
  bool greedy = true;              // generate: argmax; else sample (temperature, top_k, top_p)
  double temperature = 1.0;
  int64_t top_k = 0;               // 0: every token
  double top_p = 1.0;              // nucleus: the smallest set whose probability reaches top_p
  uint64_t seed = 1;               // sampling: the same seed draws the same tokens on any layout
  std::string output_path;         // JSON lines ("{rank}" replaced): one per prompt, or the eval
  bool save_logits = false;        // generate: each step's full logits in the output (tests)
  bool enabled() const { return mode != Mode::kOff; }
};
void Bind(config::Binder& b, InferOptions& o);

// Automatic parallelism from placements (the job's `auto` section; docs/auto_parallel.md): a
// process mesh and the placements of a few tensors, as the seeds write them. The trainer's
// parallel.dp and parallel.tp are derived from them (trainer/auto/auto_plan.h) through the
// sharding rules, and the trainer runs that plan.
struct AutoOptions {
  // Mesh dimensions, slowest first: "x=2" or "x=2,y=2". Empty: off.
  std::string mesh;
  // How many meshes of that shape, on consecutive ranks (mesh k holds ranks k * size ..): the
  // seeds' pipeline puts w0 on mesh 0 and w1 on mesh 1, each a pipeline stage.
  int64_t meshes = 1;
  // "tensor=P" (one P per mesh dimension, comma-separated): R, S(axis) or P(sum), e.g.
  // "input=S(0)" or "w0=S(1)"; "tensor@k=..." places it on mesh k (default 0). Unnamed tensors
  // start replicated (biases on their weight's mesh).
  std::vector<std::string> placements;
  bool enabled() const { return !mesh.empty(); }
};
void Bind(config::Binder& b, AutoOptions& o);

// Its sections sit at the top level of the job file, beside the cluster's (JobConfig binds them
// in place).
struct TrainJob {
  ModelOptions model;
  OptimizerOptions optimizer;
  TrainOptions train;
  DataOptions data;
  SyncOptions sync;
  ParallelOptions parallel;
  InferOptions infer;
  AutoOptions auto_parallel;  // the `auto` section
  // Not a field of these sections: strata-trainer copies the job's server.replication here, so
  // that its PsClient sends a dead primary's shard to the backup (ps/replication.h).
  Replication server_replication = Replication::kNone;
};
void Bind(config::Binder& b, TrainJob& o);
// Whether the model's embeddings live in sparse tables on the servers, a step pulling only the
// rows its batch touches and the optimizer updating only those (lazy Adam): ps and hybrid, and
// ctr's hashed tables under offload. offload holds gpt's vocabulary embedding as a dense table
// instead, every row updated every step as on a trainer (what makes it equal to allreduce).
inline bool SparseOnServers(const TrainJob& job) {
  const SyncOptions::Mode m = job.sync.mode;
  if (m == SyncOptions::Mode::kOffload) return job.model.kind == ModelOptions::Kind::kCtr;
  return m == SyncOptions::Mode::kPs || m == SyncOptions::Mode::kHybrid;
}
// Whether the job is inference whose tables the servers serve read-only from the checkpoint
// (infer with sync.mode ps or hybrid; docs/inference.md).
inline bool ServersServeCheckpoint(const TrainJob& job) {
  return job.infer.enabled() &&
         (job.sync.mode == SyncOptions::Mode::kPs || job.sync.mode == SyncOptions::Mode::kHybrid);
}

}  // namespace strata
