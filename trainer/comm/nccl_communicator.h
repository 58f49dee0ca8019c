// nccl_communicator.h: NcclCommunicator, the device-memory Communicator over NCCL, and
// MakeNcclCommunicator, which bootstraps it through the scheduler's key-value store (rank 0
// publishes the ncclUniqueId). Built only with CUDA (STRATA_HAVE_CUDA).
#pragma once

#if STRATA_HAVE_CUDA

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>

#include "cluster/node.h"
#include "trainer/comm/communicator.h"

namespace strata {

struct NcclOptions {
  // This rank's CUDA device. One rank per device: NCCL rejects two ranks of a group on the same
  // device (ncclInvalidUsage, "Duplicate GPU detected").
  int device = 0;
  // The stream operations are enqueued on, not owned. Null: the communicator creates and owns a
  // non-blocking stream of its own (communication on its own stream, ordered against compute
  // with events, is the house rule).
  cudaStream_t stream = nullptr;
  // For the rendezvous, communicator set-up, every enqueue and every Synchronize()/Barrier():
  // past it the NCCL communicator is aborted (kernels waiting for a dead peer are released) and
  // the call fails with DeadlineExceeded. It covers all work on the stream, the caller's too.
  Millis timeout{60000};
};

// Stream-ordered (see communicator.h): every operation is enqueued on stream() and returns;
// Synchronize() waits for the stream on the host, polling NCCL's asynchronous errors. Tags of
// Send/Recv are not transmitted: NCCL matches them in issue order per peer. Use from one thread;
// every call makes the communicator's device current on that thread (cudaSetDevice).
class NcclCommunicator : public Communicator {
 public:
  // Where operations are enqueued. To make compute wait for a collective without blocking the
  // host: cudaEventRecord(e, stream()), then cudaStreamWaitEvent(compute, e).
  virtual cudaStream_t stream() const = 0;
  virtual int device() const = 0;
  // AllReduceHost / BroadcastHost: NCCL reads and writes device memory only, so these stage the
  // host floats through a device buffer on stream() and wait (with the timeout) before returning.

 protected:
  explicit NcclCommunicator(std::string name) : Communicator(std::move(name)) {}
};

// Creates the communicator of `rank` among `size` ranks. All ranks of a group pass the same
// `name`, which must not have been used for another group in this job (the unique id stays in
// the kv store): add a generation when rebuilding a group. Blocks until every rank has joined
// or options.timeout passed.
Result<std::unique_ptr<NcclCommunicator>> MakeNcclCommunicator(Node& node, const std::string& name,
                                                               int rank, int size,
                                                               const NcclOptions& options = {});

}  // namespace strata

#endif  // STRATA_HAVE_CUDA
