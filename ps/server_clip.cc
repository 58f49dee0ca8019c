// server_clip.cc: PsServer's side of global gradient clipping (optimizer.clip_norm under BSP):
// the gradNorm requests a trainer sends after its pushes of a clock, and the gradScale its clock
// message carries. A clipped table (TableSpec::clipped) holds each chunk's sum until the clock
// messages, which apply it times MeanScale() times the clock's gradScale.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ps/server.h"
#include "ps/server_table.h"

namespace strata {

void PsServer::HandleParked(Parked& parked) {
  if (parked.table) return HandlePull(parked.request);
  HandleGradNorm(parked.request);
}

bool PsServer::GradNormReadyLocked(int64_t clock, Status* error) const {
  if (!lost_trainers_.empty()) {
    *error = Status::Aborted("the gradient norm of clock " + std::to_string(clock) + " cannot be known: lost " +
                             lost_trainers_.begin()->second);
    return true;
  }
  const uint32_t servers = KeyLayout().base, me = Shard();
  std::shared_lock tables_lock(tables_mu_);
  for (const auto& [id, tp] : tables_) {
    Table& t = *tp;
    if (!t.spec.clipped) continue;
    std::lock_guard bsp_lock(t.bsp_mu);
    if (t.applied_clock > clock) {
      *error = Status::FailedPrecondition("gradient norm of clock " + std::to_string(clock) + ": table \"" +
                                          t.spec.name + "\" has applied that clock already");
      return true;
    }
    uint64_t complete = 0;
    if (auto it = t.pending.find(clock); it != t.pending.end()) {
      for (const auto& [key, acc] : it->second) complete += acc.pushes >= t.spec.pushers ? 1 : 0;
    }
    if (complete < ChunksOn(t.spec, me, servers)) return false;
  }
  return true;
}

Message PsServer::GradNormReplyLocked(const Request& request, int64_t clock) const {
  double sum = 0;
  uint64_t chunks = 0;
  std::shared_lock tables_lock(tables_mu_);
  for (const auto& [id, tp] : tables_) {  // by table id
    Table& t = *tp;
    if (!t.spec.clipped) continue;
    std::lock_guard bsp_lock(t.bsp_mu);
    auto it = t.pending.find(clock);
    if (it == t.pending.end()) continue;
    std::vector<uint64_t> keys;
    for (const auto& [key, acc] : it->second) keys.push_back(key);
    std::sort(keys.begin(), keys.end());
    // Each element as it will be applied before clipping: the pushes' sum times the mean's
    // factor, rounded to float as the kernel rounds it.
    const float mean = t.MeanScale();
    for (uint64_t key : keys) {
      for (float s : it->second.at(key).sum) {
        const float g = s * mean;
        sum += static_cast<double>(g) * g;
      }
      ++chunks;
    }
  }
  Message reply = request.MakeReply();
  auto r = reply.builder().getBody().initGradNorm();
  r.setClock(clock);
  r.setSumSquares(sum);
  r.setChunks(chunks);
  return reply;
}

void PsServer::HandleGradNorm(Request& request) {
  const Message& msg = request.message();
  const int64_t clock = msg.reader().getBody().getGradNorm().getClock();
  auto fail = [&](const Status& s) {
    ++errors_;
    request.ReplyError(s);
  };
  if (!serving_.empty()) return fail(Status::FailedPrecondition("gradNorm: this server serves checkpoint " + serving_ + " read-only"));
  if (clock < 0) return fail(Status::InvalidArgument("gradNorm for clock " + std::to_string(clock) + ": clocks start at 0"));
  std::lock_guard lock(clock_mu_);
  Status error;
  if (!GradNormReadyLocked(clock, &error)) {
    // Parked like a BSP pull: the receive loop and the workers go on; the pushes that complete
    // the clock wake it (AdvanceEarly). The trainer's wait bounds it (sync.timeout_ms).
    const std::string& route = request.source().route;
    const std::string peer = route.empty() ? "node " + std::to_string(msg.sender()) : route;
    if (Status s = parked_quota_.Admit(peer, 0, "node " + std::to_string(msg.sender())); !s.ok()) {
      return fail(s.WithContext("gradNorm of clock " + std::to_string(clock)));
    }
    parked_.push_back({std::move(request), nullptr, clock, peer, 0});
    return;
  }
  if (!error.ok()) return fail(error);
  request.Reply(GradNormReplyLocked(request, clock));
}

Status PsServer::TakeGradScaleLocked(int64_t clock, float scale, uint32_t sender) {
  if (!(std::isfinite(scale) && scale >= 0)) {
    return Status::InvalidArgument("clock " + std::to_string(clock) + " from node " + std::to_string(sender) +
                                   ": gradScale " + std::to_string(scale) +
                                   " is not a finite number >= 0 (the global clipping factor)");
  }
  auto [it, fresh] = grad_scale_.emplace(clock, scale);
  if (!fresh && it->second != scale) {
    return Status::InvalidArgument("clock " + std::to_string(clock) + " from node " + std::to_string(sender) +
                                   " carries gradScale " + std::to_string(scale) + ", the clock's other trainers " +
                                   std::to_string(it->second) +
                                   ": every trainer must clip by the same global gradient norm");
  }
  return Status::OK();
}

float PsServer::GradScaleLocked(int64_t clock) const {
  auto it = grad_scale_.find(clock);
  return it == grad_scale_.end() ? 1.0f : it->second;
}

}  // namespace strata
