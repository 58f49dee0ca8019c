// tensor_parallel.cc: VocabParallelEmbedding (the linear layers' splits live in Linear).
#include "trainer/nn/tensor_parallel.h"

#include "trainer/ops/ops.h"

namespace strata::nn {

VocabParallelEmbedding::VocabParallelEmbedding(ParameterRegistry& reg, const std::string& name,
                                               int64_t vocab, int64_t dim, TpGroup tp,
                                               float init_std)
    : Layer(name), dim_(dim), first_(vocab / tp.size() * tp.rank()), tp_(tp) {
  STRATA_CHECK(vocab % tp.size() == 0) << name << ": vocabulary " << vocab << " over "
                                       << tp.size() << " tensor-parallel ranks";
  // Keyed by rows, as Embedding's sparse table is: the same values split or whole.
  InitSpec init = InitSpec::Normal(init_std);
  init.row_dim = static_cast<uint32_t>(dim);
  table_ = &reg.CreateShard(name + ".weight", {{vocab, dim}, 0, 1, tp.rank(), tp.size()}, init, false);
  Owns(table_);
}

Tensor VocabParallelEmbedding::DoForward(const Tensor& ids, Context& ctx) {
  Result<Tensor> flat = ids.Reshape({-1});
  STRATA_CHECK(flat.ok()) << flat.status().ToString();
  Tensor rows = ops::NewTensor(ctx.exec(), {flat->numel(), dim_});
  ops::EmbeddingGatherRange(ctx.exec(), table_->value, *flat, first_, rows);
  ctx.Save(this, "ids", *flat);
  Shape out = ids.shape();
  out.push_back(dim_);
  Result<Tensor> y = rows.Reshape(out);
  STRATA_CHECK(y.ok()) << y.status().ToString();
  if (tp_.sequence_split()) return ReduceScatterSequence(tp_, ctx.exec(), *y, name());
  TpAllReduce(tp_, rows, ReduceOp::kSum, name());
  return *y;
}

Tensor VocabParallelEmbedding::DoBackward(const Tensor& dy, Context& ctx) {
  DoBackwardInput(dy, ctx);
  DoBackwardWeight(ctx);
  return Tensor();
}

Tensor VocabParallelEmbedding::DoBackwardInput(const Tensor& dy, Context& ctx) {
  // Sequence-parallel: the output was this rank's slice of the sequence; every lookup needs all.
  Tensor whole = tp_.sequence_split() ? GatherSequence(tp_, ctx.exec(), dy, name()) : dy;
  Result<Tensor> rows = whole.Reshape({-1, dim_});
  STRATA_CHECK(rows.ok()) << rows.status().ToString();
  ctx.Save(this, "dy", *rows);
  return Tensor();
}

void VocabParallelEmbedding::DoBackwardWeight(Context& ctx) {
  ops::EmbeddingScatterAddRange(ctx.exec(), ctx.Get(this, "dy"), ctx.Get(this, "ids"), first_,
                                table_->grad);
}

}  // namespace strata::nn
