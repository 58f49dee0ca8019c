// gloo_communicator.cc: GlooCommunicator and the kv-store rendezvous adapter. Gloo reports
// failures by throwing; they become Statuses here, at the boundary.
#include "trainer/comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <stdexcept>

namespace strata {
namespace {

// Gloo's rendezvous Store over the scheduler's key-value store (kvGet waits for a key).
class KvRendezvousStore final : public gloo::rendezvous::Store {
 public:
  KvRendezvousStore(Node& node, std::string prefix, Millis timeout)
      : node_(node), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    Status s = node_.KvSet(prefix_ + key, std::string_view(data.data(), data.size()));
    if (!s.ok()) throw std::runtime_error("gloo rendezvous set " + key + ": " + s.ToString());
  }
  std::vector<char> get(const std::string& key) override {
    auto v = node_.KvGet(prefix_ + key, timeout_);
    if (!v.ok()) throw std::runtime_error("gloo rendezvous get " + key + ": " + v.status().ToString());
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& key : keys) {
      auto v = node_.KvGet(prefix_ + key, std::chrono::duration_cast<Millis>(timeout));
      if (!v.ok()) throw std::runtime_error("gloo rendezvous wait " + key + ": " + v.status().ToString());
    }
  }

 private:
  Node& node_;
  const std::string prefix_;
  const Millis timeout_;
};

template <typename Fn>
Status Guard(const char* what, Fn&& fn) {
  try {
    fn();
    return Status::OK();
  } catch (const gloo::IoException& e) {
    return Status::Unavailable(std::string(what) + ": " + e.what());
  } catch (const std::exception& e) {
    return Status::Internal(std::string(what) + ": " + e.what());
  }
}

class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  Status AllReduce(float* data, size_t count, ReduceOp op) override {
    return Guard("all-reduce", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setTag(next_tag_++);
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>)); break;
        case ReduceOp::kMax: opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::max<float>)); break;
        case ReduceOp::kMin: opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::min<float>)); break;
      }
      gloo::allreduce(opts);
      if (op == ReduceOp::kAvg) {
        const float inv = 1.0f / static_cast<float>(size());
        for (size_t i = 0; i < count; ++i) data[i] *= inv;
      }
    });
  }

  Status AllGather(const float* in, float* out, size_t count) override {
    return Guard("all-gather", [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(const_cast<float*>(in), count);
      opts.setOutput(out, count * size());
      opts.setTag(next_tag_++);
      gloo::allgather(opts);
    });
  }

  Status Broadcast(float* data, size_t count, int root) override {
    if (root < 0 || root >= size()) return Status::InvalidArgument("broadcast root out of range");
    return Guard("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data, count);
      opts.setRoot(root);
      opts.setTag(next_tag_++);
      gloo::broadcast(opts);
    });
  }

  Status Barrier() override {
    return Guard("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag_++);
      gloo::barrier(opts);
    });
  }

 private:
  std::shared_ptr<gloo::Context> context_;
  uint32_t next_tag_ = 1;
};

}  // namespace

Result<std::unique_ptr<Communicator>> MakeGlooCommunicator(Node& node, const std::string& name,
                                                           int rank, int size,
                                                           const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return Status::InvalidArgument("gloo communicator \"" + name + "\": rank " + std::to_string(rank) +
                                   " of size " + std::to_string(size));
  }
  std::shared_ptr<gloo::rendezvous::Context> context;
  Status s = Guard("gloo rendezvous", [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(options.timeout);
    KvRendezvousStore store(node, "gloo/" + name + "/", options.timeout);
    context->connectFullMesh(store, device);
  });
  if (!s.ok()) return s.WithContext("communicator \"" + name + "\"");
  return std::unique_ptr<Communicator>(std::make_unique<GlooCommunicator>(context));
}

}  // namespace strata
