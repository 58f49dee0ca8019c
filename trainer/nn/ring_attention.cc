// ring_attention.cc: ring attention over a CpGroup (ring_attention.h). Rank r sends to r + 1 and
// receives from r - 1; at ring step s it holds the keys and values of rank r - s.
#include "trainer/nn/ring_attention.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "common/mesh.h"
#include "trainer/nn/tp_group.h"
#include "trainer/ops/ops.h"

namespace strata::nn {
namespace {

// Tags of the two streams around the ring (matched in issue order per peer and tag).
constexpr uint32_t kTagKv = 0x6b76;    // keys and values, forward and backward
constexpr uint32_t kTagGrad = 0x6476;  // a block's key/value gradients on their way home

void Check(Status s, const std::string& op, const std::string& what) {
  if (!s.ok()) throw CollectiveFailed(s.WithContext("context-parallel " + op + " in " + what));
}

using Request = std::unique_ptr<Communicator::Request>;

Request Post(Result<Request> r, const std::string& op, const std::string& what) {
  if (!r.ok()) throw CollectiveFailed(r.status().WithContext("context-parallel " + op + " in " + what));
  return std::move(r).value();
}

// [2, B, H, T', hd]: a and b back to back, one message around the ring.
Tensor Pack(const ops::Exec& ex, const Tensor& a, const Tensor& b) {
  Shape shape = a.shape();
  shape.insert(shape.begin(), 2);
  Tensor pair = ops::NewTensor(ex, shape);
  std::memcpy(pair.data(), a.data(), a.nbytes());
  std::memcpy(static_cast<char*>(pair.data()) + a.nbytes(), b.data(), b.nbytes());
  return pair;
}
Tensor Half(const Tensor& pair, int i) { return pair.Select(0, i); }

// The ring's neighbours of this rank.
struct Ring {
  int n, rank, next, prev;
  explicit Ring(const CpGroup& cp)
      : n(cp.size()), rank(cp.rank()), next((cp.rank() + 1) % cp.size()), prev((cp.rank() + cp.size() - 1) % cp.size()) {}
  int source(int step) const { return (rank - step + n) % n; }  // whose keys this rank holds at `step`
};

size_t Floats(const Tensor& t) { return static_cast<size_t>(t.numel()); }

}  // namespace

std::vector<int64_t> CpGroup::Positions(int64_t local, int rank) const {
  return CausalBalancedPositions(local * size(), size(), rank);
}

void RingAttentionForward(const CpGroup& cp, const ops::Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const std::string& what) {
  const Ring ring(cp);
  const int64_t local = q.size(2);
  const std::vector<int64_t> qpos = cp.Positions(local);
  ops::Fill(ex, out, 0.0f);
  ops::Fill(ex, lse, -INFINITY);
  Tensor cur = Pack(ex, k, v), next = ops::NewTensor(ex, cur.shape());
  for (int s = 0; s < ring.n; ++s) {
    Request recv, send;
    if (s + 1 < ring.n) {  // the next block travels while this one is computed
      recv = Post(cp.comm->IRecv(next.data_as<float>(), Floats(next), ring.prev, kTagKv), "receive", what);
      send = Post(cp.comm->ISend(cur.data_as<float>(), Floats(cur), ring.next, kTagKv), "send", what);
    }
    ops::BlockAttention(ex, q, Half(cur, 0), Half(cur, 1), qpos, cp.Positions(local, ring.source(s)), out, lse);
    if (recv) {
      Check(recv->Wait(), "receive of keys and values", what);
      Check(send->Wait(), "send of keys and values", what);
      std::swap(cur, next);
    }
  }
}

void RingAttentionBackward(const CpGroup& cp, const ops::Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dq,
                           const Tensor& dk, const Tensor& dv, const std::string& what) {
  const Ring ring(cp);
  const int64_t local = q.size(2);
  const std::vector<int64_t> qpos = cp.Positions(local);
  Tensor delta = ops::NewTensor(ex, lse.shape());
  ops::AttentionDelta(ex, out, dout, delta);
  ops::Fill(ex, dq, 0.0f);
  Tensor cur = Pack(ex, k, v), next = ops::NewTensor(ex, cur.shape());
  // The gradients of the block held at step s: this rank's part, plus what the ranks before
  // it on the ring added (received from prev), then sent on to next.
  Tensor sending;  // kept alive until its send is waited for
  Request send_grad;
  for (int s = 0; s < ring.n; ++s) {
    Request recv, send, recv_grad;
    Tensor arriving;
    if (s + 1 < ring.n) {
      recv = Post(cp.comm->IRecv(next.data_as<float>(), Floats(next), ring.prev, kTagKv), "receive", what);
      send = Post(cp.comm->ISend(cur.data_as<float>(), Floats(cur), ring.next, kTagKv), "send", what);
    }
    if (s > 0) {
      arriving = ops::NewTensor(ex, cur.shape());
      recv_grad = Post(cp.comm->IRecv(arriving.data_as<float>(), Floats(arriving), ring.prev, kTagGrad), "receive", what);
    }
    Tensor grad = ops::NewZeros(ex, cur.shape());
    ops::BlockAttentionBackward(ex, q, Half(cur, 0), Half(cur, 1), qpos, cp.Positions(local, ring.source(s)), lse,
                                dout, delta, dq, Half(grad, 0), Half(grad, 1));
    if (recv_grad) {
      Check(recv_grad->Wait(), "receive of key/value gradients", what);
      ops::Axpy(ex, 1.0f, arriving, grad);
    }
    if (ring.n == 1) {
      std::memcpy(dk.data(), Half(grad, 0).data(), dk.nbytes());
      std::memcpy(dv.data(), Half(grad, 1).data(), dv.nbytes());
      return;
    }
    if (send_grad) Check(send_grad->Wait(), "send of key/value gradients", what);
    sending = grad;
    send_grad = Post(cp.comm->ISend(sending.data_as<float>(), Floats(sending), ring.next, kTagGrad), "send", what);
    if (recv) {
      Check(recv->Wait(), "receive of keys and values", what);
      Check(send->Wait(), "send of keys and values", what);
      std::swap(cur, next);
    }
  }
  // After a full turn this rank's own block comes home from prev with every rank's part.
  Tensor home = ops::NewTensor(ex, cur.shape());
  Request recv_home = Post(cp.comm->IRecv(home.data_as<float>(), Floats(home), ring.prev, kTagGrad), "receive", what);
  Check(recv_home->Wait(), "receive of key/value gradients", what);
  Check(send_grad->Wait(), "send of key/value gradients", what);
  std::memcpy(dk.data(), Half(home, 0).data(), dk.nbytes());
  std::memcpy(dv.data(), Half(home, 1).data(), dv.nbytes());
}

}  // namespace strata::nn
