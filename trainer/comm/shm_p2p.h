// shm_p2p.h: ShmP2P, point-to-point transfers between the ranks of one group through shared
// memory, when every rank of the group runs on one host (a pipeline's stages on one machine).
//
// Gloo moves a pipeline's activations over loopback TCP: the sender's kernel copies them into a
// socket, the receiver's I/O thread copies them out, and two threads are woken on the way. On a
// host whose cores the ranks keep busy that costs a few hundred microseconds of someone's core
// per hand-off, on the pipeline's critical path. Here a transfer is one copy into a ring the
// receiver owns and one copy out of it, in the two ranks' own threads, and a futex wake.
//
// Layout: each rank owns one POSIX shared-memory segment (holding a shared flock on it for its
// life, so that peers can tell when it is gone): a header with its doorbell (a futex word) and pid, and one single-producer single-consumer byte ring per other rank (that rank
// writes, the owner reads). A message is a 16-byte header (tag, bytes) and its payload, streamed
// through the ring in as many pieces as its space allows, so a message may be larger than the
// ring. A writer rings the reader's doorbell after it advances the ring's head; a reader rings
// the writer's after it advances the tail. Progress is made by whichever thread waits (MPI's
// progress-engine model): a rank blocked on a receive also pushes its queued sends, so two
// ranks that both send before they receive do not deadlock.
//
// Not thread-safe (one thread, Communicator's contract). Segments are unlinked as soon as every
// rank has mapped them, so a crash leaves nothing in /dev/shm after that point.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace strata {

class ShmP2P {
 public:
  // One transfer: done once its bytes are in the ring (send) or in the caller's buffer (recv).
  struct Op {
    bool send = false;
    int peer = 0;
    uint32_t tag = 0;
    char* data = nullptr;  // send: read from; recv: written to
    uint64_t bytes = 0;
    uint64_t moved = 0;    // send: header and payload bytes written; recv: payload bytes read
    bool done = false;
    Status status;
  };

  // Creates this rank's segment (`ring_bytes` per peer). `publish` makes (name, text) known to
  // the group's other ranks and `lookup` waits for a rank's text (the scheduler's kv store).
  // Returns the object once every peer's segment is mapped; `Agree` then tells whether all ranks
  // managed (they must all use shared memory, or none).
  using Publish = std::function<Status(const std::string& key, const std::string& value)>;
  using Lookup = std::function<Result<std::string>(const std::string& key)>;
  static Result<std::unique_ptr<ShmP2P>> Open(int rank, int size, uint64_t ring_bytes,
                                              std::chrono::milliseconds timeout, const Publish& publish,
                                              const Lookup& lookup);
  ~ShmP2P();
  ShmP2P(const ShmP2P&) = delete;
  ShmP2P& operator=(const ShmP2P&) = delete;

  // Unlinks this rank's segment's name (every rank has mapped it: call after the group agreed).
  void Unlink();

  // Queues a transfer and makes what progress it can without blocking. The buffer must stay
  // valid until the op is done.
  std::shared_ptr<Op> Post(bool send, void* data, uint64_t bytes, int peer, uint32_t tag);
  // Makes progress until `op` is done, a peer's process is gone (Unavailable) or the timeout
  // passes without `op` finishing (DeadlineExceeded). Other ops progress meanwhile.
  Status Wait(Op& op);

 private:
  struct Segment;
  struct Incoming {  // the message being read from one peer's ring
    bool have_header = false;
    uint32_t tag = 0;
    uint64_t bytes = 0, got = 0;
    std::shared_ptr<Op> op;   // the posted receive it fills, or
    std::vector<char> stash;  // an unexpected one's copy
  };
  struct Peer {
    std::deque<std::shared_ptr<Op>> sends;
    std::multimap<uint32_t, std::shared_ptr<Op>> posted;  // receives by tag, in posting order
    std::map<uint32_t, std::deque<std::vector<char>>> unexpected;
    Incoming in;
  };

  ShmP2P(int rank, int size, uint64_t ring_bytes, std::chrono::milliseconds timeout);
  bool Progress();  // one pass over every peer; whether anything moved
  bool PumpSends(int peer);
  // Writes what of `p`'s queued sends fits before `tail` (the ring's read position) into the
  // ring at `data`, from `head` on; advances `head`.
  void PumpInto(Peer& p, char* data, uint64_t& head, uint64_t tail);
  bool PumpRecvs(int peer);
  Status Failed(Op& op, Status s);
  Status PeerGone(int peer) const;  // Unavailable once the peer's segment lock is free

  const int rank_, size_;
  const uint64_t ring_bytes_;
  const std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<Segment>> segments_;  // by rank; segments_[rank_] is this rank's
  std::vector<Peer> peers_;
  Status broken_;
};

}  // namespace strata
