// tp_group.cc: the collectives of tensor-parallel layers (tp_group.h).
#include "trainer/nn/tp_group.h"

#include "trainer/ops/ops.h"

namespace strata::nn {
namespace {

void Check(Status s, const std::string& op, const std::string& what) {
  if (!s.ok()) throw CollectiveFailed(s.WithContext("tensor-parallel " + op + " in " + what));
}

}  // namespace

void TpAllReduce(const TpGroup& tp, const Tensor& t, ReduceOp op, const std::string& what) {
  if (!tp.split()) return;
  STRATA_CHECK(t.is_contiguous()) << what << ": all-reduce of a strided tensor";
  Check(tp.comm->AllReduce(t.data_as<float>(), static_cast<size_t>(t.numel()), op), "all-reduce", what);
}

Tensor GatherSequence(const TpGroup& tp, const ops::Exec& ex, const Tensor& x, const std::string& what) {
  STRATA_CHECK(x.dim() >= 2 && x.is_contiguous()) << what << ": gathers [N, S, ...], got " << ShapeToString(x.shape());
  const int64_t ranks = tp.size(), n = x.size(0);
  Tensor blocks = ops::NewTensor(ex, {ranks * x.numel()});  // [ranks, N, S, ...]
  Check(tp.comm->AllGather(x.data_as<float>(), blocks.data_as<float>(), static_cast<size_t>(x.numel())),
        "all-gather", what);
  Shape whole = x.shape();
  whole[1] *= ranks;
  Tensor out = ops::NewTensor(ex, whole);
  ops::TransposeLeading(ex, blocks, ranks, n, out);  // -> [N, ranks, S, ...]
  return out;
}

Tensor ReduceScatterSequence(const TpGroup& tp, const ops::Exec& ex, const Tensor& x,
                             const std::string& what) {
  const int64_t ranks = tp.size();
  STRATA_CHECK(x.dim() >= 2 && x.is_contiguous() && x.size(1) % ranks == 0)
      << what << ": reduce-scatters [N, T, ...] with T divisible by " << ranks << ", got " << ShapeToString(x.shape());
  const int64_t n = x.size(0);
  Tensor blocks = ops::NewTensor(ex, {x.numel()});
  ops::TransposeLeading(ex, x, n, ranks, blocks);  // [N, ranks, S, ...] -> [ranks, N, S, ...]
  Shape slice = x.shape();
  slice[1] /= ranks;
  Tensor out = ops::NewTensor(ex, slice);
  Check(tp.comm->ReduceScatter(blocks.data_as<float>(), out.data_as<float>(),
                               static_cast<size_t>(out.numel()), ReduceOp::kSum),
        "reduce-scatter", what);
  return out;
}

}  // namespace strata::nn
