// message_path.h: the cost of a small message in our layers above ZeroMQ, on one thread, with
// no sockets: RpcEndpoint::Notify through the codec into a frame batch (what a sender's thread
// does), and the batch unpacked, decoded and handed to the handler as a Request (what the
// receiver's I/O thread does). The transport bench prints it beside the stream's CPU per
// message: the part of that figure that is ours, measured steadily (no other thread, no
// scheduling), so that a change of a few nanoseconds shows.
#pragma once

#include <vector>

#include "common/buffer.h"
#include "common/status.h"

namespace strata::bench {

struct MessagePathFigures {
  std::vector<double> send_ns;     // per message: Notify, encode, append to a batch, finish it
  std::vector<double> receive_ns;  // per message: unpack, decode, Request, handler, free
};

// Medians are the caller's: one figure per repetition, `reps` of them, over `messages` one-way
// echo messages carrying `payload` (which must fit in a batch).
Result<MessagePathFigures> MeasureMessagePath(const Buffer& payload, int reps, int messages);

}  // namespace strata::bench
