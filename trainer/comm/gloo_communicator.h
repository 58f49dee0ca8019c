// gloo_communicator.h: MakeGlooCommunicator, the host-memory Communicator over Gloo's TCP
// transport, rendezvousing through the scheduler's key-value store.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "cluster/node.h"
#include "trainer/comm/communicator.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace strata {

struct GlooOptions {
  std::string hostname = "127.0.0.1";  // the interface Gloo's TCP pairs listen on
  // For the rendezvous and for every operation: a collective, send or recv that waits longer for
  // a peer fails with DeadlineExceeded (and breaks the communicator, see communicator.h).
  Millis timeout{60000};
  // When > 0 and every rank of the group is on this host: sends and receives go through shared
  // memory (ShmP2P, a ring of this many bytes per peer) instead of TCP, and so do all-reduces of
  // at most kShmAllReduceMaxBytes; larger collectives stay on Gloo.
  uint64_t shm_ring_bytes = 0;
};

// The largest all-reduce a group with shared memory runs through it (gathered on rank 0,
// reduced in rank order, sent back) rather than Gloo's ring. Up to here a collective's cost is
// its latency: on the 2-core host Gloo's ring took about 1 ms more for 8 KiB between two
// processes (a tensor-parallel mlp at micro-batch 2: 106 ms a step on Gloo, 73 over shared
// memory), and no less at 128 KiB. A dp or tp group's ring is this size, so one fits whole.
constexpr size_t kShmAllReduceMaxBytes = 64 * 1024;

// Creates the communicator of `rank` among `size` ranks, rendezvousing under `name` in the
// scheduler's kv store (all ranks of a group pass the same name; different groups, e.g. one per
// ProcessMesh dim, use different names). Blocks until every rank has joined.
Result<std::unique_ptr<Communicator>> MakeGlooCommunicator(Node& node, const std::string& name,
                                                           int rank, int size,
                                                           const GlooOptions& options = {});

}  // namespace strata
