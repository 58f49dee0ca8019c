// gpt_graph.cc: OpGraph's helpers and BuildGptGraph, gpt.cc's units as ops: the embedding
// (tokens + positions), pre-norm blocks (attention, MLP, two residuals) and the final norm, the
// head and the loss.
#include "trainer/auto/op_graph.h"

#include <utility>

namespace strata {

std::string_view GraphOpKindName(GraphOpKind kind) {
  switch (kind) {
    case GraphOpKind::kEmbedding: return "embedding";
    case GraphOpKind::kAddPositions: return "add_positions";
    case GraphOpKind::kLayerNorm: return "layer_norm";
    case GraphOpKind::kMatmul: return "matmul";
    case GraphOpKind::kBiasAdd: return "bias_add";
    case GraphOpKind::kGelu: return "gelu";
    case GraphOpKind::kSplitQkv: return "split_qkv";
    case GraphOpKind::kAttention: return "attention";
    case GraphOpKind::kMergeHeads: return "merge_heads";
    case GraphOpKind::kAdd: return "add";
    case GraphOpKind::kCrossEntropy: return "cross_entropy";
  }
  return "?";
}

int OpGraph::Add(GraphTensor t) {
  tensors.push_back(std::move(t));
  return static_cast<int>(tensors.size()) - 1;
}

int OpGraph::Find(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

namespace {

using Kind = GraphTensor::Kind;

class GptBuilder {
 public:
  GptBuilder(OpGraph& g, int64_t rows) : g_(g), rows_(rows) {}

  int Param(const std::string& name, Shape shape, std::vector<int> axes = {}) {
    return g_.Add({name, std::move(shape), Kind::kParameter, unit_, std::move(axes)});
  }
  int Op(GraphOpKind kind, const std::string& name, std::vector<int> inputs, const Shape& out,
         int64_t batch = 1, int64_t heads = 1, int outputs = 1) {
    GraphOp op{kind, name, std::move(inputs), {}, unit_, batch, heads};
    for (int i = 0; i < outputs; ++i) {
      const std::string suffix = outputs == 1 ? "" : std::string(1, "qkv"[i]);
      op.outputs.push_back(g_.Add({name + (suffix.empty() ? "" : "." + suffix), out,
                                   Kind::kActivation, unit_, {}}));
    }
    g_.ops.push_back(op);
    return op.outputs[0];
  }
  // x @ w + b, w [in, out] placed by cost (axis 0 or 1), b [out] by the bias add's rule.
  int Linear(const std::string& name, int x, int64_t in, int64_t out, bool bias = true) {
    const int w = Param(name + ".weight", {in, out}, {0, 1});
    int y = Op(GraphOpKind::kMatmul, name + " x @ w", {x, w}, {rows_, out});
    if (!bias) return y;
    const int b = Param(name + ".bias", {out});
    return Op(GraphOpKind::kBiasAdd, name + " output", {y, b}, {rows_, out});
  }
  int LayerNorm(const std::string& name, int x, int64_t c) {
    const int gamma = Param(name + ".weight", {c}), beta = Param(name + ".bias", {c});
    return Op(GraphOpKind::kLayerNorm, name + " output", {x, gamma, beta}, {rows_, c});
  }
  void set_unit(int u) { unit_ = u; }

 private:
  OpGraph& g_;
  int64_t rows_;
  int unit_ = 0;
};

}  // namespace

Result<OpGraph> BuildGptGraph(const ModelOptions& m, int64_t batch) {
  if (m.kind != ModelOptions::Kind::kGpt) return Status::InvalidArgument("model.kind: not gpt");
  if (m.width < 1 || m.heads < 1 || m.width % m.heads != 0) {
    return Status::InvalidArgument("model.width " + std::to_string(m.width) +
                                   " must be a positive multiple of model.heads " +
                                   std::to_string(m.heads));
  }
  if (batch < 1 || m.context < 1 || m.vocab < 1 || m.layers < 1) {
    return Status::InvalidArgument(
        "train.batch_size, model.context, model.vocab and model.layers must be >= 1");
  }
  OpGraph g;
  g.model = "gpt";
  const int64_t c = m.width, t = m.context, rows = batch * t, h = m.heads;
  GptBuilder b(g, rows);
  g.input = g.Add({"input", {rows}, Kind::kInput, 0, {}});
  g.targets = g.Add({"targets", {rows}, Kind::kInput, static_cast<int>(m.layers) + 1, {}});
  const int tok = b.Param("gpt.tok.weight", {m.vocab, c}, {0});
  const int pos = b.Param("gpt.pos.weight", {t, c});
  int x = b.Op(GraphOpKind::kEmbedding, "gpt.tok rows", {tok, g.input}, {rows, c});
  x = b.Op(GraphOpKind::kAddPositions, "gpt.embed output", {x, pos}, {rows, c}, batch);
  for (int64_t i = 0; i < m.layers; ++i) {
    b.set_unit(static_cast<int>(i) + 1);
    const std::string n = "gpt.block" + std::to_string(i);
    int y = b.LayerNorm(n + ".ln1", x, c);
    y = b.Linear(n + ".attn.qkv", y, c, 3 * c);
    const int q = b.Op(GraphOpKind::kSplitQkv, n + ".attn heads", {y}, {batch, h, t, c / h},
                       batch, h, 3);
    y = b.Op(GraphOpKind::kAttention, n + ".attn core", {q, q + 1, q + 2}, {batch, h, t, c / h},
             batch, h);
    y = b.Op(GraphOpKind::kMergeHeads, n + ".attn merged", {y}, {rows, c}, batch, h);
    y = b.Linear(n + ".attn.proj", y, c, c);
    x = b.Op(GraphOpKind::kAdd, n + " residual1", {x, y}, {rows, c});
    y = b.LayerNorm(n + ".ln2", x, c);
    y = b.Linear(n + ".mlp.fc1", y, c, 4 * c);
    y = b.Op(GraphOpKind::kGelu, n + ".mlp.act output", {y}, {rows, 4 * c});
    y = b.Linear(n + ".mlp.fc2", y, 4 * c, c);
    x = b.Op(GraphOpKind::kAdd, n + " output", {x, y}, {rows, c});
  }
  b.set_unit(static_cast<int>(m.layers) + 1);
  x = b.LayerNorm("gpt.ln_f", x, c);
  x = b.Linear("gpt.head", x, c, m.vocab, /*bias=*/false);
  b.Op(GraphOpKind::kCrossEntropy, "loss", {x, g.targets}, {1});
  g.units = static_cast<int>(m.layers) + 2;
  return g;
}

}  // namespace strata
