// communicator.cc: Communicator's public operations, which count each call in stats() and run
// the backend's implementation.
#include "trainer/comm/communicator.h"

namespace strata {
namespace {

constexpr uint64_t kFloat = sizeof(float);

}  // namespace

Status Communicator::Count(Status s, CommOp op, uint64_t bytes) {
  if (s.ok()) stats_.Record(op, bytes);
  return s;
}

Status Communicator::AllReduce(float* data, size_t count, ReduceOp op) {
  return Count(DoAllReduce(data, count, op), CommOp::kAllReduce, count * kFloat);
}

Status Communicator::ReduceScatter(const float* in, float* out, size_t count_per_rank,
                                   ReduceOp op) {
  return Count(DoReduceScatter(in, out, count_per_rank, op), CommOp::kReduceScatter,
               static_cast<uint64_t>(size()) * count_per_rank * kFloat);
}

Status Communicator::AllGather(const float* in, float* out, size_t count) {
  return Count(DoAllGather(in, out, count), CommOp::kAllGather,
               static_cast<uint64_t>(size()) * count * kFloat);
}

Status Communicator::AllToAll(const float* in, float* out, size_t count_per_rank) {
  return Count(DoAllToAll(in, out, count_per_rank), CommOp::kAllToAll,
               static_cast<uint64_t>(size()) * count_per_rank * kFloat);
}

Status Communicator::Broadcast(float* data, size_t count, int root) {
  return Count(DoBroadcast(data, count, root), CommOp::kBroadcast, count * kFloat);
}

Status Communicator::Barrier() { return Count(DoBarrier(), CommOp::kBarrier, 0); }

namespace {
Status CheckTag(const char* what, uint32_t tag) {
  if (tag < Communicator::kReservedTags) return Status::OK();
  return Status::InvalidArgument(std::string(what) + ": tag " + std::to_string(tag) + " is reserved (tags from " +
                                 std::to_string(Communicator::kReservedTags) + " on are the communicator's own)");
}
}  // namespace

Status Communicator::Send(const float* data, size_t count, int peer, uint32_t tag) {
  STRATA_RETURN_IF_ERROR(CheckTag("send", tag));
  return Count(DoSend(data, count, peer, tag), CommOp::kSend, count * kFloat);
}

Status Communicator::Recv(float* data, size_t count, int peer, uint32_t tag) {
  STRATA_RETURN_IF_ERROR(CheckTag("recv", tag));
  return Count(DoRecv(data, count, peer, tag), CommOp::kRecv, count * kFloat);
}

Result<std::unique_ptr<Communicator::Request>> Communicator::ISend(const float* data, size_t count,
                                                                   int peer, uint32_t tag) {
  STRATA_RETURN_IF_ERROR(CheckTag("send", tag));
  Result<std::unique_ptr<Request>> r = DoISend(data, count, peer, tag);
  if (r.ok()) stats_.Record(CommOp::kSend, count * kFloat);
  return r;
}

Result<std::unique_ptr<Communicator::Request>> Communicator::IRecv(float* data, size_t count,
                                                                   int peer, uint32_t tag) {
  STRATA_RETURN_IF_ERROR(CheckTag("recv", tag));
  Result<std::unique_ptr<Request>> r = DoIRecv(data, count, peer, tag);
  if (r.ok()) stats_.Record(CommOp::kRecv, count * kFloat);
  return r;
}

Status Communicator::AllReduceHost(float* host, size_t count, ReduceOp op) {
  return Count(DoAllReduceHost(host, count, op), CommOp::kHostAllReduce, count * kFloat);
}

Status Communicator::BroadcastHost(float* host, size_t count, int root) {
  return Count(DoBroadcastHost(host, count, root), CommOp::kHostBroadcast, count * kFloat);
}

Status Communicator::AllReduceHost(double* host, size_t count, ReduceOp op) {
  return Count(DoAllReduceHost(host, count, op), CommOp::kHostAllReduce, count * sizeof(double));
}

}  // namespace strata
