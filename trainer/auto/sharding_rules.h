// sharding_rules.h: per-operator sharding rules, pure functions from the placements of an op's
// inputs to the placements they must be resharded to and the placements of its outputs, forward
// and backward: matmul (either operand transposed), broadcasting element-wise ops (add, mul,
// GELU), layer norm, softmax, attention's head split and merge, embedding lookup,
// cross-entropy, mean and sum. Each mesh dimension is decided on its own (shards of one axis on
// several dimensions nest the same way in inputs and outputs).
#pragma once

#include <string>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"
#include "common/tensor.h"

namespace strata {

using Placements = std::vector<Placement>;  // one per mesh dimension

// What a rule decided: `inputs[i]` is the placement input i must have (Reshard to it when it
// differs), `outputs[j]` the placement output j then has when the op runs on the local pieces.
struct OpSharding {
  std::vector<Placements> inputs;
  std::vector<Placements> outputs;
  friend bool operator==(const OpSharding&, const OpSharding&) = default;
};
std::string ToString(const OpSharding& s);  // "[S(0)] x [R] -> [S(0)]"

// out = op(a) @ op(b): a is [M, K] ([K, M] when trans_a), b is [K, N] ([N, K] when trans_b),
// out [M, N]. Per dimension: S(M) x R -> S(0); R x S(N) -> S(1); S(K) x S(K) -> P(sum);
// P(sum) x R and R x P(sum) -> P(sum); R x R -> R. Anything else is resharded to the nearest of
// those, keeping a's shard first.
Result<OpSharding> MatmulRule(const Placements& a, const Placements& b, bool trans_a,
                              bool trans_b);
// The gradients of MatmulRule's op, as two matmuls with their own rules, each with inputs in
// the order of the matmul it runs:
//   [0] da: trans_a ? op(b) @ dout^T : dout @ op(b)^T  (inputs: trans_a ? {b, dout} : {dout, b})
//   [1] db: trans_b ? dout^T @ op(a) : op(a)^T @ dout  (inputs: trans_b ? {dout, a} : {a, dout})
// Pass the placements the forward rule gave a and b, and dout's (its output's, usually).
Result<std::vector<OpSharding>> MatmulBackwardRule(const Placements& a, const Placements& b,
                                                   const Placements& dout, bool trans_a,
                                                   bool trans_b);
// The flags of the two matmuls MatmulBackwardRule describes: {trans of first operand, trans of
// second operand} for da and for db.
struct MatmulGradFlags {
  bool da_trans_first = false, da_trans_second = false;
  bool db_trans_first = false, db_trans_second = false;
};
MatmulGradFlags MatmulGradTransposes(bool trans_a, bool trans_b);

// Element-wise ops with numpy broadcasting (shapes aligned on the right, extent 1 broadcasts).
//   kAdd: linear in every input (P(sum) + P(sum) -> P(sum); a replicated input beside a
//         P(sum) one is partialized, which moves nothing)
//   kMul: linear in each input alone (one P(sum) input times replicated ones -> P(sum))
//   kNonlinear: GELU and other unary ops (Partial inputs are reduced first)
// A shard on an axis the output has shards the output; every other input that has that axis
// is sharded the same way, and one that broadcasts along it is replicated.
enum class ElementwiseKind { kAdd, kMul, kNonlinear };
Result<OpSharding> ElementwiseRule(ElementwiseKind kind, const std::vector<Shape>& shapes,
                                   const std::vector<Placements>& inputs);
// The gradient of each input of an element-wise op, one OpSharding with inputs
// {inputs..., dout} and outputs the gradients. Along a dimension where dout is sharded, each
// input is sharded alike where it has the axis (its gradient too) and replicated where it
// broadcasts (its gradient, dout summed over that axis, is then P(sum)); along any other
// dimension dout and the inputs are replicated and so are the gradients.
Result<OpSharding> ElementwiseBackwardRule(ElementwiseKind kind, const std::vector<Shape>& shapes,
                                           const std::vector<Placements>& inputs,
                                           const Placements& dout);

// Normalisations over the last axis of x [N, D]: layer norm (inputs x, gamma [D], beta [D];
// output y) and softmax (input x; output y). Rows may stay sharded; the last axis and Partial
// values are gathered; gamma and beta are replicated.
Result<OpSharding> LayerNormRule(const Placements& x);
Result<OpSharding> SoftmaxRule(const Placements& x);
// Backward: inputs {x (layer norm) or y (softmax), dy}, outputs {dx} (+ {dgamma, dbeta}, P(sum)
// over dimensions that shard the rows, for layer norm).
Result<OpSharding> LayerNormBackwardRule(const Placements& x);
Result<OpSharding> SoftmaxBackwardRule(const Placements& y);

// Attention's head split of one projection, x [B*T, C] -> [B, H, T, C/H], and its merge back.
// A row shard becomes a batch shard, and a column shard a head shard, when the mesh dimensions
// sharding that axis divide B (or H) evenly; otherwise the axis is gathered. Partial stays
// Partial (both are permutations). `mesh` gives the dimensions' sizes.
Result<OpSharding> SplitHeadsRule(const ProcessMesh& mesh, const Placements& x, int64_t batch,
                                  int64_t heads);
Result<OpSharding> MergeHeadsRule(const ProcessMesh& mesh, const Placements& y, int64_t batch,
                                  int64_t heads);
// Backward of a split is a merge of dy and of a merge a split (same rules, same conditions).

// Embedding lookup: table [V, D], ids [N] -> rows [N, D]. ids S(0) -> rows S(0); table S(1) ->
// rows S(1); table S(0) (a vocabulary slice) -> rows P(sum), each rank gathering the ids in its
// slice and zeros for the others (ops::EmbeddingGatherRange); table P(sum) -> rows P(sum).
Result<OpSharding> EmbeddingRule(const Placements& table, const Placements& ids);
// Backward: inputs {table, ids, drows}; outputs {dtable}: P(sum) where ids are sharded, S(1) or
// S(0) (ops::EmbeddingScatterAddRange) where the table is.
Result<OpSharding> EmbeddingBackwardRule(const Placements& table, const Placements& ids);

// Cross-entropy, logits [N, V] and targets [N] -> the mean loss, a [1] tensor. Rows sharded
// (logits and targets alike) -> P(sum): each rank's mean over its rows times its share of the
// rows. A vocabulary shard needs all-reduces inside the op (the hand-written vocab-parallel
// cross-entropy), so this rule gathers it. Backward: dlogits has the logits' placement.
Result<OpSharding> CrossEntropyRule(const Placements& logits, const Placements& targets);

// The sum or mean of every element of x -> a [1] tensor. A shard gives P(sum) (the mean divides
// each rank's sum by the global count); P(sum) and P(avg) stay; P(max) and P(min) are reduced.
// Backward: inputs {dout} (replicated), outputs {dx}: x's placement with Partial made Replicate.
enum class ReductionKind { kSum, kMean };
Result<OpSharding> ReductionRule(ReductionKind kind, const Placements& x);
Result<OpSharding> ReductionBackwardRule(ReductionKind kind, const Placements& x);

}  // namespace strata
