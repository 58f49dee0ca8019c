// ctr.cc: the click-through-rate model: logit = fc2(relu(fc1(concat of field embeddings) +
// dense_fc(dense))) + the sum of a per-id scalar (the wide part). One unit: it takes two inputs
// (ids and dense features), so it does not pipeline; its tables are what the servers shard.
#include "trainer/models/zoo.h"

#include "trainer/ops/ops.h"

namespace strata {
namespace {

class CtrNet final : public nn::Layer {
 public:
  CtrNet(nn::ParameterRegistry& reg, const ModelOptions& o)
      : Layer("ctr"),
        fields_(o.fields),
        dim_(o.embed_dim),
        embedding_(reg, "ctr.embedding", o.sparse_rows ? o.sparse_rows : o.fields * o.field_vocab, o.embed_dim, 0.1f),
        wide_(reg, "ctr.wide", o.sparse_rows ? o.sparse_rows : o.fields * o.field_vocab, 1, 0.0f),
        fc1_(reg, "ctr.fc1", o.fields * o.embed_dim, o.ctr_hidden),
        act_("ctr.act", nn::ActivationKind::kRelu),
        fc2_(reg, "ctr.fc2", o.ctr_hidden, 1) {
    if (o.dense > 0) dense_fc_ = std::make_unique<nn::Linear>(reg, "ctr.dense_fc", o.dense, o.ctr_hidden, false);
    ones_ = ops::NewTensor(reg.exec(), {fields_, 1});
    ops::Fill(reg.exec(), ones_, 1.0f);
  }

  // ids [N, fields], dense [N, dense] (undefined without dense features) -> logits [N].
  Tensor ForwardBoth(const Tensor& ids, const Tensor& dense, nn::Context& ctx) {
    const ops::Exec& ex = ctx.exec();
    const int64_t n = ids.size(0);
    Tensor emb = Reshaped(embedding_.Forward(ids, ctx), {n, fields_ * dim_});
    Tensor z = fc1_.Forward(emb, ctx);
    if (dense_fc_) {
      Tensor zd = dense_fc_->Forward(dense, ctx);
      ops::Axpy(ex, 1.0f, zd, z);
    }
    Tensor deep = fc2_.Forward(act_.Forward(z, ctx), ctx);  // [N, 1]
    Tensor wide = Reshaped(wide_.Forward(ids, ctx), {n, fields_});
    ops::Matmul(ex, wide, ones_, deep, false, false, 1.0f, 1.0f);  // deep += row sums of wide
    return Reshaped(deep, {n});
  }

 protected:
  Tensor DoForward(const Tensor& ids, nn::Context& ctx) override {
    STRATA_CHECK(!dense_fc_) << "ctr with dense features takes them through ForwardBoth";
    return ForwardBoth(ids, Tensor(), ctx);
  }
  Tensor DoBackward(const Tensor& dout, nn::Context& ctx) override {
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
    return Tensor();
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

class CtrModel final : public Model {
 public:
  CtrModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build)
      : Model(ex, o.seed, nn::LossKind::kBceWithLogits) {
    // The tables' rows as built here: the compact per-step tables under ps and hybrid
    // (sparse_rows), as gpt's token embedding counts them, so the spec is what this rank holds.
    const int64_t rows = o.sparse_rows ? o.sparse_rows : o.fields * o.field_vocab;
    const int64_t params = rows * o.embed_dim + rows + o.fields * o.embed_dim * o.ctr_hidden +
                           o.ctr_hidden + o.dense * o.ctr_hidden + o.ctr_hidden + 1;
    AddUnit({"ctr", params, 1}, build, [&] {
      auto net = std::make_unique<CtrNet>(reg_, o);
      net_ = net.get();
      return net;
    });
  }
  bool can_pipeline() const override { return false; }
  Shape LeadingShape(const Batch& b) const override { return {b.ids.size(0)}; }
  Tensor ForwardUnits(UnitRange r, const Batch& b, const Tensor& x, nn::Context& ctx) override {
    STRATA_CHECK(r.first == 0 && r.last == 1) << "ctr is one unit";
    (void)x;
    if (hooks_) hooks_->BeforeUnit(0, UnitHooks::Pass::kForward, r, ctx);
    Tensor out = net_->ForwardBoth(b.ids, b.x, ctx);
    if (hooks_) hooks_->AfterUnit(0, UnitHooks::Pass::kForward, ctx);
    return out;
  }

 private:
  CtrNet* net_ = nullptr;
};

}  // namespace

std::unique_ptr<Model> MakeCtrModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build) {
  return std::make_unique<CtrModel>(o, ex, build);
}

}  // namespace strata
