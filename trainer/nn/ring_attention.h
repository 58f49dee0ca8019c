// ring_attention.h: CpGroup, the context-parallel group a sequence is split over, and ring
// attention: each rank holds queries, keys and values for its part of every sequence (the
// balanced causal split of common/mesh.h: chunks i and 2cp-1-i), and attention over the whole
// sequence passes the key/value blocks around the ring, folding each into the result with the
// online softmax while the next block is in flight. Backward passes the blocks around again,
// and with them each block's key/value gradients, which arrive home after a full turn.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "trainer/comm/communicator.h"
#include "trainer/ops/exec.h"

namespace strata::nn {

// Not owned: the trainer's ParallelGroups outlives the model. A null communicator is a group of
// one (the whole sequence on this rank).
struct CpGroup {
  Communicator* comm = nullptr;
  int size() const { return comm ? comm->size() : 1; }
  int rank() const { return comm ? comm->rank() : 0; }
  bool split() const { return size() > 1; }
  // The global positions of `rank`'s `local` tokens (local * size() in a sequence).
  std::vector<int64_t> Positions(int64_t local, int rank) const;
  std::vector<int64_t> Positions(int64_t local) const { return Positions(local, this->rank()); }
};

// q, k, v [B, H, T', hd]: this rank's part (T' = T / cp) of every sequence's heads. out
// [B, H, T', hd] and lse [B, H, T'] get causal attention over the whole sequence. A failed
// transfer throws CollectiveFailed (tp_group.h) naming `what`.
void RingAttentionForward(const CpGroup& cp, const ops::Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const std::string& what);
// From forward's (q, k, v, out, lse) and dout: dq, dk, dv [B, H, T', hd] for this rank's part.
void RingAttentionBackward(const CpGroup& cp, const ops::Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dq,
                           const Tensor& dk, const Tensor& dv, const std::string& what);

}  // namespace strata::nn
