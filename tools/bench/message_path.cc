// message_path.cc: MeasureMessagePath.
#include "tools/bench/message_path.h"

#include <memory>
#include <string>
#include <utility>

#include "common/frame_batch.h"
#include "common/rpc.h"
#include "common/transport.h"
#include "common/zmq_transport.h"
#include "tools/bench/bench_util.h"

namespace strata::bench {
namespace {

// A Transport that keeps what is sent in frame batches, as ZmqTransport::Enqueue does on the
// sender's thread, and hands a batch's messages to its receiver when told, as ZmqTransport's I/O
// thread does with a batch it received (ZmqTransport::DeliverBatch). Nothing leaves the process.
class LoopTransport final : public Transport {
 public:
  void SetReceiver(Receiver receiver) override { receiver_ = std::move(receiver); }
  Result<std::string> Bind(const std::string&) override { return std::string("loop"); }
  Result<PeerId> Connect(const std::string&) override { return PeerId{0}; }
  Status Send(PeerId, Frames frames) override {
    if (!batch_ || batch_->messages() == ZmqTransport::kMaxBatchMessages ||
        batch_->bytes() + BatchWriter::BytesOf(frames) > ZmqTransport::kMaxBatchBytes) {
      Close();
      batch_ = std::make_unique<BatchWriter>();
    }
    batch_->Append(frames);
    return Status::OK();
  }
  Status Reply(const Source&, Frames) override { return Status::OK(); }
  void Shutdown() override {}

  // Finishes the open batch: the batches are ready to deliver.
  void Close() {
    if (batch_) batches_.push_back(batch_->Finish());
    batch_.reset();
  }
  // Hands every batch's messages to the receiver, in order, from a route as a ROUTER gives one.
  Status DeliverAll() {
    Source source;
    source.route = std::string("\0\x80\0\0\x01", 5);  // a ZeroMQ routing id
    for (const Buffer& batch : batches_) {
      STRATA_ASSIGN_OR_RETURN(BatchReader reader,
                              BatchReader::Open(batch, ZmqTransport::kMaxBatchMessages));
      Frames frames;
      while (reader.Next(&frames)) receiver_(source, std::move(frames));
    }
    batches_.clear();
    return Status::OK();
  }

 private:
  Receiver receiver_;
  std::unique_ptr<BatchWriter> batch_;
  std::vector<Buffer> batches_;
};

}  // namespace

Result<MessagePathFigures> MeasureMessagePath(const Buffer& payload, int reps, int messages) {
  if (payload.size() >= ZmqTransport::kZeroCopyMinBytes) {
    return Status::InvalidArgument("a payload of " + std::to_string(payload.size()) +
                                   " bytes is not batched");
  }
  auto owned = std::make_unique<LoopTransport>();
  LoopTransport* loop = owned.get();
  RpcEndpoint rpc(std::move(owned));
  uint64_t received = 0;  // as the echo server counts one-way messages
  rpc.SetHandler([&received](Request r) {
    if (r.one_way() && r.message().op() == Op::ECHO) ++received;
  });
  STRATA_ASSIGN_OR_RETURN(PeerId peer, rpc.Connect("loop"));
  MessagePathFigures f;
  for (int rep = -1; rep < reps; ++rep) {  // rep -1 warms the allocator
    Stopwatch send;
    for (int i = 0; i < messages; ++i) {
      Message m(Op::ECHO);
      m.AddBytes(payload);
      STRATA_RETURN_IF_ERROR(rpc.Notify(peer, std::move(m)));
    }
    loop->Close();
    const double send_ns = send.Micros() * 1e3 / messages;
    received = 0;
    Stopwatch receive;
    STRATA_RETURN_IF_ERROR(loop->DeliverAll());
    const double receive_ns = receive.Micros() * 1e3 / messages;
    if (received != static_cast<uint64_t>(messages)) {
      return Status::Internal("the handler saw " + std::to_string(received) + " of " +
                              std::to_string(messages) + " messages");
    }
    if (rep < 0) continue;
    f.send_ns.push_back(send_ns);
    f.receive_ns.push_back(receive_ns);
  }
  rpc.Shutdown();
  return f;
}

}  // namespace strata::bench
