// layers.cc: forward and backward (fused and split) of the layers in layers.h, written with
// trainer/ops.
#include "trainer/nn/layers.h"

#include <cmath>

#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"

namespace strata::nn {
namespace {

Tensor Reshaped(const Tensor& t, Shape shape) {
  Result<Tensor> r = t.Reshape(std::move(shape));
  STRATA_CHECK(r.ok()) << r.status().ToString();
  return *std::move(r);
}
Tensor Rows2D(const Tensor& t) { return Reshaped(t, {-1, t.size(t.dim() - 1)}); }
Shape WithLast(Shape s, int64_t last) {
  s.back() = last;
  return s;
}
Tensor Back(Layer& layer, const Tensor& dy, Context& ctx, BackwardPass pass) {
  return pass == BackwardPass::kFused ? layer.Backward(dy, ctx) : layer.BackwardInput(dy, ctx);
}

}  // namespace

// --- Linear

Linear::Linear(ParameterRegistry& reg, const std::string& name, int64_t in, int64_t out,
               bool bias, float init_std, LinearSplit split, TpGroup tp, int blocks)
    : Layer(name), in_(in), out_(out), split_(tp.split() ? split : LinearSplit::kNone), tp_(tp) {
  const float std = init_std > 0 ? init_std : 1.0f / std::sqrt(static_cast<float>(in));
  ShardSpec w = ShardSpec::Whole({in, out}), b = ShardSpec::Whole({out});
  if (split_ == LinearSplit::kColumn) {
    w = {{in, out}, 1, blocks, tp.rank(), tp.size()};
    b = {{out}, 0, blocks, tp.rank(), tp.size()};
    out_ = out / tp.size();
  } else if (split_ == LinearSplit::kRow) {
    w = {{in, out}, 0, 1, tp.rank(), tp.size()};
    in_ = in / tp.size();
  }
  weight_ = &reg.CreateShard(name + ".weight", w, InitSpec::Normal(std));
  if (bias) bias_ = &reg.CreateShard(name + ".bias", b, InitSpec::Zeros(), /*weight_decay=*/false);
  Owns(weight_);
  if (bias_) Owns(bias_);
}

Tensor Linear::DoForward(const Tensor& x, Context& ctx) {
  STRATA_CHECK(x.size(x.dim() - 1) == in_) << name() << ": input " << ShapeToString(x.shape());
  const ops::Exec& ex = ctx.exec();
  const bool seq = tp_.sequence_split() && split_ != LinearSplit::kNone;
  // Sequence-parallel: a column layer's input arrives as this rank's slice of the sequence.
  Tensor xin = seq && split_ == LinearSplit::kColumn ? GatherSequence(tp_, ex, x, name()) : x;
  Tensor x2 = Rows2D(xin);
  Tensor y = ops::NewTensor(ex, {x2.size(0), out_});
  ops::Matmul(ex, x2, weight_->value, y, false, false);
  Shape shape = WithLast(xin.shape(), out_);
  // Row-split: every rank's product is a partial sum over its slice of the features (summed
  // whole, or summed and scattered by sequence).
  if (split_ == LinearSplit::kRow) {
    if (seq) {
      y = Rows2D(ReduceScatterSequence(tp_, ex, Reshaped(y, shape), name()));
      shape[1] /= tp_.size();
    } else {
      TpAllReduce(tp_, y, ReduceOp::kSum, name());
    }
  }
  if (bias_) ops::AddBias(ex, y, bias_->value);
  ctx.SaveActivation(this, "x", x2);
  return Reshaped(y, shape);
}

Tensor Linear::InputHalf(const Tensor& dy, Context& ctx, Tensor* dy2) const {
  const ops::Exec& ex = ctx.exec();
  const bool seq = tp_.sequence_split() && split_ != LinearSplit::kNone;
  // Sequence-parallel row layer: the output was scattered by sequence, so is its gradient.
  Tensor dyin = seq && split_ == LinearSplit::kRow ? GatherSequence(tp_, ex, dy, name()) : dy;
  *dy2 = Rows2D(dyin);
  if (!input_grad_) return Tensor();  // the model's input: nothing upstream wants dL/dx
  Tensor dx = ops::NewTensor(ex, {dy2->size(0), in_});
  ops::Matmul(ex, *dy2, weight_->value, dx, false, true);
  const Shape shape = WithLast(dyin.shape(), in_);
  // Column-split: x went whole to every rank, so its gradient sums every rank's columns.
  if (split_ == LinearSplit::kColumn) {
    if (seq) return ReduceScatterSequence(tp_, ex, Reshaped(dx, shape), name());
    TpAllReduce(tp_, dx, ReduceOp::kSum, name());
  }
  return Reshaped(dx, shape);
}

void Linear::WeightGrad(const ops::Exec& ex, const Tensor& x2, const Tensor& dy2) {
  ops::Matmul(ex, x2, dy2, weight_->grad, true, false, 1.0f, 1.0f);
  if (bias_) ops::BiasGrad(ex, dy2, bias_->grad);
}

Tensor Linear::DoBackward(const Tensor& dy, Context& ctx) {
  Tensor dy2;
  Tensor dx = InputHalf(dy, ctx, &dy2);
  WeightGrad(ctx.exec(), ctx.Get(this, "x"), dy2);
  return dx;
}

Tensor Linear::DoBackwardInput(const Tensor& dy, Context& ctx) {
  Tensor dy2;
  Tensor dx = InputHalf(dy, ctx, &dy2);
  ctx.Save(this, "dy", dy2);
  return dx;
}

void Linear::DoBackwardWeight(Context& ctx) {
  WeightGrad(ctx.exec(), ctx.Get(this, "x"), ctx.Get(this, "dy"));
}

// --- Embedding

Embedding::Embedding(ParameterRegistry& reg, const std::string& name, int64_t vocab, int64_t dim,
                     float init_std)
    : Layer(name), dim_(dim) {
  table_ = &reg.Create(name + ".weight", {vocab, dim}, InitSpec::Normal(init_std), false, /*sparse=*/true);
  Owns(table_);
}

Tensor Embedding::DoForward(const Tensor& ids, Context& ctx) {
  Tensor flat = Reshaped(ids, {-1});
  Tensor rows = ops::NewTensor(ctx.exec(), {flat.numel(), dim_});
  ops::EmbeddingGather(ctx.exec(), table_->value, flat, rows);
  ctx.Save(this, "ids", flat);
  Shape out = ids.shape();
  out.push_back(dim_);
  return Reshaped(rows, out);
}

Tensor Embedding::DoBackward(const Tensor& dy, Context& ctx) {
  ops::EmbeddingScatterAdd(ctx.exec(), Rows2D(dy), ctx.Get(this, "ids"), table_->grad);
  return Tensor();
}

Tensor Embedding::DoBackwardInput(const Tensor& dy, Context& ctx) {
  ctx.Save(this, "dy", Rows2D(dy));
  return Tensor();
}

void Embedding::DoBackwardWeight(Context& ctx) {
  ops::EmbeddingScatterAdd(ctx.exec(), ctx.Get(this, "dy"), ctx.Get(this, "ids"), table_->grad);
}

// --- LayerNorm

LayerNorm::LayerNorm(ParameterRegistry& reg, const std::string& name, int64_t dim, float eps)
    : Layer(name), dim_(dim), eps_(eps) {
  gamma_ = &reg.Create(name + ".weight", {dim}, InitSpec::Constant(1.0f), false);
  beta_ = &reg.Create(name + ".bias", {dim}, InitSpec::Zeros(), false);
  Owns(gamma_);
  Owns(beta_);
}

Tensor LayerNorm::DoForward(const Tensor& x, Context& ctx) {
  const ops::Exec& ex = ctx.exec();
  Tensor x2 = Rows2D(x);
  STRATA_CHECK(x2.size(1) == dim_) << name() << ": input " << ShapeToString(x.shape());
  Tensor y = ops::NewTensor(ex, x2.shape());
  Tensor mean = ops::NewTensor(ex, {x2.size(0)}), rstd = ops::NewTensor(ex, {x2.size(0)});
  ops::LayerNorm(ex, x2, gamma_->value, beta_->value, eps_, y, mean, rstd);
  ctx.SaveActivation(this, "x", x2);
  ctx.Save(this, "mean", mean);
  ctx.Save(this, "rstd", rstd);
  return Reshaped(y, x.shape());
}

Tensor LayerNorm::DoBackward(const Tensor& dy, Context& ctx) {
  const ops::Exec& ex = ctx.exec();
  Tensor x2 = ctx.Get(this, "x");
  Tensor dx = ops::NewTensor(ex, x2.shape());
  ops::LayerNormBackward(ex, Rows2D(dy), x2, gamma_->value, ctx.Get(this, "mean"),
                         ctx.Get(this, "rstd"), dx, gamma_->grad, beta_->grad);
  return Reshaped(dx, dy.shape());
}

Tensor LayerNorm::DoBackwardInput(const Tensor& dy, Context& ctx) {
  Tensor x2 = ctx.Get(this, "x"), dy2 = Rows2D(dy);
  Tensor dx = ops::NewTensor(ctx.exec(), x2.shape());
  ops::LayerNormBackwardInput(ctx.exec(), dy2, x2, gamma_->value, ctx.Get(this, "mean"),
                              ctx.Get(this, "rstd"), dx);
  ctx.Save(this, "dy", dy2);
  return Reshaped(dx, dy.shape());
}

void LayerNorm::DoBackwardWeight(Context& ctx) {
  ops::LayerNormBackwardWeight(ctx.exec(), ctx.Get(this, "dy"), ctx.Get(this, "x"),
                               ctx.Get(this, "mean"), ctx.Get(this, "rstd"), gamma_->grad,
                               beta_->grad);
}

// --- Activation

Tensor Activation::DoForward(const Tensor& x, Context& ctx) {
  Tensor y = ops::NewTensor(ctx.exec(), x.shape());
  if (kind_ == ActivationKind::kRelu) {
    ops::Relu(ctx.exec(), x, y);
  } else {
    ops::Gelu(ctx.exec(), x, y);
  }
  ctx.SaveActivation(this, "x", x);
  return y;
}

Tensor Activation::DoBackward(const Tensor& dy, Context& ctx) {
  Tensor x = ctx.Get(this, "x");
  Tensor dx = ops::NewTensor(ctx.exec(), x.shape());
  if (kind_ == ActivationKind::kRelu) {
    ops::ReluBackward(ctx.exec(), x, dy, dx);
  } else {
    ops::GeluBackward(ctx.exec(), x, dy, dx);
  }
  return dx;
}

Tensor Activation::DoBackwardInput(const Tensor& dy, Context& ctx) {
  Tensor dx = DoBackward(dy, ctx);
  ctx.Drop(this, "x");  // no weight half: nothing to keep until BackwardWeight
  return dx;
}

// --- Dropout

uint64_t Dropout::MaskSeed(const Context& ctx) const { return rng::Derive(ctx.seed(), name().c_str()); }

Tensor Dropout::DoForward(const Tensor& x, Context& ctx) {
  if (!ctx.training() || p_ == 0.0f) return x;
  Tensor y = ops::NewTensor(ctx.exec(), x.shape());
  ops::Dropout(ctx.exec(), x, p_, MaskSeed(ctx), y);
  return y;
}

Tensor Dropout::DoBackward(const Tensor& dy, Context& ctx) {
  if (!ctx.training() || p_ == 0.0f) return dy;
  Tensor dx = ops::NewTensor(ctx.exec(), dy.shape());
  ops::DropoutBackward(ctx.exec(), dy, p_, MaskSeed(ctx), dx);
  return dx;
}

// --- Sequential and MLP

Layer& Sequential::Add(std::unique_ptr<Layer> layer) {
  layers_.push_back(std::move(layer));
  return *layers_.back();
}

Tensor Sequential::DoForward(const Tensor& x, Context& ctx) {
  Tensor h = x;
  for (auto& layer : layers_) h = layer->Forward(h, ctx);
  return h;
}

Tensor Sequential::Backprop(const Tensor& dy, Context& ctx, BackwardPass pass) {
  Tensor g = dy;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) g = Back(**it, g, ctx, pass);
  return g;
}

Tensor Sequential::DoBackward(const Tensor& dy, Context& ctx) {
  return Backprop(dy, ctx, BackwardPass::kFused);
}

Tensor Sequential::DoBackwardInput(const Tensor& dy, Context& ctx) {
  return Backprop(dy, ctx, BackwardPass::kInput);
}

void Sequential::DoBackwardWeight(Context& ctx) {
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) (*it)->BackwardWeight(ctx);
}

std::unique_ptr<Sequential> MakeMlp(ParameterRegistry& reg, const std::string& name, int64_t in,
                                    int64_t hidden, int64_t out, ActivationKind act,
                                    float dropout, float out_init_std, TpGroup tp) {
  auto mlp = std::make_unique<Sequential>(name);
  mlp->Add(std::make_unique<Linear>(reg, name + ".fc1", in, hidden, true, -1.0f, LinearSplit::kColumn, tp));
  mlp->Add(std::make_unique<Activation>(name + ".act", act));
  mlp->Add(std::make_unique<Linear>(reg, name + ".fc2", hidden, out, true, out_init_std, LinearSplit::kRow, tp));
  if (dropout > 0) mlp->Add(std::make_unique<Dropout>(name + ".dropout", dropout));
  return mlp;
}

// --- CausalSelfAttention

CausalSelfAttention::CausalSelfAttention(ParameterRegistry& reg, const std::string& name,
                                         int64_t width, int64_t heads, float init_std,
                                         float proj_init_std, TpGroup tp, CpGroup cp)
    : Layer(name),
      width_(width),
      heads_(heads / tp.size()),
      local_(width / tp.size()),
      cp_(cp),
      qkv_(reg, name + ".qkv", width, 3 * width, true, init_std, LinearSplit::kColumn, tp, 3),
      proj_(reg, name + ".proj", width, width, true, proj_init_std, LinearSplit::kRow, tp) {
  STRATA_CHECK(width % heads == 0) << name << ": width " << width << " not divisible by heads "
                                   << heads;
  STRATA_CHECK(heads % tp.size() == 0) << name << ": " << heads << " heads over " << tp.size()
                                       << " tensor-parallel ranks";
}

Tensor CausalSelfAttention::DoForward(const Tensor& x, Context& ctx) {
  STRATA_CHECK(x.dim() == 3 && x.size(2) == width_) << name() << ": wants [B, T, C]";
  const ops::Exec& ex = ctx.exec();
  Tensor qkv3 = qkv_.Forward(x, ctx);  // [B, T, 3C/tp] (x may be a slice of the sequence)
  const int64_t b = qkv3.size(0), t = qkv3.size(1), hd = local_ / heads_;
  Tensor qkv = Rows2D(qkv3);
  const Shape hs{b, heads_, t, hd};
  Tensor q = ops::NewTensor(ex, hs), k = ops::NewTensor(ex, hs), v = ops::NewTensor(ex, hs);
  ops::SplitHeads(ex, qkv, b, heads_, q, k, v);
  if (DecodeState* d = ctx.decode()) {
    // Generation: this call's keys and values join the cache; the queries attend over each
    // row's prefix (nothing is saved: no backward).
    auto& [kc, vc] = d->kv[this];
    if (!kc.defined()) {
      kc = ops::NewZeros(ex, {b, heads_, d->capacity, hd});
      vc = ops::NewZeros(ex, {b, heads_, d->capacity, hd});
    }
    ops::KvAppend(ex, k, v, kc, vc, d->starts);
    Tensor y = ops::NewTensor(ex, hs);
    ops::CachedAttention(ex, q, kc, vc, d->starts, y);
    Tensor merged = ops::NewTensor(ex, {b * t, local_});
    ops::MergeHeads(ex, y, merged);
    return proj_.Forward(Reshaped(merged, {b, t, local_}), ctx);
  }
  Tensor y = ops::NewTensor(ex, hs);
  ctx.SaveActivation(this, "q", q);
  ctx.SaveActivation(this, "k", k);
  ctx.SaveActivation(this, "v", v);
  if (cp_.split()) {
    Tensor lse = ops::NewTensor(ex, {b, heads_, t});
    RingAttentionForward(cp_, ex, q, k, v, y, lse, name());
    ctx.SaveActivation(this, "out", y);
    ctx.Save(this, "lse", lse);
  } else {
    Tensor att = ops::NewTensor(ex, {b, heads_, t, t});
    ops::CausalAttention(ex, q, k, v, att, y);
    if (!recompute_core_) ctx.SaveActivation(this, "att", att);
  }
  Tensor merged = ops::NewTensor(ex, {b * t, local_});
  ops::MergeHeads(ex, y, merged);
  return proj_.Forward(Reshaped(merged, {b, t, local_}), ctx);
}

Tensor CausalSelfAttention::Backprop(const Tensor& dy, Context& ctx, BackwardPass pass) {
  const ops::Exec& ex = ctx.exec();
  Tensor q = ctx.Get(this, "q"), k = ctx.Get(this, "k"), v = ctx.Get(this, "v");
  const int64_t b = q.size(0), t = q.size(2);
  Tensor dmerged = Rows2D(Back(proj_, dy, ctx, pass));
  Tensor dyh = ops::NewTensor(ex, q.shape());
  ops::SplitHeadsGrad(ex, dmerged, dyh);
  Tensor dq = ops::NewTensor(ex, q.shape()), dk = ops::NewTensor(ex, q.shape()),
         dv = ops::NewTensor(ex, q.shape());
  if (cp_.split()) {
    RingAttentionBackward(cp_, ex, q, k, v, ctx.Get(this, "out"), ctx.Get(this, "lse"), dyh, dq, dk, dv, name());
  } else {
    Tensor att;
    if (recompute_core_) {
      att = ops::NewTensor(ex, {b, heads_, t, t});
      Tensor unused = ops::NewTensor(ex, q.shape());
      ops::CausalAttention(ex, q, k, v, att, unused);
    } else {
      att = ctx.Get(this, "att");
    }
    ops::CausalAttentionBackward(ex, q, k, v, att, dyh, dq, dk, dv);
  }
  Tensor dqkv = ops::NewTensor(ex, {b * t, 3 * local_});
  ops::MergeHeadsGrad(ex, dq, dk, dv, dqkv);
  if (pass == BackwardPass::kInput) {  // the weight half needs none of these
    for (const char* key : {"q", "k", "v"}) ctx.Drop(this, key);
    if (cp_.split()) {
      ctx.Drop(this, "out");
      ctx.Drop(this, "lse");
    } else if (!recompute_core_) {
      ctx.Drop(this, "att");
    }
  }
  return Back(qkv_, Reshaped(dqkv, {b, t, 3 * local_}), ctx, pass);
}

Tensor CausalSelfAttention::DoBackward(const Tensor& dy, Context& ctx) {
  return Backprop(dy, ctx, BackwardPass::kFused);
}

Tensor CausalSelfAttention::DoBackwardInput(const Tensor& dy, Context& ctx) {
  return Backprop(dy, ctx, BackwardPass::kInput);
}

void CausalSelfAttention::DoBackwardWeight(Context& ctx) {
  proj_.BackwardWeight(ctx);  // the fused order: proj's gradients first, then qkv's
  qkv_.BackwardWeight(ctx);
}

// --- TransformerBlock

TransformerBlock::TransformerBlock(ParameterRegistry& reg, const std::string& name,
                                   int64_t width, int64_t heads, int num_layers_total,
                                   float dropout, TpGroup tp, CpGroup cp)
    : Layer(name),
      ln1_(reg, name + ".ln1", width),
      // GPT-2: residual projections scaled by 1/sqrt(2 * layers) so the stream stays bounded.
      attn_(reg, name + ".attn", width, heads, 0.02f,
            0.02f / std::sqrt(2.0f * static_cast<float>(num_layers_total)), tp, cp),
      ln2_(reg, name + ".ln2", width),
      mlp_(MakeMlp(reg, name + ".mlp", width, 4 * width, width, ActivationKind::kGelu, dropout,
                   0.02f / std::sqrt(2.0f * static_cast<float>(num_layers_total)), tp)) {
  if (tp.sequence_split()) {
    ln1_.set_sequence_partial();
    ln2_.set_sequence_partial();
  }
}

Tensor TransformerBlock::DoForward(const Tensor& x, Context& ctx) {
  const ops::Exec& ex = ctx.exec();
  Tensor a = attn_.Forward(ln1_.Forward(x, ctx), ctx);
  Tensor h = ops::NewTensor(ex, x.shape());
  ops::Add(ex, x, a, h);
  Tensor m = mlp_->Forward(ln2_.Forward(h, ctx), ctx);
  Tensor out = ops::NewTensor(ex, x.shape());
  ops::Add(ex, h, m, out);
  return out;
}

Tensor TransformerBlock::Backprop(const Tensor& dy, Context& ctx, BackwardPass pass) {
  const ops::Exec& ex = ctx.exec();
  Tensor dh = ops::NewTensor(ex, dy.shape());
  ops::Add(ex, dy, Back(ln2_, Back(*mlp_, dy, ctx, pass), ctx, pass), dh);
  Tensor dx = ops::NewTensor(ex, dy.shape());
  ops::Add(ex, dh, Back(ln1_, Back(attn_, dh, ctx, pass), ctx, pass), dx);
  return dx;
}

Tensor TransformerBlock::DoBackward(const Tensor& dy, Context& ctx) {
  return Backprop(dy, ctx, BackwardPass::kFused);
}

Tensor TransformerBlock::DoBackwardInput(const Tensor& dy, Context& ctx) {
  return Backprop(dy, ctx, BackwardPass::kInput);
}

void TransformerBlock::DoBackwardWeight(Context& ctx) {
  mlp_->BackwardWeight(ctx);  // the fused order, as the backward walk met them
  ln2_.BackwardWeight(ctx);
  attn_.BackwardWeight(ctx);
  ln1_.BackwardWeight(ctx);
}

}  // namespace strata::nn
