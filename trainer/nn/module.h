// module.h: what layers are built from: Parameter and ParameterRegistry (stable names, seeded
// initialisers), Context (one micro-batch's saved activations) and the Layer interface with its
// per-layer recompute switch.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/tensor.h"
#include "common/shard.h"
#include "ps/table.h"
#include "trainer/ops/exec.h"

namespace strata::nn {

using strata::ShardSpec;

// A named trainable tensor and its gradient (same shape, device and dtype; gradients
// accumulate until ZeroGrad). Names are dotted paths ("block0.attn.qkv.weight"): checkpoints
// and parameter-server tables are keyed by them.
struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
  bool weight_decay = true;  // false for biases, norms and embeddings' scalar biases
  bool sparse = false;       // an embedding table: rows touched per batch are few
  bool remote = false;       // held and updated by the parameter servers: the local optimizer
                             // and gradient clipping skip it
  // How the parameter starts, as a parameter server would start it: element g of a dense
  // parameter is InitDenseValues(init, g); row k of a sparse [rows, dim] one is
  // InitValues(init, k). The seed is rng::Derive(model_seed, name), so a parameter's initial
  // value depends only on the model seed and its name: the same on any device, any number of
  // devices, and on a server that creates the parameter's table from this spec (nothing has to
  // be sent to initialise a server).
  InitSpec init;
  // Where `value` sits in the unsplit parameter (whole unless tensor parallelism split it).
  // `init` describes the unsplit tensor: a shard starts as exactly its slice of it.
  ShardSpec shard;
  // Sequence parallelism: the gradient is a partial sum (this rank's slice of the sequence
  // contributed; a norm's, say) until summed over the tensor-parallel group, which the trainer
  // does once it is final for the step.
  bool sequence_partial = false;
};

// Owns a model's parameters in creation order (the order optimizers and checkpoints walk).
// Not thread-safe: built once, then used by the thread that trains.
class ParameterRegistry {
 public:
  ParameterRegistry(ops::Exec exec, uint64_t seed) : exec_(exec), seed_(seed) {}
  ParameterRegistry(const ParameterRegistry&) = delete;
  ParameterRegistry& operator=(const ParameterRegistry&) = delete;

  // Creates and initialises a parameter from `init` (InitSpec::Normal(0.02f), ...; its seed is
  // replaced by the one derived from the name); a duplicate name is a bug (aborts). A sparse
  // parameter is a [rows, dim] table initialised row by row (see Parameter::init).
  Parameter& Create(const std::string& name, Shape shape, InitSpec init, bool weight_decay = true,
                    bool sparse = false);
  // A tensor-parallel shard of the parameter `name` (its unsplit name: the shard's place is in
  // `shard`), initialised as its slice of the unsplit tensor. An inexact split aborts.
  Parameter& CreateShard(const std::string& name, const ShardSpec& shard, InitSpec init,
                         bool weight_decay = true, bool sparse = false);
  Parameter* Find(std::string_view name) const;  // null if absent
  const std::vector<std::unique_ptr<Parameter>>& params() const { return params_; }
  void ZeroGrad();
  int64_t NumElements() const;
  const ops::Exec& exec() const { return exec_; }
  uint64_t seed() const { return seed_; }

 private:
  ops::Exec exec_;
  uint64_t seed_;
  std::vector<std::unique_ptr<Parameter>> params_;
  std::map<std::string, Parameter*, std::less<>> by_name_;
};

// Incremental decoding (generation with a KV cache): the batch's new tokens of row b sit at
// positions starts[b], starts[b] + 1, ... of its sequence, and each attention layer keeps its
// keys and values for every position so far here, between forwards ([B, H, capacity, hd] per
// layer, H this rank's heads). Positions past a row's own tokens hold anything: attention reads
// keys up to each query's position only.
struct DecodeState {
  std::vector<int64_t> starts;  // by batch row
  int64_t capacity = 0;         // positions the caches hold
  std::map<const void*, std::pair<Tensor, Tensor>> kv;  // by attention layer: keys, values
};

// What forward saved for one micro-batch, keyed by (layer, name). Several contexts may be in
// flight at once (pipelining); a context is used by one thread at a time.
class Context {
 public:
  // `seed` feeds dropout: give each micro-batch its own (derived from the step).
  Context(ops::Exec exec, bool training, uint64_t seed)
      : exec_(exec), training_(training), seed_(seed) {}

  // Keeps t as it is: statistics, indices, a recomputed layer's input (its forward must run
  // again on exactly what it saw), a gradient held between the two halves of a split backward.
  void Save(const void* owner, std::string_view key, Tensor t);
  // Keeps an activation backward reads as an operand (a Linear's input, attention's q, k, v and
  // probabilities): in exec().saved (train.precision bf16: a bf16 copy, half the bytes) while
  // training; as it is when not training (nothing reads it) or when it is not contiguous f32.
  void SaveActivation(const void* owner, std::string_view key, const Tensor& t);
  // What was saved under key: as saved, or an f32 tensor widened from SaveActivation's copy.
  // Aborts if nothing was.
  Tensor Get(const void* owner, std::string_view key) const;
  // Forgets a saved tensor early: BackwardInput drops what only it needed, so that the window
  // until BackwardWeight holds only what the weight gradients need.
  void Drop(const void* owner, std::string_view key);
  void Clear();
  // Saved tensors, those of scratch contexts included.
  size_t num_saved() const;
  int64_t saved_bytes() const;

  // A recomputing layer's scratch context (same exec, mode, seed and grad_ready), which lives in
  // this context from the layer's BackwardInput to its BackwardWeight: the weight half needs what
  // the recomputed forward saved. NewScratch aborts if `owner` has one already; TakeScratch if
  // it has none.
  Context& NewScratch(const void* owner);
  std::unique_ptr<Context> TakeScratch(const void* owner);

  const ops::Exec& exec() const { return exec_; }
  bool training() const { return training_; }
  uint64_t seed() const { return seed_; }

  // Called during Backward as soon as a parameter's gradient is final for this context (after
  // the layer that owns it ran backward): data parallelism starts all-reducing it then, while
  // the rest of backward runs. Set it only on the context of a step's last micro-batch.
  using GradReadyFn = std::function<void(Parameter&)>;
  void set_grad_ready(GradReadyFn fn) { grad_ready_ = std::move(fn); }
  const GradReadyFn& grad_ready() const { return grad_ready_; }

  // Generation: forwards of this context extend the sequences in `d` (not owned; null: whole
  // sequences from position 0, no cache).
  void set_decode(DecodeState* d) { decode_ = d; }
  DecodeState* decode() const { return decode_; }
  void GradReady(Parameter& p) const {
    if (grad_ready_) grad_ready_(p);
  }

 private:
  ops::Exec exec_;
  bool training_;
  uint64_t seed_;
  GradReadyFn grad_ready_;
  DecodeState* decode_ = nullptr;
  struct Saved {
    Tensor t;
    bool narrowed = false;  // SaveActivation's copy in exec_.saved: Get widens it
  };
  std::map<std::pair<const void*, std::string>, Saved> saved_;
  std::map<const void*, std::unique_ptr<Context>> scratch_;
};

// A differentiable block: Forward(x, ctx) saves what Backward(dy, ctx) needs in ctx, Backward
// accumulates parameter gradients and returns dL/dx (undefined when x is not differentiable,
// such as token ids). With recompute on, Forward keeps only its input and Backward runs the
// forward again into a scratch context first: less memory for one more forward.
//
// Backward splits in two for the zero-bubble pipeline schedules: BackwardInput (dL/dx, what
// the previous stage waits for) and, any time later on the same context, BackwardWeight (dL/dW,
// accumulated into the parameters' gradients; reports them to Context::GradReady). Other
// contexts' forwards and backwards may run in between. Backward is both in one. On the CPU,
// BackwardInput then BackwardWeight give dx and every gradient bit for bit as Backward does
// (the same kernels in the same order). BackwardInput may keep `dy` in the context for the
// weight half: the caller must not write into dy until BackwardWeight has run.
//
// A layer that does not split runs its whole backward in BackwardInput and nothing in
// BackwardWeight, which is correct, only not helpful to the schedule. Either way, its owned
// parameters are reported to GradReady after BackwardWeight, once per context.
//
// A recomputing layer's BackwardInput runs the forward again into a scratch context that ctx
// keeps until BackwardWeight (Context::NewScratch), then the input half there; BackwardWeight
// runs the weight half in that scratch context and frees it. Recompute thus saves memory from
// Forward to BackwardInput, as in the fused path; from BackwardInput to BackwardWeight the layer
// holds what its sublayers keep for their weight halves (Linear inputs and output gradients,
// norms' inputs and statistics; layers.cc's input halves drop the rest, such as attention
// probabilities), as a layer without recompute does.
class Layer {
 public:
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  Tensor Forward(const Tensor& x, Context& ctx);
  Tensor Backward(const Tensor& dy, Context& ctx);
  Tensor BackwardInput(const Tensor& dy, Context& ctx);
  void BackwardWeight(Context& ctx);

  void set_recompute(bool on) { recompute_ = on; }
  bool recompute() const { return recompute_; }
  const std::string& name() const { return name_; }

 protected:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual Tensor DoForward(const Tensor& x, Context& ctx) = 0;
  virtual Tensor DoBackward(const Tensor& dy, Context& ctx) = 0;
  // The halves of DoBackward (see above); the defaults put all of it in the first.
  virtual Tensor DoBackwardInput(const Tensor& dy, Context& ctx) { return DoBackward(dy, ctx); }
  virtual void DoBackwardWeight(Context& /*ctx*/) {}
  // Declares a parameter whose gradient this layer's DoBackward (DoBackwardWeight in the split
  // path) completes, not a sublayer's: Backward (BackwardWeight) reports it to
  // Context::GradReady afterwards.
  void Owns(Parameter* p) { owned_.push_back(p); }

 private:
  std::string name_;
  bool recompute_ = false;
  std::vector<Parameter*> owned_;
};

}  // namespace strata::nn
