// gloo_communicator.cc: GlooCommunicator (Gloo's own all-reduce, all-gather, all-to-all,
// broadcast and barrier; a ring reduce-scatter and send/recv over Gloo's unbound buffers) and
// the kv-store rendezvous adapter. Gloo reports failures by throwing; they become Statuses here, at the
// boundary.
#include "trainer/comm/gloo_communicator.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/serial_queue.h"
#include "trainer/comm/shm_p2p.h"

namespace strata {
namespace {

// Slot prefixes of the operations Gloo has no algorithm for; Gloo's own use 0x01..0x08.
constexpr uint8_t kReduceScatterSlotPrefix = 0x40;
constexpr uint8_t kPointToPointSlotPrefix = 0x41;

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

// Runs `fn`, turning Gloo's exceptions into Statuses: its I/O errors say "Timed out ..." when a
// wait expired and name the socket error otherwise (a peer that closed or died).
template <typename Fn>
Status Guard(const std::string& what, Fn&& fn) {
  try {
    fn();
    return Status::OK();
  } catch (const gloo::IoException& e) {
    const std::string m = e.what();
    const bool timeout =
        m.find("Timed out") != std::string::npos || m.find("timeout") != std::string::npos;
    return timeout ? Status::DeadlineExceeded(what + ": " + m)
                   : Status::Unavailable(what + ": " + m);
  } catch (const std::exception& e) {
    return Status::Internal(what + ": " + e.what());
  }
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// kAvg reduces with the sum; the caller divides.
ReduceFn ReduceFunction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return &gloo::max<float>;
    case ReduceOp::kMin:
      return &gloo::min<float>;
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      break;
  }
  return &gloo::sum<float>;
}

void Scale(float* data, size_t count, float factor) {
  for (size_t i = 0; i < count; ++i) data[i] *= factor;
}

// Safe for one thread at a time (Communicator's contract); ISend's posts run on its own thread.
class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, std::string name)
      : Communicator(std::move(name)), context_(std::move(context)) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

  // From now on every send and receive goes through `shm` (every rank of the group switches
  // together: see MakeGlooCommunicator).
  void UseSharedMemory(std::unique_ptr<ShmP2P> shm) { shm_ = std::move(shm); }

 protected:

  Status DoAllReduce(float* data, size_t count, ReduceOp op) override {
    if (SmallOverShm(count * sizeof(float))) {
      STRATA_RETURN_IF_ERROR(ShmAllReduce(data, count, op));
      if (op == ReduceOp::kAvg) Scale(data, count, 1.0f / static_cast<float>(size()));
      return Status::OK();
    }
    return Run("all-reduce", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setTag(next_tag_++);
      opts.setReduceFunction(ReduceFunction(op));
      gloo::allreduce(opts);
      if (op == ReduceOp::kAvg) Scale(data, count, 1.0f / static_cast<float>(size()));
    });
  }

  Status DoReduceScatter(const float* in, float* out, size_t count_per_rank, ReduceOp op) override {
    return Run("reduce-scatter", [&] {
      RingReduceScatter(in, out, count_per_rank, ReduceFunction(op), next_tag_++);
      if (op == ReduceOp::kAvg) Scale(out, count_per_rank, 1.0f / static_cast<float>(size()));
    });
  }

  Status DoAllGather(const float* in, float* out, size_t count) override {
    return Run("all-gather", [&] {
      gloo::AllgatherOptions opts(context_);
      // In place (`in` is this rank's block of `out`): gloo wants its input apart.
      std::vector<float> own;
      if (in == out + static_cast<size_t>(rank()) * count) {
        own.assign(in, in + count);
        in = own.data();
      }
      opts.setInput(const_cast<float*>(in), count);
      opts.setOutput(out, count * size());
      opts.setTag(next_tag_++);
      gloo::allgather(opts);
    });
  }

  Status DoAllToAll(const float* in, float* out, size_t count_per_rank) override {
    if (count_per_rank == 0) return Status::OK();
    return Run("all-to-all", [&] {
      gloo::AlltoallOptions opts(context_);
      opts.setInput(const_cast<float*>(in), count_per_rank * size());
      opts.setOutput(out, count_per_rank * size());
      opts.setTag(next_tag_++);
      gloo::alltoall(opts);
    });
  }

  Status DoBroadcast(float* data, size_t count, int root) override {
    if (root < 0 || root >= size()) {
      return Status::InvalidArgument("broadcast root " + std::to_string(root) +
                                     " out of range [0, " + std::to_string(size()) + ")");
    }
    return Run("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data, count);
      opts.setRoot(root);
      opts.setTag(next_tag_++);
      gloo::broadcast(opts);
    });
  }

  Status DoBarrier() override {
    return Run("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag_++);
      gloo::barrier(opts);
    });
  }

  Status DoSend(const float* data, size_t count, int peer, uint32_t tag) override {
    STRATA_RETURN_IF_ERROR(CheckPeer("send to", peer));
    if (shm_) {
      STRATA_ASSIGN_OR_RETURN(auto request, Post(true, const_cast<float*>(data), count, peer, tag));
      return request->Wait();
    }
    if (count == 0) return Status::OK();
    return Run("send to rank " + std::to_string(peer), [&] {
      auto buf = context_->createUnboundBuffer(const_cast<float*>(data), count * sizeof(float));
      buf->send(peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
      buf->waitSend();
    });
  }

  Result<std::unique_ptr<Request>> DoISend(const float* data, size_t count, int peer,
                                         uint32_t tag) override {
    return Post(true, const_cast<float*>(data), count, peer, tag);
  }

  Result<std::unique_ptr<Request>> DoIRecv(float* data, size_t count, int peer, uint32_t tag) override {
    return Post(false, data, count, peer, tag);
  }

  Status DoAllReduceHost(double* host, size_t count, ReduceOp op) override {
    if (SmallOverShm(count * sizeof(double))) {
      STRATA_RETURN_IF_ERROR(ShmAllReduce(host, count, op));
      if (op == ReduceOp::kAvg) {
        for (size_t i = 0; i < count; ++i) host[i] /= size();
      }
      return Status::OK();
    }
    return Run("all-reduce of host doubles", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(host, count);
      opts.setTag(next_tag_++);
      switch (op) {
        case ReduceOp::kMax: opts.setReduceFunction(ReduceFn(&gloo::max<double>)); break;
        case ReduceOp::kMin: opts.setReduceFunction(ReduceFn(&gloo::min<double>)); break;
        default: opts.setReduceFunction(ReduceFn(&gloo::sum<double>)); break;
      }
      gloo::allreduce(opts);
      if (op == ReduceOp::kAvg) {
        for (size_t i = 0; i < count; ++i) host[i] /= size();
      }
    });
  }

  Status DoRecv(float* data, size_t count, int peer, uint32_t tag) override {
    STRATA_RETURN_IF_ERROR(CheckPeer("recv from", peer));
    if (shm_) {
      STRATA_ASSIGN_OR_RETURN(auto request, Post(false, data, count, peer, tag));
      return request->Wait();
    }
    if (count == 0) return Status::OK();
    return Run("recv from rank " + std::to_string(peer), [&] {
      auto buf = context_->createUnboundBuffer(data, count * sizeof(float));
      buf->recv(peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
      buf->waitRecv();
    });
  }

 private:
  // A send handed to sender_: Gloo's buffer once that thread has posted it, or why it could not.
  struct SendPost {
    std::mutex mu;
    std::condition_variable posted;
    bool done = false;                                // under mu
    Status status;                                    // under mu
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;  // under mu
  };

  // A posted unbound-buffer transfer; waiting goes through the communicator, so a failure
  // breaks it like any other.
  class GlooRequest final : public Request {
   public:
    GlooRequest(GlooCommunicator& comm, std::unique_ptr<gloo::transport::UnboundBuffer> buf,
                std::shared_ptr<SendPost> post, bool send, std::string what)
        : comm_(comm), buf_(std::move(buf)), post_(std::move(post)), send_(send), what_(std::move(what)) {}
    ~GlooRequest() override {
      if (buf_ || post_) (void)Wait();
    }
    Status Wait() override {
      if (post_) {
        std::shared_ptr<SendPost> post = std::move(post_);
        std::unique_lock lock(post->mu);
        post->posted.wait(lock, [&] { return post->done; });
        if (!post->status.ok()) return comm_.Break(post->status);
        buf_ = std::move(post->buf);
      }
      if (!buf_) return Status::OK();
      Status s = comm_.Run(what_, [&] {
        if (send_) {
          buf_->waitSend(comm_.context_->getTimeout());
        } else {
          buf_->waitRecv(comm_.context_->getTimeout());
        }
      });
      buf_.reset();
      return s;
    }

   private:
    GlooCommunicator& comm_;
    std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
    std::shared_ptr<SendPost> post_;  // a send not yet known to be posted
    const bool send_;
    const std::string what_;
  };

  // A transfer through shared memory (UseSharedMemory).
  class ShmRequest final : public Request {
   public:
    ShmRequest(GlooCommunicator& comm, std::shared_ptr<ShmP2P::Op> op, std::string what)
        : comm_(comm), op_(std::move(op)), what_(std::move(what)) {}
    ~ShmRequest() override {
      if (op_) (void)Wait();
    }
    Status Wait() override {
      if (!op_) return Status::OK();
      std::shared_ptr<ShmP2P::Op> op = std::move(op_);
      Status s = comm_.shm_->Wait(*op);
      return s.ok() ? s : comm_.Break(s.WithContext(what_));
    }

   private:
    GlooCommunicator& comm_;
    std::shared_ptr<ShmP2P::Op> op_;
    const std::string what_;
  };

  // A receive is posted here; a send goes to sender_, because Gloo writes a send to the socket
  // in the posting thread when the peer's receive is already known: the compute thread would
  // spend the copy through the kernel (about 0.5 ms for 256 KiB on loopback) between two
  // actions of a pipeline instead of computing while the sender thread moves the bytes.
  Result<std::unique_ptr<Request>> Post(bool send, float* data, size_t count, int peer, uint32_t tag) {
    const std::string what = (send ? "send to rank " : "recv from rank ") + std::to_string(peer);
    STRATA_RETURN_IF_ERROR(CheckPeer(send ? "send to" : "recv from", peer));
    if (!broken_.ok()) {
      return Status::FailedPrecondition(what + ": communicator broken by an earlier error (" + broken_.ToString() +
                                        ")");
    }
    // An empty transfer still gets a buffer of one float, so that it is matched in order.
    float* ptr = count ? data : &empty_;
    const size_t bytes = count * sizeof(float);
    if (shm_) {
      return std::unique_ptr<Request>(
          std::make_unique<ShmRequest>(*this, shm_->Post(send, count ? data : nullptr, bytes, peer, tag), what));
    }
    const uint64_t slot = gloo::Slot::build(kPointToPointSlotPrefix, tag);
    if (send) {
      auto post = std::make_shared<SendPost>();
      sender_.Post([this, post, ptr, bytes, peer, slot, what] {
        std::unique_ptr<gloo::transport::UnboundBuffer> buf;
        Status s = Guard(what, [&] {
          buf = context_->createUnboundBuffer(ptr, bytes);
          buf->send(peer, slot);
        });
        {
          std::lock_guard lock(post->mu);
          post->status = s;
          post->buf = std::move(buf);
          post->done = true;
        }
        post->posted.notify_all();
      });
      return std::unique_ptr<Request>(std::make_unique<GlooRequest>(*this, nullptr, std::move(post), true, what));
    }
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
    STRATA_RETURN_IF_ERROR(Run(what, [&] {
      buf = context_->createUnboundBuffer(ptr, bytes);
      buf->recv(peer, slot);
    }));
    return std::unique_ptr<Request>(std::make_unique<GlooRequest>(*this, std::move(buf), nullptr, false, what));
  }

  // Records `s`, a failure seen outside Run, as the one that broke the communicator.
  bool SmallOverShm(size_t bytes) const { return shm_ && size() > 1 && bytes > 0 && bytes <= kShmAllReduceMaxBytes; }

  // A few values all-reduced through shared memory: every rank sends its own to rank 0, which
  // reduces them in rank order and sends the result back, so every rank ends with the same
  // bits. 2 (n - 1) copies of a few bytes, where Gloo's ring passes 2 (n - 1) TCP messages
  // through its I/O threads (a step's loss over a pipeline of 4 on the 2-core host: 0.5 to 2 ms
  // a scalar). kAvg sums here; the caller divides. Tags from kReservedTags on are the
  // communicator's own (Communicator refuses them from callers).
  template <typename T>
  Status ShmAllReduce(T* data, size_t count, ReduceOp op) {
    if (!broken_.ok()) {
      return Status::FailedPrecondition("all-reduce: communicator broken by an earlier error (" + broken_.ToString() + ")");
    }
    const uint32_t tag = kReservedTags | (shm_collectives_++ & ~kReservedTags);
    const uint64_t bytes = count * sizeof(T);
    auto wait = [&](ShmP2P::Op& o, int peer) -> Status {
      Status s = shm_->Wait(o);
      return s.ok() ? s : Break(s.WithContext("all-reduce through shared memory with rank " + std::to_string(peer)));
    };
    if (rank() != 0) {
      std::vector<T> mine(data, data + count);
      auto send = shm_->Post(true, mine.data(), bytes, 0, tag);
      auto recv = shm_->Post(false, data, bytes, 0, tag);
      STRATA_RETURN_IF_ERROR(wait(*send, 0));
      return wait(*recv, 0);
    }
    const int n = size();
    std::vector<T> theirs(count * static_cast<size_t>(n - 1));
    std::vector<std::shared_ptr<ShmP2P::Op>> ops;
    for (int q = 1; q < n; ++q) ops.push_back(shm_->Post(false, theirs.data() + (q - 1) * count, bytes, q, tag));
    for (int q = 1; q < n; ++q) STRATA_RETURN_IF_ERROR(wait(*ops[q - 1], q));
    for (int q = 1; q < n; ++q) {
      const T* v = theirs.data() + (q - 1) * count;
      for (size_t i = 0; i < count; ++i) {
        switch (op) {
          case ReduceOp::kMax: data[i] = std::max(data[i], v[i]); break;
          case ReduceOp::kMin: data[i] = std::min(data[i], v[i]); break;
          default: data[i] += v[i]; break;
        }
      }
    }
    ops.clear();
    for (int q = 1; q < n; ++q) ops.push_back(shm_->Post(true, data, bytes, q, tag));
    for (int q = 1; q < n; ++q) STRATA_RETURN_IF_ERROR(wait(*ops[q - 1], q));
    return Status::OK();
  }

  Status Break(const Status& s) {
    if (broken_.ok()) broken_ = s;
    return s;
  }

  // Runs one operation unless an earlier failure broke the communicator; a failure breaks it.
  template <typename Fn>
  Status Run(const std::string& what, Fn&& fn) {
    if (!broken_.ok()) {
      return Status::FailedPrecondition(what + ": communicator broken by an earlier error (" +
                                        broken_.ToString() + ")");
    }
    Status s = Guard(what, std::forward<Fn>(fn));
    if (!s.ok()) broken_ = s;
    return s;
  }

  Status CheckPeer(const char* what, int peer) const {
    if (peer < 0 || peer >= size() || peer == rank()) {
      return Status::InvalidArgument(std::string(what) + " rank " + std::to_string(peer) +
                                     ": not another rank of this group (rank " +
                                     std::to_string(rank()) + " of " + std::to_string(size()) +
                                     ")");
    }
    return Status::OK();
  }

  // Ring reduce-scatter, n-1 steps: at step s rank r passes the partial sum of block r-s-1 to
  // rank r+1 and receives that of block r-s-2 from rank r-1, adding its own share. The block
  // received last is r, complete. Throws Gloo's exceptions.
  void RingReduceScatter(const float* in, float* out, size_t count, ReduceFn reduce, uint32_t tag) {
    const int n = size(), r = rank();
    const size_t bytes = count * sizeof(float);
    if (n == 1 || count == 0) {
      if (count && out != in) std::memcpy(out, in, bytes);
      return;
    }
    // In place (`out` is this rank's block of `in`) is safe: the own block is read only by the
    // last step's element-wise reduction into `out`.
    if (scratch_.size() < 2 * count) scratch_.resize(2 * count);
    auto mine = context_->createUnboundBuffer(const_cast<float*>(in), n * bytes);
    // Two halves, each its own buffer: one is sent while the other receives.
    std::unique_ptr<gloo::transport::UnboundBuffer> half[2] = {
        context_->createUnboundBuffer(scratch_.data(), bytes),
        context_->createUnboundBuffer(scratch_.data() + count, bytes)};
    const uint64_t slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    auto block = [n](int b) { return static_cast<size_t>(((b % n) + n) % n); };
    for (int s = 0; s < n - 1; ++s) {
      gloo::transport::UnboundBuffer& send = s == 0 ? *mine : *half[(s + 1) % 2];
      gloo::transport::UnboundBuffer& recv = *half[s % 2];
      send.send(next, slot, s == 0 ? block(r - 1) * bytes : 0, bytes);
      recv.recv(prev, slot, 0, bytes);
      recv.waitRecv();
      send.waitSend();
      const float* own = in + block(r - s - 2) * count;
      float* partial = static_cast<float*>(recv.ptr);
      reduce(s == n - 2 ? out : partial, partial, own, count);
    }
  }

  std::shared_ptr<gloo::Context> context_;
  uint32_t next_tag_ = 1;
  std::vector<float> scratch_;  // reduce-scatter's two halves, grown on demand
  Status broken_;               // the first failure; OK while usable
  float empty_ = 0;             // the buffer of empty transfers
  std::unique_ptr<ShmP2P> shm_;  // point-to-point through shared memory, when the group shares a host
  uint32_t shm_collectives_ = 0;  // small all-reduces through shm_ so far: their tags
  // ISend's thread; declared last, so that it stops (running what is queued) before the rest goes.
  SerialQueue sender_;
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
  auto comm = std::make_unique<GlooCommunicator>(context, name);
  if (options.shm_ring_bytes > 0 && size > 1) {
    const std::string prefix = "gloo/" + name + "/";
    auto shm = ShmP2P::Open(
        rank, size, options.shm_ring_bytes, options.timeout,
        [&](const std::string& key, const std::string& value) { return node.KvSet(prefix + key, value); },
        [&](const std::string& key) { return node.KvGet(prefix + key, options.timeout); });
    // All ranks or none: a rank on another host (or without room in /dev/shm) keeps the group on TCP.
    double ok = shm.ok() ? 1 : 0;
    STRATA_RETURN_IF_ERROR(comm->AllReduceHost(&ok, 1, ReduceOp::kMin).WithContext("communicator \"" + name + "\""));
    if (ok == 1) {
      (*shm)->Unlink();  // every rank has mapped every segment
      comm->UseSharedMemory(*std::move(shm));
      if (rank == 0) {
        spdlog::info("communicator \"{}\": point-to-point through shared memory ({} KiB rings)", name,
                     options.shm_ring_bytes >> 10);
      }
    } else if (!shm.ok()) {
      spdlog::info("communicator \"{}\": point-to-point over TCP, not shared memory: {}", name, shm.status().ToString());
    }
  }
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace strata
