// gpt.cc: the byte-level GPT (learned positions, pre-norm blocks, untied head) as units:
// the embedding (tokens + positions + dropout), one unit per block, and the final norm + head.
// Over tensor-parallel ranks (Megatron's split): the token table and the head by vocabulary
// (the loss is then vocab-parallel), every block's attention by heads and MLP by columns/rows;
// positions and norms are whole on every rank. With sequence parallelism what flows between
// units is this rank's slice of the sequence [N, T/tp, C]: the embedding reduce-scatters, the
// positions, norms and residuals work on the slice, and the head gathers the sequence back.
// Over context-parallel ranks each holds its chunks of every sequence (ids [N, T/cp]): the
// embedding adds their positions, the blocks' attention runs around the ring, and the loss is
// over this rank's tokens (the trainer averages it over dp x cp).
#include <string>
#include <vector>

#include "trainer/models/zoo.h"
#include "trainer/nn/tensor_parallel.h"
#include "trainer/ops/ops.h"

namespace strata {
namespace {

// The token embedding: a sparse table (rows the parameter servers may serve) when whole, split
// by vocabulary over tp.
std::unique_ptr<nn::Layer> TokenEmbedding(nn::ParameterRegistry& reg, const ModelOptions& o, nn::TpGroup tp) {
  if (tp.split()) return std::make_unique<nn::VocabParallelEmbedding>(reg, "gpt.tok", o.vocab, o.width, tp, 0.02f);
  return std::make_unique<nn::Embedding>(reg, "gpt.tok", o.sparse_rows ? o.sparse_rows : o.vocab, o.width, 0.02f);
}

// ids [N, T] -> tok(ids) + pos[:T], then dropout: [N, T, C].
class GptEmbedding final : public nn::Layer {
 public:
  GptEmbedding(nn::ParameterRegistry& reg, const ModelOptions& o, nn::TpGroup tp, nn::CpGroup cp)
      : Layer("gpt.embed"),
        width_(o.width),
        context_(o.context),
        tp_(tp),
        cp_(cp),
        tok_(TokenEmbedding(reg, o, tp)),
        pos_(&reg.Create("gpt.pos.weight", {o.context, o.width}, InitSpec::Normal(0.01f), false)),
        drop_("gpt.drop", static_cast<float>(o.dropout)) {
    Owns(pos_);
    pos_->sequence_partial = tp.sequence_split();  // each rank adds the rows of its positions
  }

 protected:
  Tensor DoForward(const Tensor& ids, nn::Context& ctx) override {
    STRATA_CHECK_LE(ids.size(1), context_) << "sequence longer than the context";
    Tensor x = tok_->Forward(ids, ctx);  // [N, T, C], or [N, T/tp, C] (sequence-parallel)
    const int64_t n = x.size(0), t = x.size(1), c = width_;
    if (const nn::DecodeState* d = ctx.decode()) {
      // Generation: row r's tokens sit at positions starts[r] ...
      for (int64_t r = 0; r < n; ++r) {
        const int64_t first = d->starts.at(static_cast<size_t>(r));
        STRATA_CHECK_LE(first + t, context_) << "generation past the context (" << context_ << " positions)";
        ops::AddBias(ctx.exec(), Reshaped(x.Narrow(0, r, 1), {1, t * c}),
                     Reshaped(pos_->value.Narrow(0, first, t), {t * c}));
      }
      return x;  // no dropout in inference
    }
    if (!cp_.split()) {
      ops::AddBias(ctx.exec(), Reshaped(x, {n, t * c}), Reshaped(pos_->value.Narrow(0, FirstPosition(t), t), {t * c}));
      return drop_.Forward(x, ctx);
    }
    for (const Run& run : Runs(t)) {  // row by row: a run is contiguous within a row only
      for (int64_t r = 0; r < n; ++r) {
        ops::AddBias(ctx.exec(), Reshaped(x.Narrow(0, r, 1).Narrow(1, run.local, run.length), {1, run.length * c}),
                     Reshaped(pos_->value.Narrow(0, run.position, run.length), {run.length * c}));
      }
    }
    return drop_.Forward(x, ctx);
  }
  Tensor DoBackward(const Tensor& dy, nn::Context& ctx) override {
    Tensor dx = drop_.Backward(dy, ctx);
    PositionGrad(dx, ctx);
    tok_->Backward(dx, ctx);
    return Tensor();
  }
  Tensor DoBackwardInput(const Tensor& dy, nn::Context& ctx) override {
    Tensor dx = drop_.BackwardInput(dy, ctx);
    ctx.Save(this, "dx", dx);
    tok_->BackwardInput(dx, ctx);
    return Tensor();
  }
  void DoBackwardWeight(nn::Context& ctx) override {
    PositionGrad(ctx.Get(this, "dx"), ctx);
    drop_.BackwardWeight(ctx);
    tok_->BackwardWeight(ctx);
  }

 private:
  void PositionGrad(const Tensor& dx, nn::Context& ctx) {
    const int64_t n = dx.size(0), t = dx.size(1), c = width_;
    if (!cp_.split()) {
      ops::BiasGrad(ctx.exec(), Reshaped(dx, {n, t * c}), Reshaped(pos_->grad.Narrow(0, FirstPosition(t), t), {t * c}));
      return;
    }
    for (const Run& run : Runs(t)) {
      for (int64_t r = 0; r < n; ++r) {
        ops::BiasGrad(ctx.exec(), Reshaped(dx.Narrow(0, r, 1).Narrow(1, run.local, run.length), {1, run.length * c}),
                      Reshaped(pos_->grad.Narrow(0, run.position, run.length), {run.length * c}));
      }
    }
  }
  // The position of this rank's first token when it holds `t` of them.
  int64_t FirstPosition(int64_t t) const { return tp_.sequence_split() ? tp_.rank() * t : 0; }

  // Under context parallelism this rank's `t` tokens (a tp slice of its cp part when sequence
  // parallel too) are runs of consecutive positions: [local, local + length) at `position`.
  struct Run {
    int64_t local, position, length;
  };
  std::vector<Run> Runs(int64_t t) const {
    const int64_t cp_local = tp_.sequence_split() ? t * tp_.size() : t;
    std::vector<int64_t> positions = cp_.Positions(cp_local);
    const int64_t first = FirstPosition(t);
    std::vector<Run> runs;
    for (int64_t i = 0; i < t; ++i) {
      const int64_t p = positions[static_cast<size_t>(first + i)];
      if (!runs.empty() && runs.back().position + runs.back().length == p) {
        ++runs.back().length;
      } else {
        runs.push_back({i, p, 1});
      }
    }
    return runs;
  }

  int64_t width_, context_;
  nn::TpGroup tp_;
  nn::CpGroup cp_;
  std::unique_ptr<nn::Layer> tok_;
  nn::Parameter* pos_;
  nn::Dropout drop_;
};

class GptModel final : public Model {
 public:
  GptModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build, nn::TpGroup tp, nn::CpGroup cp)
      : Model(ex, o.seed, nn::LossKind::kCrossEntropy, tp) {
    const int64_t c = o.width, n = tp.size();
    const int seq = tp.sequence_split() ? tp.size() : 1;  // what flows between units
    const int64_t vocab_rows = tp.split() ? o.vocab / n : o.sparse_rows ? o.sparse_rows : o.vocab;
    AddUnit({"gpt.embed", vocab_rows * c + o.context * c, c, seq}, build,
            [&] { return std::make_unique<GptEmbedding>(reg_, o, tp, cp); });
    // qkv 3C^2 + 3C, proj C^2 + C, fc1 4C^2 + 4C, fc2 4C^2 + C, two norms 4C; this rank holds
    // 1/tp of all but the norms and the row-split layers' biases.
    const int64_t block_params = (12 * c * c + 7 * c) / n + 6 * c;
    for (int64_t i = 0; i < o.layers; ++i) {
      const std::string name = "gpt.block" + std::to_string(i);
      AddUnit({name, block_params, c, seq}, build, [&] {
        auto block = std::make_unique<nn::TransformerBlock>(
            reg_, name, c, o.heads, static_cast<int>(o.layers), static_cast<float>(o.dropout), tp, cp);
        block->set_recompute(o.recompute);
        block->attention().set_recompute_core(o.recompute_attention_core);
        return block;
      });
    }
    AddUnit({"gpt.final", 2 * c + c * o.vocab / n, o.vocab / n}, build, [&] {
      auto final = std::make_unique<nn::Sequential>("gpt.final");
      auto& ln_f = static_cast<nn::LayerNorm&>(final->Add(std::make_unique<nn::LayerNorm>(reg_, "gpt.ln_f", c)));
      if (tp.sequence_split()) ln_f.set_sequence_partial();
      final->Add(std::make_unique<nn::ColumnParallelLinear>(reg_, "gpt.head", c, o.vocab, tp, false, 0.02f));
      return final;
    });
  }
  Shape LeadingShape(const Batch& b) const override { return {b.ids.size(0), b.ids.size(1)}; }
};

}  // namespace

std::unique_ptr<Model> MakeGptModel(const ModelOptions& o, const ops::Exec& ex, const UnitSelection& build,
                                    nn::TpGroup tp, nn::CpGroup cp) {
  return std::make_unique<GptModel>(o, ex, build, tp, cp);
}

}  // namespace strata
