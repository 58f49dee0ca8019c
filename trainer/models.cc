// models.cc: MlpModel, CtrModel, GptModel.
#include "trainer/models.h"

#include <string>
#include <vector>

#include "trainer/ops/ops.h"

namespace strata {
namespace {

Tensor Reshaped(const Tensor& t, Shape shape) {
  Result<Tensor> r = t.Reshape(std::move(shape));
  STRATA_CHECK(r.ok()) << r.status().ToString();
  return *std::move(r);
}

class MlpModel final : public Model {
 public:
  MlpModel(const ModelOptions& o, const ops::Exec& ex) : Model(ex, o.seed, nn::LossKind::kMse) {
    mlp_ = nn::MakeMlp(reg_, "mlp", o.mlp_in, o.mlp_hidden, o.mlp_out, nn::ActivationKind::kRelu);
    mlp_->set_recompute(o.recompute);
  }

 protected:
  Tensor Forward(const Batch& b, nn::Context& ctx) override { return mlp_->Forward(b.x, ctx); }
  void Backward(const Tensor& dout, nn::Context& ctx) override { mlp_->Backward(dout, ctx); }

 private:
  std::unique_ptr<nn::Sequential> mlp_;
};

// logit = fc2(relu(fc1(concat of field embeddings) + dense_fc(dense))) + sum of per-id scalars.
class CtrModel final : public Model {
 public:
  CtrModel(const ModelOptions& o, const ops::Exec& ex)
      : Model(ex, o.seed, nn::LossKind::kBceWithLogits),
        fields_(o.fields),
        dim_(o.embed_dim),
        embedding_(reg_, "ctr.embedding", o.sparse_rows ? o.sparse_rows : o.fields * o.field_vocab, o.embed_dim, 0.1f),
        wide_(reg_, "ctr.wide", o.sparse_rows ? o.sparse_rows : o.fields * o.field_vocab, 1, 0.0f),
        fc1_(reg_, "ctr.fc1", o.fields * o.embed_dim, o.ctr_hidden),
        act_("ctr.act", nn::ActivationKind::kRelu),
        fc2_(reg_, "ctr.fc2", o.ctr_hidden, 1) {
    if (o.dense > 0) dense_fc_ = std::make_unique<nn::Linear>(reg_, "ctr.dense_fc", o.dense, o.ctr_hidden, false);
    ones_ = ops::NewTensor(ex, {fields_, 1});
    ops::Fill(ex, ones_, 1.0f);
  }

 protected:
  Tensor Forward(const Batch& b, nn::Context& ctx) override {
    const ops::Exec& ex = ctx.exec();
    const int64_t n = b.ids.size(0);
    Tensor emb = Reshaped(embedding_.Forward(b.ids, ctx), {n, fields_ * dim_});
    Tensor z = fc1_.Forward(emb, ctx);
    if (dense_fc_) {
      Tensor zd = dense_fc_->Forward(b.x, ctx);
      ops::Axpy(ex, 1.0f, zd, z);
    }
    Tensor deep = fc2_.Forward(act_.Forward(z, ctx), ctx);  // [N, 1]
    Tensor wide = Reshaped(wide_.Forward(b.ids, ctx), {n, fields_});
    ops::Matmul(ex, wide, ones_, deep, false, false, 1.0f, 1.0f);  // deep += row sums of wide
    return Reshaped(deep, {n});
  }
  void Backward(const Tensor& dout, nn::Context& ctx) override {
    const ops::Exec& ex = ctx.exec();
    const int64_t n = dout.numel();
    Tensor dlogit = Reshaped(dout, {n, 1});
    Tensor dwide = ops::NewTensor(ex, {n, fields_});
    ops::Matmul(ex, dlogit, ones_, dwide, false, true);
    wide_.Backward(Reshaped(dwide, {n, fields_, 1}), ctx);
    Tensor dz = act_.Backward(fc2_.Backward(dlogit, ctx), ctx);
    if (dense_fc_) dense_fc_->Backward(dz, ctx);
    Tensor demb = fc1_.Backward(dz, ctx);
    embedding_.Backward(Reshaped(demb, {n, fields_, dim_}), ctx);
  }

 private:
  int64_t fields_, dim_;
  nn::Embedding embedding_;
  nn::Embedding wide_;
  nn::Linear fc1_;
  nn::Activation act_;
  nn::Linear fc2_;
  std::unique_ptr<nn::Linear> dense_fc_;
  Tensor ones_;
};

class GptModel final : public Model {
 public:
  GptModel(const ModelOptions& o, const ops::Exec& ex)
      : Model(ex, o.seed, nn::LossKind::kCrossEntropy),
        o_(o),
        tok_(reg_, "gpt.tok", o.sparse_rows ? o.sparse_rows : o.vocab, o.width, 0.02f),
        pos_(&reg_.Create("gpt.pos.weight", {o.context, o.width}, InitSpec::Normal(0.01f), false)),
        drop_("gpt.drop", static_cast<float>(o.dropout)),
        ln_f_(reg_, "gpt.ln_f", o.width),
        head_linear_(reg_, "gpt.head", o.width, o.vocab, false, 0.02f) {
    for (int64_t i = 0; i < o.layers; ++i) {
      blocks_.push_back(std::make_unique<nn::TransformerBlock>(
          reg_, "gpt.block" + std::to_string(i), o.width, o.heads, static_cast<int>(o.layers),
          static_cast<float>(o.dropout)));
      blocks_.back()->set_recompute(o.recompute);
    }
  }

 protected:
  Tensor Forward(const Batch& b, nn::Context& ctx) override {
    const int64_t n = b.ids.size(0), t = b.ids.size(1), c = o_.width;
    STRATA_CHECK_LE(t, o_.context) << "sequence longer than the context";
    Tensor x = tok_.Forward(b.ids, ctx);  // [N, T, C]
    ops::AddBias(ctx.exec(), Reshaped(x, {n, t * c}), Reshaped(pos_->value.Narrow(0, 0, t), {t * c}));
    x = drop_.Forward(x, ctx);
    for (auto& block : blocks_) x = block->Forward(x, ctx);
    return head_linear_.Forward(ln_f_.Forward(x, ctx), ctx);  // [N, T, V]
  }
  void Backward(const Tensor& dout, nn::Context& ctx) override {
    Tensor dx = ln_f_.Backward(head_linear_.Backward(dout, ctx), ctx);
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) dx = (*it)->Backward(dx, ctx);
    dx = drop_.Backward(dx, ctx);
    const int64_t n = dx.size(0), t = dx.size(1), c = o_.width;
    ops::BiasGrad(ctx.exec(), Reshaped(dx, {n, t * c}), Reshaped(pos_->grad.Narrow(0, 0, t), {t * c}));
    ctx.GradReady(*pos_);
    tok_.Backward(dx, ctx);
  }

 private:
  ModelOptions o_;
  nn::Embedding tok_;
  nn::Parameter* pos_;
  nn::Dropout drop_;
  std::vector<std::unique_ptr<nn::TransformerBlock>> blocks_;
  nn::LayerNorm ln_f_;
  nn::Linear head_linear_;
};

Batch BatchToDevice(const Batch& b, const ops::Exec& ex) {
  if (!ex.is_cuda()) return b;
  Batch d = b;
  for (Tensor* t : {&d.x, &d.ids, &d.target}) {
    if (t->defined()) *t = ToDevice(*t, ex);
  }
  return d;
}

}  // namespace

Tensor ToDevice(const Tensor& t, const ops::Exec& ex) {
  if (t.device() == ex.device) return t;
  Tensor d = ops::NewTensor(ex, t.shape(), t.dtype());
  STRATA_CHECK_OK(d.CopyFrom(t));
  return d;
}

Tensor ToHost(const Tensor& t) {
  if (t.is_cpu()) return t;
  Tensor h = ops::NewTensor(ops::Exec::Cpu(), t.shape(), t.dtype());
  STRATA_CHECK_OK(h.CopyFrom(t));
  return h;
}

double Model::ForwardBackward(const Batch& batch, nn::Context& ctx, float grad_scale) {
  Batch b = BatchToDevice(batch, exec());
  Tensor out = Forward(b, ctx);
  const double loss = head_.Forward(out, b.target, ctx, grad_scale);
  Backward(head_.Backward(ctx), ctx);
  return loss;
}

double Model::Evaluate(const Batch& batch, nn::Context& ctx, Tensor* output) {
  Batch b = BatchToDevice(batch, exec());
  Tensor out = Forward(b, ctx);
  const double loss = head_.Forward(out, b.target, ctx);
  if (output) *output = ToHost(out);
  return loss;
}

Result<std::unique_ptr<Model>> CreateModel(const ModelOptions& o, const ops::Exec& ex) {
  switch (o.kind) {
    case ModelOptions::Kind::kMlp: return std::unique_ptr<Model>(std::make_unique<MlpModel>(o, ex));
    case ModelOptions::Kind::kCtr: return std::unique_ptr<Model>(std::make_unique<CtrModel>(o, ex));
    case ModelOptions::Kind::kGpt:
      if (o.width % o.heads != 0) return Status::InvalidArgument("model.width must be divisible by model.heads");
      return std::unique_ptr<Model>(std::make_unique<GptModel>(o, ex));
  }
  return Status::Internal("unknown model kind");
}

}  // namespace strata
