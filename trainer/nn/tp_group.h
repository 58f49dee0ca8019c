// tp_group.h: TpGroup, the tensor-parallel group a layer is split over (a Communicator, or none
// when the layer is whole), and the collective layers call inside forward and backward.
#pragma once

#include <stdexcept>
#include <string>

#include "common/status.h"
#include "common/tensor.h"
#include "trainer/comm/communicator.h"

namespace strata::nn {

// Not owned: the trainer's ParallelGroups outlives the model. On CUDA the communicator runs on
// the layers' stream (stream-ordered with their kernels).
struct TpGroup {
  Communicator* comm = nullptr;
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  bool split() const { return size() > 1; }
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

}  // namespace strata::nn
