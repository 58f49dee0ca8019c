// server_workers.cc: PsServer's workers: which one handles each request (ps/sender_lanes.h),
// their queues and their loop. The receive thread queues, and answers only the pulls of fresh
// dense snapshots itself (TryPullOnReceive); workers handle the rest.
#include "ps/server.h"

#include <algorithm>
#include <cstring>

namespace strata {

void PsServer::StartWorkers(int workers) {
  lanes_ = std::make_unique<SenderLanes<Queued>>(static_cast<size_t>(std::max(1, workers)));
  // One more worker, outside the lanes, handles migrate and migrateRows only: a leaving server
  // serves the chunks its receivers ask for while pushes wait on its freeze on the others.
  for (int i = 0; i < std::max(1, workers) + 1; ++i) {
    workers_.push_back(std::make_unique<Worker>());
    Worker* w = workers_.back().get();
    w->thread = std::thread([this, w] { RunWorker(*w); });
  }
}

namespace {

// The lane of a push or pull of exactly one key (a dense chunk, or one sparse row): one
// sender's such requests on different keys may run at once (ps/sender_lanes.h).
std::optional<LaneKey> LaneOf(const Message& m) {
  const Op op = m.op();
  if ((op != Op::PUSH && op != Op::PULL) || m.num_payloads() == 0) return std::nullopt;
  const Buffer& keys = m.payload(0);
  if (keys.size() != sizeof(uint64_t) || m.payload_info(0).dtype != DType::kI64) return std::nullopt;
  LaneKey lane;
  std::memcpy(&lane.key, keys.data(), sizeof(lane.key));
  auto body = m.reader().getBody();
  lane.table = op == Op::PUSH ? body.getPush().getTable() : body.getPull().getTable();
  return lane;
}

}  // namespace

void PsServer::Dispatch(Request request) {
  if (!RouteToBackup(request)) return;
  const uint32_t sender = request.message().sender();
  const Op op = request.message().op();
  if (op == Op::PULL && TryPullOnReceive(request)) return;
  ++queued_;
  if (op == Op::MIGRATE || op == Op::MIGRATE_ROWS) {
    Worker& w = *workers_.back();
    std::lock_guard lock(w.mu);
    w.queue.push_back(Queued{std::move(request), sender, false, /*laned=*/false});
    w.cv.notify_one();
    return;
  }
  const std::optional<LaneKey> lane = LaneOf(request.message());
  Enqueue(lanes_->Admit(sender, lane, Queued{std::move(request), sender, lane.has_value(), /*laned=*/true}));
}

void PsServer::Enqueue(SenderLanes<Queued>::Ready ready) {
  for (auto& [worker, queued] : ready) {
    Worker& w = *workers_[worker];
    std::lock_guard lock(w.mu);
    w.queue.push_back(std::move(queued));
    w.cv.notify_one();
  }
}

void PsServer::ParkedToWorker(Parked& parked) {
  const uint32_t sender = SenderOf(parked.request.message());
  Worker& w = *workers_[sender % (workers_.size() - 1)];  // the last one is migrate's
  ++queued_;
  std::lock_guard lock(w.mu);
  w.queue.push_back(Queued{std::move(parked.request), sender, false, /*laned=*/false, /*parked=*/true});
  w.cv.notify_one();
}

void PsServer::RunWorker(Worker& w) {
  while (true) {
    std::unique_lock lock(w.mu);
    w.cv.wait(lock, [&] { return stop_ || !w.queue.empty(); });
    if (stop_) return;
    Queued q = std::move(w.queue.front());
    w.queue.pop_front();
    lock.unlock();
    --queued_;
    if (q.parked) {  // as HandleParked
      if (q.request.message().op() == Op::PULL) {
        HandlePull(q.request);
      } else {
        HandleGradNorm(q.request);
      }
      continue;
    }
    Handle(q.request);
    if (q.laned) Enqueue(lanes_->Done(q.sender, q.keyed));
  }
}

}  // namespace strata
