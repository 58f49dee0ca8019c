// train_options.cc: the Binds of the training job's sections.
#include "trainer/train_options.h"

namespace strata {

void Bind(config::Binder& b, ModelOptions& o) {
  b.Enum("kind", o.kind,
         {{"mlp", ModelOptions::Kind::kMlp}, {"gpt", ModelOptions::Kind::kGpt},
          {"ctr", ModelOptions::Kind::kCtr}},
         "which model");
  b.Field("seed", o.seed, "parameter init seed (same seed, same model on any device count)");
  b.Field("recompute", o.recompute, "recompute block activations in backward (less memory)");
  b.Field("mlp_in", o.mlp_in, "mlp: input width").Range(1, 1 << 20);
  b.Field("mlp_hidden", o.mlp_hidden, "mlp: hidden width").Range(1, 1 << 20);
  b.Field("mlp_out", o.mlp_out, "mlp: output width").Range(1, 1 << 20);
  b.Field("layers", o.layers, "gpt: transformer blocks").Range(1, 1024);
  b.Field("heads", o.heads, "gpt: attention heads").Range(1, 1024);
  b.Field("width", o.width, "gpt: model width").Range(1, 1 << 16);
  b.Field("context", o.context, "gpt: sequence length").Range(2, 1 << 16);
  b.Field("vocab", o.vocab, "gpt: vocabulary (256 for bytes)").Range(2, 1 << 24);
  b.Field("dropout", o.dropout, "gpt: dropout probability").Range(0.0, 0.9);
  b.Field("fields", o.fields, "ctr: categorical fields").Range(1, 4096);
  b.Field("field_vocab", o.field_vocab, "ctr: ids per field").Range(1, int64_t{1} << 32);
  b.Field("dense", o.dense, "ctr: numeric features").Range(0, 4096);
  b.Field("embed_dim", o.embed_dim, "ctr: embedding width").Range(1, 4096);
  b.Field("ctr_hidden", o.ctr_hidden, "ctr: MLP hidden width").Range(1, 1 << 16);
  b.Require(o.kind != ModelOptions::Kind::kGpt || o.width % o.heads == 0, "width",
            "must be divisible by heads");
}

void Bind(config::Binder& b, DataOptions& o) {
  b.Enum("kind", o.kind,
         {{"regression", DataOptions::Kind::kRegression},
          {"click_log", DataOptions::Kind::kClickLog},
          {"criteo", DataOptions::Kind::kCriteo},
          {"text", DataOptions::Kind::kText}},
         "regression (mlp), click_log or criteo (ctr), text (gpt)");
  b.Field("seed", o.seed, "data stream and planted-model seed");
  b.Field("path", o.path, "criteo: TSV file; text: any file");
  b.Field("zipf_exponent", o.zipf_exponent, "click_log: id popularity exponent").Range(0.0, 5.0);
  b.Field("planted_scale", o.planted_scale, "click_log: std of planted id weights").Range(0.0, 10.0);
  b.Field("eval_samples", o.eval_samples, "held-out samples (bytes for text)").Range(1, INT64_MAX);
  b.Field("latent_dim", o.latent_dim, "regression: dimension of the inputs' subspace (0: full rank)")
      .Range(0, 1 << 16);
  b.Field("seq_len", o.seq_len, "regression: points per sample, x [N, seq_len, in] (0: one point, x [N, in])")
      .Range(0, 1 << 20);
  b.Field("shard_axis", o.shard_axis, "parallel.cp: the axis of each sample split over the context-parallel ranks "
          "(0: the sequence)").Range(0, 8);
  b.Require(o.seq_len == 0 || o.kind == DataOptions::Kind::kRegression, "seq_len", "is only for kind: regression");
  b.Require(!(o.kind == DataOptions::Kind::kCriteo || o.kind == DataOptions::Kind::kText) ||
                !o.path.empty(),
            "path", "is required for criteo and text data");
}

void Bind(config::Binder& b, TrainOptions& o) {
  b.Field("device", o.device, "cpu, cuda (a cluster's trainer takes device rank % devices) or cuda:N");
  b.Field("steps", o.steps, "optimizer steps").Range(1, INT64_MAX);
  b.Field("batch_size", o.batch_size,
          "the global micro-batch: samples per micro-batch over all data-parallel replicas (each reads "
          "batch_size/dp of it); a step reads batch_size x micro_batches samples").Range(1, 1 << 24);
  b.Field("micro_batches", o.micro_batches, "micro-batches per step").Range(1, 1 << 16);
  b.Field("log_every", o.log_every, "progress and metrics every N steps").Range(1, INT64_MAX);
  b.Field("eval_every", o.eval_every, "evaluate every N steps (0: at the end)").Range(0, INT64_MAX);
  b.Field("memory_limit_mb", o.memory_limit_mb,
          "most MiB the trainer's tensors may hold on its device (0: no limit)")
      .Range(0, int64_t{1} << 30);
  b.Field("checkpoint_every", o.checkpoint_every, "checkpoint every N steps (0: never)")
      .Range(0, INT64_MAX);
  b.Field("checkpoint_dir", o.checkpoint_dir, "checkpoint directory");
  b.Field("resume", o.resume, "resume from checkpoint_dir/latest when present");
  b.Field("metrics_path", o.metrics_path, "JSON-lines metrics file (empty: none)");
  b.Field("plot_path", o.plot_path,
          "PNG of the loss (and AUC) curve, written by trainer 0 at the end with gnuplot (empty: none; "
          "without gnuplot: a one-line note)");
  b.Field("progress", o.progress, "print the progress line");
  using P = ops::MatmulPrecision;
  b.Enum("matmul_precision", o.matmul_precision, {{"fp32", P::kFp32}, {"tf32", P::kTf32}, {"bf16", P::kBf16}},
         "matmuls in fp32, or with their inputs rounded to tf32 or bf16, accumulating in fp32 (the tensor "
         "cores on cuda; the CPU rounds copies of the inputs), tensors staying fp32");
  b.Enum("precision", o.precision, {{"fp32", DType::kF32}, {"bf16", DType::kBF16}},
         "fp32, or bf16: matmuls in bf16 with fp32 accumulation and the activations saved for backward "
         "kept in bf16 (half their memory); parameters, gradients and the other ops stay fp32");
  b.Require(o.precision == DType::kF32 || o.matmul_precision != P::kTf32, "precision",
            "bf16 multiplies in bf16: leave train.matmul_precision at fp32 or set it to bf16, not tf32");
  b.Require(o.checkpoint_every == 0 || !o.checkpoint_dir.empty(), "checkpoint_every",
            "needs checkpoint_dir");
}

const char* ModeName(SyncOptions::Mode m) {
  switch (m) {
    case SyncOptions::Mode::kLocal: return "local";
    case SyncOptions::Mode::kAllReduce: return "allreduce";
    case SyncOptions::Mode::kPs: return "ps";
    case SyncOptions::Mode::kHybrid: return "hybrid";
    case SyncOptions::Mode::kOffload: return "offload";
  }
  return "?";
}

void Bind(config::Binder& b, SyncOptions& o) {
  using M = SyncOptions::Mode;
  b.Enum("mode", o.mode,
         {{"local", M::kLocal}, {"allreduce", M::kAllReduce}, {"ps", M::kPs}, {"hybrid", M::kHybrid},
          {"offload", M::kOffload}},
         "local (one trainer), allreduce, ps (parameter servers), hybrid (dense by all-reduce, "
         "embeddings on the servers) or offload (as ps, with pushes during backward and pulls "
         "unit by unit ahead of forward)");
  b.Enum("consistency", o.consistency,
         {{"bsp", Consistency::kBsp}, {"asp", Consistency::kAsp}, {"ssp", Consistency::kSsp}},
         "ps/hybrid: bsp (synchronous), asp (asynchronous) or ssp (bounded staleness)");
  b.Field("staleness", o.staleness, "ssp: clocks a trainer may run ahead of the slowest").Range(0, 1 << 20);
  b.Field("bucket_mb", o.bucket_mb, "allreduce: gradient bucket size in MiB").Range(0.001, 4096.0);
  b.Field("overlap", o.overlap,
          "allreduce: reduce buckets while backward runs; offload: push during backward and pull "
          "unit by unit (false: everything before and after the step, as ps)");
  b.Enum("wire", o.wire, {{"fp32", DType::kF32}, {"bf16", DType::kBF16}},
         "ps, hybrid, offload: gradients pushed and weights pulled (dense tensors and sparse rows) as "
         "fp32 or bf16 on the wire (the servers keep fp32 masters and state)");
  b.Field("chunk_kb", o.chunk_kb,
          "ps, offload: KiB of a dense table's chunk, the unit of a request and of the servers' store "
          "(smaller: finer spill to the RocksDB tier, more requests)")
      .Range(1.0, 262144.0);
  b.Field("delayed_update", o.delayed_update,
          "offload: each step computes on the weights one update behind, while the servers apply "
          "the last one (DeepSpeed's delayed parameter update)");
  b.Field("delayed_warmup", o.delayed_warmup, "offload: steps run undelayed before delayed_update starts")
      .Range(0, INT64_MAX);
  b.Field("delayed_predict", o.delayed_predict,
          "offload, delayed_update: compute on the stale weights moved on by the last update "
          "(w[n-1] + (w[n-1] - w[n-2]), a prediction of the current ones); false: as pulled (DPU exactly)");
  b.Field("pull_early", o.pull_early,
          "offload, bsp: pull a unit's next weights as soon as backward pushed its gradients (the "
          "servers answer once applied); false: every pull after the clock");
  b.Field("prefetch", o.prefetch, "ps: pull the next step's parameters during this step");
  b.Field("timeout_ms", o.timeout_ms, "rendezvous, collectives and server calls").Range(100, 86400000);
  b.Field("trace_path", o.trace_path, "Chrome-trace timeline per rank; {rank} is replaced (without it, rank 0's alone; empty: none)");
  b.Require(o.consistency == Consistency::kSsp || o.staleness == 0, "staleness", "is only for consistency: ssp");
  b.Require(!o.delayed_update || o.mode == M::kOffload, "delayed_update", "is only for mode: offload");
  b.Require(!o.delayed_update || o.overlap, "delayed_update", "needs overlap: true (the unit pipeline)");
}

void Bind(config::Binder& b, ParallelOptions& o) {
  using R = ParallelOptions::Recompute;
  b.Field("dp", o.dp, "data-parallel replicas (0: world / (tp * pp * cp))").Range(0, 1 << 20);
  b.Field("tp", o.tp, "tensor-parallel ways").Range(1, 1024);
  b.Field("sequence_parallel", o.sequence_parallel,
          "with tp > 1: norms, dropout and residuals on a slice of the sequence; all-reduces "
          "become reduce-scatter + all-gather (gpt)");
  b.Field("pp", o.pp, "pipeline ranks").Range(1, 1024);
  b.Field("cp", o.cp, "context-parallel ranks: each sample's sequence split over them (gpt: ring attention)")
      .Range(1, 1024);
  b.Field("vpp", o.vpp, "model chunks per pipeline rank (interleaved: >= 2; zbv: 2)").Range(1, 64);
  b.Field("micro_batches", o.micro_batches, "micro-batches per step (0: train.micro_batches)")
      .Range(0, 1 << 16);
  b.Field("schedule", o.schedule, "pipeline schedule: gpipe, 1f1b, interleaved, zb-h1 or zbv");
  b.Field("zero", o.zero, "ZeRO stage: 0 replicated optimizer state; 1 optimizer state sharded over dp; 2 also the "
          "reduced gradients; 3 also the parameters, gathered per unit as it computes (sync.mode allreduce)").Range(0, 3);
  b.Enum("recompute", o.recompute,
         {{"none", R::kNone}, {"selective", R::kSelective}, {"full", R::kFull}},
         "activation recomputation: none, selective (attention core) or full (each unit keeps "
         "only its input)");
  b.Field("partition", o.partition,
          "how units are cut into stages: params, cost, or the first unit of each later stage "
          "(\"3,6,9\")");
  b.Field("shm_ring_mb", o.shm_ring_mb,
          "pipeline hand-offs between trainers on one host through shared-memory rings of this "
          "many MiB per peer, and small all-reduces (a step's loss and gradient norm) of every "
          "group on one host through shared memory (0: loopback TCP and Gloo for both)")
      .Range(0.0, 1024.0);
  b.Field("auto", o.auto_plan,
          "let the planner choose the whole plan from measured costs (dp, tp, pp, vpp, schedule, "
          "micro_batches, zero, recompute, partition; docs/auto_parallel.md)");
  b.Field("auto_cache", o.auto_cache, "the planner's calibration cache file (empty: calibrate every run)");
  b.Require(o.zero < 3 || o.pp == 1, "zero",
            "ZeRO-3 gathers parameters around each unit of one stage: it needs pp 1 (ZeRO-1 and 2 "
            "compose with pipelining)");
  b.Require(o.zero < 3 || (o.schedule != "zb-h1" && o.schedule != "zbv"), "zero",
            "ZeRO-3 needs a schedule whose backward is whole (gpipe or 1f1b), not " + o.schedule);
}

void Bind(config::Binder& b, InferOptions& o) {
  using M = InferOptions::Mode;
  b.Enum("mode", o.mode, {{"off", M::kOff}, {"eval", M::kEval}, {"generate", M::kGenerate}},
         "off (train), eval (the held-out set's loss and AUC) or generate (gpt, from prompts)");
  b.Field("checkpoint", o.checkpoint, "a checkpoint step directory, or a checkpoint_dir (its latest step)");
  b.Field("prompts", o.prompts, "generate: prompts (each byte a token)");
  b.Field("max_new_tokens", o.max_new_tokens, "generate: tokens after each prompt, at most").Range(1, 1 << 20);
  b.Field("stop", o.stop, "generate: a token ending a sequence (-1: none)").Range(-1, 1 << 24);
  b.Field("greedy", o.greedy, "generate: argmax (else sample with temperature, top_k, top_p)");
  b.Field("temperature", o.temperature, "sampling temperature").Range(1e-6, 100.0);
  b.Field("top_k", o.top_k, "sample among the k likeliest tokens (0: all)").Range(0, 1 << 24);
  b.Field("top_p", o.top_p, "sample within the smallest set reaching this probability").Range(1e-6, 1.0);
  b.Field("seed", o.seed, "sampling seed (the same draws on any layout)");
  b.Field("output_path", o.output_path, "JSON lines of results ({rank} replaced)");
  b.Field("save_logits", o.save_logits, "generate: write each step's full logits");
  b.Require(o.mode == InferOptions::Mode::kOff || !o.checkpoint.empty(), "checkpoint",
            "inference needs a checkpoint to load");
  b.Require(o.mode != InferOptions::Mode::kGenerate || !o.prompts.empty(), "prompts",
            "generate needs at least one prompt");
}

void Bind(config::Binder& b, AutoOptions& o) {
  b.Field("mesh", o.mesh, "process mesh, slowest dimension first: \"x=2\" or \"x=2,y=2\" (empty: off)");
  b.Field("meshes", o.meshes, "meshes of that shape on consecutive ranks, a pipeline stage each").Range(1, 2);
  b.Field("placements", o.placements,
          "\"tensor[@mesh]=P,...\", one placement per mesh dimension: R, S(axis) or P(sum) (mlp: input, "
          "w0 or mlp.fc1.weight, mlp.fc1.bias, w1 or mlp.fc2.weight, mlp.fc2.bias)");
}

void Bind(config::Binder& b, TrainJob& o) {
  b.Section("model", o.model, "model");
  b.Section("optimizer", o.optimizer, "optimizer");
  b.Section("train", o.train, "training loop");
  b.Section("data", o.data, "data");
  b.Section("sync", o.sync, "how trainers synchronise");
  b.Section("parallel", o.parallel, "how the trainers cut the model: dp x tp x pp");
  b.Section("infer", o.infer, "inference from a checkpoint instead of training");
  b.Section("auto", o.auto_parallel, "parallelism derived from placements (docs/auto_parallel.md)");
}

}  // namespace strata
