// layers.h: the layers models are built from: Linear, Embedding, LayerNorm, Activation,
// Dropout, Sequential, MLP, CausalSelfAttention, TransformerBlock. Inputs are f32 [..., features]
// (leading dimensions are flattened into rows) unless noted. Layers with parameters split their
// backward (module.h): the input half computes dx and keeps dy, the weight half dW; Activation
// and Dropout run all of theirs in the input half.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainer/nn/module.h"
#include "trainer/nn/ring_attention.h"
#include "trainer/nn/tp_group.h"

namespace strata::nn {

// How tensor parallelism splits a Linear (Megatron's pair, tensor_parallel.h):
//  kColumn: weight and bias split by output columns; x whole on every rank, y a slice of the
//           columns; backward all-reduces dx (each rank's is a partial sum).
//  kRow:    weight split by input rows; x a slice of the features, y all-reduced in forward
//           (each rank's product is a partial sum), the bias (whole) added after.
// With `blocks` > 1 the output columns are that many equal blocks, each split (qkv: q, k, v).
// With sequence parallelism (TpGroup::sequence) a column layer all-gathers its input [N, S, in]
// along the sequence first, and a row layer reduce-scatters its output along it instead of the
// all-reduce (its bias, whole, then added to the slice); backward is the conjugate.
enum class LinearSplit { kNone, kColumn, kRow };

// y = x @ weight + bias; weight [in, out] named "<name>.weight", bias "<name>.bias". `in` and
// `out` are the unsplit sizes; a split layer holds its shard (Parameter::shard) of each.
class Linear : public Layer {
 public:
  // Default init: normal with std 1/sqrt(in) (keeps activations at unit scale).
  Linear(ParameterRegistry& reg, const std::string& name, int64_t in, int64_t out,
         bool bias = true, float init_std = -1.0f, LinearSplit split = LinearSplit::kNone,
         TpGroup tp = {}, int blocks = 1);
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  // Off: backward returns no dL/dx (undefined), for a model's first layer, whose input is the
  // data. Column-split, dL/dx would cost an all-reduce whose result nobody reads.
  void set_input_grad(bool on) { input_grad_ = on; }

 protected:
  Tensor DoForward(const Tensor& x, Context& ctx) override;
  Tensor DoBackward(const Tensor& dy, Context& ctx) override;
  Tensor DoBackwardInput(const Tensor& dy, Context& ctx) override;
  void DoBackwardWeight(Context& ctx) override;

 private:
  // The two halves; the fused DoBackward runs both, the split path one each. InputHalf returns
  // dL/dx shaped as the input and sets *dy2 to the rows of dy the weight half multiplies (the
  // whole sequence's, for a sequence-parallel row layer).
  Tensor InputHalf(const Tensor& dy, Context& ctx, Tensor* dy2) const;
  void WeightGrad(const ops::Exec& ex, const Tensor& x2, const Tensor& dy2);

  int64_t in_, out_;  // local: this rank's shard
  LinearSplit split_;
  TpGroup tp_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
  bool input_grad_ = true;
};

// ids (i32 or i64, any shape [...]) -> rows [..., dim]; table "<name>.weight" [vocab, dim].
// Backward scatter-adds into the table's gradient and returns an undefined tensor; split, the
// input half only keeps dy and the weight half scatter-adds.
class Embedding : public Layer {
 public:
  Embedding(ParameterRegistry& reg, const std::string& name, int64_t vocab, int64_t dim,
            float init_std = 0.02f);
  Parameter& table() { return *table_; }

 protected:
  Tensor DoForward(const Tensor& ids, Context& ctx) override;
  Tensor DoBackward(const Tensor& dy, Context& ctx) override;
  Tensor DoBackwardInput(const Tensor& dy, Context& ctx) override;
  void DoBackwardWeight(Context& ctx) override;

 private:
  int64_t dim_;
  Parameter* table_;
};

class LayerNorm : public Layer {
 public:
  LayerNorm(ParameterRegistry& reg, const std::string& name, int64_t dim, float eps = 1e-5f);
  // Under sequence parallelism a norm sees 1/tp of the tokens: its gradients are partial sums.
  void set_sequence_partial() { gamma_->sequence_partial = beta_->sequence_partial = true; }

 protected:
  Tensor DoForward(const Tensor& x, Context& ctx) override;
  Tensor DoBackward(const Tensor& dy, Context& ctx) override;
  Tensor DoBackwardInput(const Tensor& dy, Context& ctx) override;
  void DoBackwardWeight(Context& ctx) override;

 private:
  int64_t dim_;
  float eps_;
  Parameter* gamma_;
  Parameter* beta_;
};

enum class ActivationKind { kRelu, kGelu };

class Activation : public Layer {
 public:
  Activation(const std::string& name, ActivationKind kind) : Layer(name), kind_(kind) {}

 protected:
  Tensor DoForward(const Tensor& x, Context& ctx) override;
  Tensor DoBackward(const Tensor& dy, Context& ctx) override;
  Tensor DoBackwardInput(const Tensor& dy, Context& ctx) override;

 private:
  ActivationKind kind_;
};

// Inverted dropout while training (identity in eval), mask from (ctx.seed(), layer name).
class Dropout : public Layer {
 public:
  Dropout(const std::string& name, float p) : Layer(name), p_(p) {}

 protected:
  Tensor DoForward(const Tensor& x, Context& ctx) override;
  Tensor DoBackward(const Tensor& dy, Context& ctx) override;

 private:
  uint64_t MaskSeed(const Context& ctx) const;
  float p_;
};

// How a composite layer walks back from dL/dy to dL/dx: through its children's Backward
// (kFused), or their BackwardInput (kInput), after which its weight half only has to call the
// children's BackwardWeight. One walk serves both, so the two paths cannot drift apart.
enum class BackwardPass { kFused, kInput };

// Layers applied in order; backward in reverse, and so is the weight half of a split backward
// (a parameter shared by two children gets its gradients added in the fused order).
class Sequential : public Layer {
 public:
  explicit Sequential(const std::string& name) : Layer(name) {}
  Layer& Add(std::unique_ptr<Layer> layer);
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

 protected:
  Tensor DoForward(const Tensor& x, Context& ctx) override;
  Tensor DoBackward(const Tensor& dy, Context& ctx) override;
  Tensor DoBackwardInput(const Tensor& dy, Context& ctx) override;
  void DoBackwardWeight(Context& ctx) override;

 private:
  Tensor Backprop(const Tensor& dy, Context& ctx, BackwardPass pass);

  std::vector<std::unique_ptr<Layer>> layers_;
};

// "<name>.fc1" -> activation -> "<name>.fc2" (dropout after fc2 when p > 0). Split over `tp`:
// fc1 by columns, fc2 by rows (one all-reduce forward, one backward).
std::unique_ptr<Sequential> MakeMlp(ParameterRegistry& reg, const std::string& name, int64_t in,
                                    int64_t hidden, int64_t out, ActivationKind act,
                                    float dropout = 0.0f, float out_init_std = -1.0f,
                                    TpGroup tp = {});

// x [B, T, C] -> [B, T, C]: qkv projection, causal attention over `heads` heads, output
// projection ("<name>.qkv", "<name>.proj"). Split over `tp` by heads: each rank holds heads/tp
// of them (qkv by columns, q, k and v alike; proj by rows).
class CausalSelfAttention : public Layer {
 public:
  // Over a context-parallel group (cp split) x holds this rank's part of every sequence and the
  // attention core is ring attention (ring_attention.h), which keeps (out, lse) for backward and
  // never the [B, H, T, T] probabilities.
  CausalSelfAttention(ParameterRegistry& reg, const std::string& name, int64_t width,
                      int64_t heads, float init_std, float proj_init_std, TpGroup tp = {}, CpGroup cp = {});
  // Selective recomputation (Megatron's): forward keeps q, k and v but not the [B, H, T, T]
  // attention probabilities, which backward computes again from them. The probabilities are
  // the activation that grows with T^2; recomputing them costs the attention core only.
  void set_recompute_core(bool on) { recompute_core_ = on; }

 protected:
  Tensor DoForward(const Tensor& x, Context& ctx) override;
  Tensor DoBackward(const Tensor& dy, Context& ctx) override;
  Tensor DoBackwardInput(const Tensor& dy, Context& ctx) override;
  void DoBackwardWeight(Context& ctx) override;

 private:
  Tensor Backprop(const Tensor& dy, Context& ctx, BackwardPass pass);

  int64_t width_, heads_;  // heads_ and local_: this rank's heads and their width
  int64_t local_;
  bool recompute_core_ = false;
  CpGroup cp_;
  Linear qkv_;
  Linear proj_;
};

// Pre-norm GPT block: x + attn(ln1(x)), then x + mlp(ln2(x)). x [B, T, C].
class TransformerBlock : public Layer {
 public:
  TransformerBlock(ParameterRegistry& reg, const std::string& name, int64_t width, int64_t heads,
                   int num_layers_total, float dropout = 0.0f, TpGroup tp = {}, CpGroup cp = {});
  CausalSelfAttention& attention() { return attn_; }

 protected:
  Tensor DoForward(const Tensor& x, Context& ctx) override;
  Tensor DoBackward(const Tensor& dy, Context& ctx) override;
  Tensor DoBackwardInput(const Tensor& dy, Context& ctx) override;
  void DoBackwardWeight(Context& ctx) override;

 private:
  Tensor Backprop(const Tensor& dy, Context& ctx, BackwardPass pass);

  LayerNorm ln1_;
  CausalSelfAttention attn_;
  LayerNorm ln2_;
  std::unique_ptr<Sequential> mlp_;
};

}  // namespace strata::nn
