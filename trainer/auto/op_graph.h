// op_graph.h: OpGraph, a model's forward pass as data (ops over named tensors, each with its
// global shape), which sharding propagation (propagate.h) walks forward and backward. Built for
// gpt from its options; the tensors carry the names the trainer's parameters have.
#pragma once

#include <string>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"
#include "trainer/train_options.h"

namespace strata {

enum class GraphOpKind {
  kEmbedding,     // (table [V, C], ids [R]) -> rows [R, C]
  kAddPositions,  // (rows [B*T, C], pos [T, C]) -> rows + pos broadcast over the B sequences
  kLayerNorm,     // (x [R, C], gamma [C], beta [C]) -> y
  kMatmul,        // (x [R, K], w [K, N]) -> x @ w
  kBiasAdd,       // (x [R, N], b [N]) -> x + b
  kGelu,          // (x) -> gelu(x)
  kSplitQkv,      // (qkv [B*T, 3C]) -> q, k, v [B, H, T, C/H] (the column layout of 3 blocks)
  kAttention,     // (q, k, v [B, H, T, D]) -> causal softmax(q k^T / sqrt(D)) v, [B, H, T, D]
  kMergeHeads,    // (o [B, H, T, D]) -> [B*T, C]
  kAdd,           // (a, b) same shape -> a + b (the residual)
  kCrossEntropy,  // (logits [R, V], targets [R]) -> the mean loss [1]
};
std::string_view GraphOpKindName(GraphOpKind kind);

struct GraphTensor {
  enum class Kind { kInput, kParameter, kActivation };
  std::string name;
  Shape shape;
  Kind kind = Kind::kActivation;
  int unit = 0;  // the model unit (embedding 0, block i at i + 1, final) that owns or makes it
  // A parameter the propagation places by cost on a model-parallel mesh dimension: the Shard
  // axes a layer of the trainer stores it in (a Linear's weight: 0 rows or 1 columns; the
  // token table: 0, the vocabulary). Empty: placed by the rule of the op that reads it.
  std::vector<int> shard_axes;
};

struct GraphOp {
  GraphOpKind kind = GraphOpKind::kAdd;
  std::string name;
  std::vector<int> inputs, outputs;  // indices into OpGraph::tensors
  int unit = 0;
  int64_t batch = 1, heads = 1;  // head split, merge and attention
};

struct OpGraph {
  std::string model;  // "gpt"
  std::vector<GraphTensor> tensors;
  std::vector<GraphOp> ops;
  int units = 0;
  int input = -1, targets = -1;  // the batch's ids and targets

  int Add(GraphTensor t);
  int Find(const std::string& name) const;  // -1 when absent
};

// gpt's forward for one global micro-batch of `batch` sequences of model.context tokens (dropout
// is left out: it moves nothing and keeps placements). InvalidArgument naming the field when the
// options describe no gpt.
Result<OpGraph> BuildGptGraph(const ModelOptions& model, int64_t batch);

}  // namespace strata
