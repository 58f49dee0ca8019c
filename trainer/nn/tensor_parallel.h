// tensor_parallel.h: Megatron's tensor-parallel layers, a layer's weights split over the ranks
// of a TpGroup so that each computes a slice:
//   ColumnParallelLinear   x whole -> y a slice of the columns   (all-reduce of dx in backward)
//   RowParallelLinear      x a slice of the features -> y whole  (all-reduce of y in forward)
//   VocabParallelEmbedding each rank holds rows [r V/tp, (r+1) V/tp) of the table; ids outside
//                          give zeros, and the all-reduce of the rows completes every lookup
// A column layer feeding a row layer (an MLP; attention split by heads) costs one all-reduce in
// forward and one in backward. The vocab-parallel cross-entropy is LossHead with a TpGroup
// (loss.h): the full logits never exist on one rank.
//
// Every shard starts as exactly its slice of the unsplit layer (ParameterRegistry::CreateShard),
// so a model split any way starts from, and computes, what the whole model does.
#pragma once

#include <string>

#include "trainer/nn/layers.h"

namespace strata::nn {

class ColumnParallelLinear : public Linear {
 public:
  ColumnParallelLinear(ParameterRegistry& reg, const std::string& name, int64_t in, int64_t out,
                       TpGroup tp, bool bias = true, float init_std = -1.0f, int blocks = 1)
      : Linear(reg, name, in, out, bias, init_std, LinearSplit::kColumn, tp, blocks) {}
};

class RowParallelLinear : public Linear {
 public:
  RowParallelLinear(ParameterRegistry& reg, const std::string& name, int64_t in, int64_t out,
                    TpGroup tp, bool bias = true, float init_std = -1.0f)
      : Linear(reg, name, in, out, bias, init_std, LinearSplit::kRow, tp) {}
};

// ids (i32 or i64, any shape [...]) -> rows [..., dim]; "<name>.weight" [vocab, dim] split by
// rows. A dense parameter (its gradient is all-reduced or pushed whole, as any weight's). With
// sequence parallelism, ids [N, T] -> this rank's slice of the sequence [N, T/tp, dim] (the
// rows reduce-scattered rather than all-reduced).
class VocabParallelEmbedding : public Layer {
 public:
  VocabParallelEmbedding(ParameterRegistry& reg, const std::string& name, int64_t vocab,
                         int64_t dim, TpGroup tp, float init_std = 0.02f);
  Parameter& table() { return *table_; }

 protected:
  Tensor DoForward(const Tensor& ids, Context& ctx) override;
  Tensor DoBackward(const Tensor& dy, Context& ctx) override;
  Tensor DoBackwardInput(const Tensor& dy, Context& ctx) override;
  void DoBackwardWeight(Context& ctx) override;

 private:
  int64_t dim_, first_;  // first_: the unsplit table's row this rank's row 0 is
  TpGroup tp_;
  Parameter* table_;
};

}  // namespace strata::nn
