// tp_group.h: TpGroup, the tensor-parallel group a layer is split over (a Communicator, or none
// when the layer is whole), and the collective layers call inside forward and backward.
#pragma once

#include <stdexcept>
#include <string>

#include "common/status.h"
#include "common/tensor.h"
#include "trainer/comm/communicator.h"
#include "trainer/ops/exec.h"

namespace strata::nn {

// Not owned: the trainer's ParallelGroups outlives the model. On CUDA the communicator runs on
// the layers' stream (stream-ordered with their kernels).
//
// With `sequence` (Megatron's sequence parallelism), what flows between the split layers is a
// slice of the sequence, [N, T/tp, C] (rank r holds positions [r T/tp, (r+1) T/tp)): norms,
// dropout and residual adds run on 1/tp of the tokens, and each all-reduce becomes an
// all-gather before a column-split layer and a reduce-scatter after a row-split one (the same
// bytes on the wire, 1/tp of the activations kept).
struct TpGroup {
  Communicator* comm = nullptr;
  bool sequence = false;
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  bool split() const { return size() > 1; }
  bool sequence_split() const { return sequence && split(); }
};

// Layers return tensors, not Statuses, so a failed tensor-parallel collective (a dead peer, a
// timeout) is thrown; the trainer catches it where it runs the model and returns status().
class CollectiveFailed : public std::runtime_error {
 public:
  explicit CollectiveFailed(Status s) : std::runtime_error(s.ToString()), status_(std::move(s)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// In place over the group (a contiguous f32 tensor); `what` names the layer in the error.
void TpAllReduce(const TpGroup& tp, const Tensor& t, ReduceOp op, const std::string& what);
// Sequence parallelism: every rank's [N, S, ...] -> the whole sequence [N, tp * S, ...], and the
// conjugate: [N, T, ...] summed over the ranks, each keeping its slice [N, T / tp, ...].
Tensor GatherSequence(const TpGroup& tp, const ops::Exec& ex, const Tensor& x, const std::string& what);
Tensor ReduceScatterSequence(const TpGroup& tp, const ops::Exec& ex, const Tensor& x,
                             const std::string& what);

}  // namespace strata::nn
