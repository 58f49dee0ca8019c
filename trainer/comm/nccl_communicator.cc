// nccl_communicator.cc: NcclCommunicator over a non-blocking NCCL communicator (so that no NCCL
// call can block past the timeout: calls that answer ncclInProgress are polled until done), and
// the unique-id rendezvous through the scheduler's kv store. NCCL and CUDA errors become
// Statuses here.
#include "trainer/comm/nccl_communicator.h"

#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/cuda_check.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

// A NCCL failure as a Status, with the call that failed and NCCL's own last-error text.
Status NcclError(ncclComm_t comm, ncclResult_t result, const std::string& what) {
  std::string message = what + ": " + ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') message += " (" + std::string(last) + ")";
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return Status::InvalidArgument(message);
    case ncclRemoteError:
    case ncclSystemError:
      return Status::Unavailable(message);
    default:
      return Status::Internal(message);
  }
}

// Polls a non-blocking communicator until `result` (what the call returned) is no longer
// ncclInProgress, or `deadline` passes.
Status Settle(ncclComm_t comm, ncclResult_t result, Clock::time_point deadline,
              const std::string& what) {
  while (result == ncclInProgress) {
    if (Clock::now() > deadline)
      return Status::DeadlineExceeded(what + ": NCCL did not finish in time");
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    const ncclResult_t query = ncclCommGetAsyncError(comm, &result);
    if (query != ncclSuccess) return NcclError(comm, query, what + ": ncclCommGetAsyncError");
  }
  return result == ncclSuccess ? Status::OK() : NcclError(comm, result, what);
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kSum:
      break;
  }
  return ncclSum;
}

struct StreamDeleter {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(std::string name, ncclComm_t comm, int rank, int size,
                       const NcclOptions& options, cudaStream_t stream,
                       std::unique_ptr<CUstream_st, StreamDeleter> owned,
                       std::unique_ptr<float, DeviceFree> scratch)
      : NcclCommunicator(std::move(name)),
        comm_(comm),
        rank_(rank),
        size_(size),
        device_(options.device),
        timeout_(options.timeout),
        stream_(stream),
        owned_stream_(std::move(owned)),
        scratch_(std::move(scratch)) {}

  // Flushes and frees the NCCL communicator; aborts it if that does not finish in time.
  ~NcclCommunicatorImpl() override {
    if (comm_ == nullptr) return;
    cudaSetDevice(device_);
    const Status s = Settle(comm_, ncclCommFinalize(comm_), Clock::now() + timeout_, "finalize");
    if (s.ok()) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  cudaStream_t stream() const override { return stream_; }
  int device() const override { return device_; }

 protected:
  Status DoAllReduce(float* data, size_t count, ReduceOp op) override {
    return Enqueue("all-reduce", [&] {
      return ncclAllReduce(data, data, count, ncclFloat, NcclOp(op), comm_, stream_);
    });
  }

  Status DoReduceScatter(const float* in, float* out, size_t count_per_rank, ReduceOp op) override {
    return Enqueue("reduce-scatter", [&] {
      return ncclReduceScatter(in, out, count_per_rank, ncclFloat, NcclOp(op), comm_, stream_);
    });
  }

  Status DoAllGather(const float* in, float* out, size_t count) override {
    return Enqueue("all-gather",
                   [&] { return ncclAllGather(in, out, count, ncclFloat, comm_, stream_); });
  }

  // NCCL has no all-to-all: one grouped send and receive per peer (its own block is copied on
  // the stream). The group is closed even when a call inside it failed, as NCCL requires.
  Status DoAllToAll(const float* in, float* out, size_t count_per_rank) override {
    if (count_per_rank == 0) return Status::OK();
    return Enqueue("all-to-all", [&] {
      ncclResult_t first = ncclGroupStart();
      if (first != ncclSuccess) return first;
      for (int peer = 0; peer < size_; ++peer) {
        const float* send = in + static_cast<size_t>(peer) * count_per_rank;
        float* recv = out + static_cast<size_t>(peer) * count_per_rank;
        ncclResult_t r = ncclSend(send, count_per_rank, ncclFloat, peer, comm_, stream_);
        if (r == ncclSuccess) r = ncclRecv(recv, count_per_rank, ncclFloat, peer, comm_, stream_);
        if (first == ncclSuccess) first = r;
      }
      const ncclResult_t end = ncclGroupEnd();
      return first != ncclSuccess ? first : end;
    });
  }

  Status DoBroadcast(float* data, size_t count, int root) override {
    if (root < 0 || root >= size_) {
      return Status::InvalidArgument("broadcast root " + std::to_string(root) +
                                     " out of range [0, " + std::to_string(size_) + ")");
    }
    return Enqueue("broadcast", [&] {
      return ncclBroadcast(data, data, count, ncclFloat, root, comm_, stream_);
    });
  }

  // NCCL has no barrier: an all-reduce of one float, waited for on the host.
  Status DoBarrier() override {
    STRATA_RETURN_IF_ERROR(Enqueue("barrier", [&] {
      return ncclAllReduce(scratch_.get(), scratch_.get(), 1, ncclFloat, ncclSum, comm_, stream_);
    }));
    return Synchronize();
  }

  Status DoSend(const float* data, size_t count, int peer, uint32_t /*tag*/) override {
    STRATA_RETURN_IF_ERROR(CheckPeer("send to", peer));
    if (count == 0) return Status::OK();
    return Enqueue("send to rank " + std::to_string(peer),
                   [&] { return ncclSend(data, count, ncclFloat, peer, comm_, stream_); });
  }

  Status DoRecv(float* data, size_t count, int peer, uint32_t /*tag*/) override {
    STRATA_RETURN_IF_ERROR(CheckPeer("recv from", peer));
    if (count == 0) return Status::OK();
    return Enqueue("recv from rank " + std::to_string(peer),
                   [&] { return ncclRecv(data, count, ncclFloat, peer, comm_, stream_); });
  }

  // NCCL orders point-to-point calls by issue on the communicator's stream; a request's Wait
  // is Synchronize. Pipeline stages on NCCL post the sends and receives of one exchange in the
  // same order on both sides (see pipeline/executor.h).
  Result<std::unique_ptr<Request>> DoISend(const float* data, size_t count, int peer, uint32_t tag) override {
    STRATA_RETURN_IF_ERROR(DoSend(data, count, peer, tag));
    return std::unique_ptr<Request>(std::make_unique<StreamRequest>(*this));
  }

  Result<std::unique_ptr<Request>> DoIRecv(float* data, size_t count, int peer, uint32_t tag) override {
    STRATA_RETURN_IF_ERROR(DoRecv(data, count, peer, tag));
    return std::unique_ptr<Request>(std::make_unique<StreamRequest>(*this));
  }

  Status DoAllReduceHost(double* host, size_t count, ReduceOp op) override {
    return ThroughDevice("all-reduce of host doubles", host, count, [&](double* d) {
      return Enqueue("all-reduce", [&] {
        return ncclAllReduce(d, d, count, ncclDouble, NcclOp(op), comm_, stream_);
      });
    });
  }

  Status DoAllReduceHost(float* host, size_t count, ReduceOp op) override {
    return ThroughDevice("all-reduce of host floats", host, count,
                         [&](float* d) { return DoAllReduce(d, count, op); });
  }

  Status DoBroadcastHost(float* host, size_t count, int root) override {
    return ThroughDevice("broadcast of host floats", host, count,
                         [&](float* d) { return DoBroadcast(d, count, root); });
  }

 public:
  Status Synchronize() override {
    STRATA_RETURN_IF_ERROR(Usable("synchronize"));
    const Clock::time_point deadline = Clock::now() + timeout_;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      ncclResult_t async = ncclSuccess;
      const ncclResult_t query = ncclCommGetAsyncError(comm_, &async);
      if (query != ncclSuccess)
        return Break(NcclError(comm_, query, "synchronize: ncclCommGetAsyncError"));
      if (async != ncclSuccess && async != ncclInProgress)
        return Break(NcclError(comm_, async, "synchronize"));
      if (q == cudaSuccess) return Status::OK();
      if (q != cudaErrorNotReady) {
        return Break(Status::Internal(std::string("synchronize: cudaStreamQuery: ") +
                                      cudaGetErrorString(q)));
      }
      if (Clock::now() > deadline) {
        return Break(Status::DeadlineExceeded("synchronize: the stream did not drain within " +
                                              std::to_string(timeout_.count()) +
                                              " ms (a peer is gone or out of step)"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

 private:
  Status Usable(const std::string& what) const {
    if (broken_.ok()) return Status::OK();
    return Status::FailedPrecondition(what + ": communicator broken by an earlier error (" +
                                      broken_.ToString() + ")");
  }

  // Copies `host` into a device buffer on stream_, runs `collective` on it, copies the result
  // back and waits for all of it (Synchronize: the timeout applies).
  class StreamRequest final : public Request {
   public:
    explicit StreamRequest(NcclCommunicatorImpl& comm) : comm_(comm) {}
    Status Wait() override { return comm_.Synchronize(); }

   private:
    NcclCommunicatorImpl& comm_;
  };

  template <typename T, typename Collective>
  Status ThroughDevice(const std::string& what, T* host, size_t count, Collective&& collective) {
    STRATA_RETURN_IF_ERROR(Usable(what));
    if (count == 0) return Status::OK();
    auto cuda = [&](cudaError_t e, const char* call) {
      return e == cudaSuccess ? Status::OK()
                              : Status::Internal(what + ": " + call + ": " + cudaGetErrorString(e));
    };
    STRATA_RETURN_IF_ERROR(cuda(cudaSetDevice(device_), "cudaSetDevice"));
    void* raw = nullptr;
    STRATA_RETURN_IF_ERROR(cuda(cudaMalloc(&raw, count * sizeof(T)), "cudaMalloc"));
    std::unique_ptr<T, DeviceFree> d(static_cast<T*>(raw));
    const size_t bytes = count * sizeof(T);
    STRATA_RETURN_IF_ERROR(cuda(cudaMemcpyAsync(d.get(), host, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync"));
    STRATA_RETURN_IF_ERROR(collective(d.get()));
    STRATA_RETURN_IF_ERROR(cuda(cudaMemcpyAsync(host, d.get(), bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync"));
    return Synchronize();  // before `d` is freed and before the caller reads `host`
  }

  // Records the first failure and aborts the NCCL communicator, which releases kernels that
  // wait for a peer; every later call fails with FailedPrecondition.
  Status Break(Status s) {
    if (broken_.ok()) broken_ = s;
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return s;
  }

  // Enqueues one NCCL call (`call` returns its ncclResult_t) on this communicator's device.
  template <typename Call>
  Status Enqueue(const std::string& what, Call&& call) {
    STRATA_RETURN_IF_ERROR(Usable(what));
    const cudaError_t set = cudaSetDevice(device_);
    if (set != cudaSuccess) {
      return Status::Internal(what + ": cudaSetDevice(" + std::to_string(device_) +
                              "): " + cudaGetErrorString(set));
    }
    Status s = Settle(comm_, call(), Clock::now() + timeout_, what);
    // A rejected argument was caught before anything was enqueued; anything else breaks.
    if (!s.ok() && s.code() != StatusCode::kInvalidArgument) return Break(std::move(s));
    return s;
  }

  Status CheckPeer(const char* what, int peer) const {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      return Status::InvalidArgument(std::string(what) + " rank " + std::to_string(peer) +
                                     ": not another rank of this group (rank " +
                                     std::to_string(rank_) + " of " + std::to_string(size_) + ")");
    }
    return Status::OK();
  }

  ncclComm_t comm_;  // null once aborted
  const int rank_, size_, device_;
  const Millis timeout_;
  const cudaStream_t stream_;
  std::unique_ptr<CUstream_st, StreamDeleter> owned_stream_;  // null when the caller's
  std::unique_ptr<float, DeviceFree> scratch_;                // Barrier()'s float
  Status broken_;
};

// Rank 0 makes the unique id and publishes it; the others wait for it.
Result<ncclUniqueId> RendezvousId(Node& node, const std::string& key, int rank, Millis timeout) {
  ncclUniqueId id;
  if (rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclError(nullptr, r, "ncclGetUniqueId");
    STRATA_RETURN_IF_ERROR(node.KvSet(key, std::string_view(id.internal, sizeof(id.internal))));
    return id;
  }
  STRATA_ASSIGN_OR_RETURN(std::string value, node.KvGet(key, timeout));
  if (value.size() != sizeof(id.internal)) {
    return Status::Corruption("NCCL unique id under \"" + key + "\" has " +
                              std::to_string(value.size()) + " bytes, expected " +
                              std::to_string(sizeof(id.internal)));
  }
  std::memcpy(id.internal, value.data(), sizeof(id.internal));
  return id;
}

}  // namespace

Result<std::unique_ptr<NcclCommunicator>> MakeNcclCommunicator(Node& node, const std::string& name,
                                                               int rank, int size,
                                                               const NcclOptions& options) {
  const std::string context = "nccl communicator \"" + name + "\"";
  if (size < 1 || rank < 0 || rank >= size) {
    return Status::InvalidArgument(context + ": rank " + std::to_string(rank) + " of size " +
                                   std::to_string(size));
  }
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (options.device < 0 || options.device >= devices) {
    return Status::InvalidArgument(context + ": device " + std::to_string(options.device) + " of " +
                                   std::to_string(devices));
  }
  CUDA_CHECK(cudaSetDevice(options.device));
  std::unique_ptr<CUstream_st, StreamDeleter> owned;
  cudaStream_t stream = options.stream;
  if (stream == nullptr) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    owned.reset(stream);
  }
  float* raw_scratch = nullptr;
  CUDA_CHECK(cudaMalloc(&raw_scratch, sizeof(float)));
  std::unique_ptr<float, DeviceFree> scratch(raw_scratch);

  auto id = RendezvousId(node, "nccl/" + name + "/id", rank, options.timeout);
  if (!id.ok()) return id.status().WithContext(context);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, size, *id, rank, &config);
  Status s = comm == nullptr || (started != ncclSuccess && started != ncclInProgress)
                 ? NcclError(comm, started, "ncclCommInitRankConfig")
                 : Settle(comm, started, Clock::now() + options.timeout, "ncclCommInitRankConfig");
  if (!s.ok()) {
    if (comm != nullptr) ncclCommAbort(comm);
    return s.WithContext(context + " rank " + std::to_string(rank));
  }
  return std::unique_ptr<NcclCommunicator>(std::make_unique<NcclCommunicatorImpl>(
      name, comm, rank, size, options, stream, std::move(owned), std::move(scratch)));
}

}  // namespace strata
