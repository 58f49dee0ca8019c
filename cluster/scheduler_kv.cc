// scheduler_kv.cc: Scheduler's key-value store (set, get, get-with-wait). Waiters past their
// deadline are answered by the monitor thread (scheduler.cc).
#include "cluster/scheduler.h"

namespace strata {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void Scheduler::HandleKvSet(Request request) {
  auto kv = request.message().reader().getBody().getKvSet();
  const std::string key = kv.getKey().cStr();
  auto value = kv.getValue();
  if (key.empty() || key.size() > options_.max_kv_key_bytes) {
    return request.ReplyError(Status::InvalidArgument(
        "kvSet: key must be 1 to " + std::to_string(options_.max_kv_key_bytes) + " bytes"));
  }
  if (value.size() > options_.max_kv_value_bytes) {
    return request.ReplyError(Status::InvalidArgument(
        "kvSet \"" + key + "\": value of " + std::to_string(value.size()) + " bytes exceeds " +
        std::to_string(options_.max_kv_value_bytes)));
  }
  std::lock_guard lock(mu_);
  if (!kv_.count(key) && kv_.size() >= options_.max_kv_entries) {
    return request.ReplyError(Status::ResourceExhausted("kvSet: the store holds " +
                                                        std::to_string(kv_.size()) + " keys, the limit"));
  }
  std::string& slot = kv_[key];
  slot.assign(reinterpret_cast<const char*>(value.begin()), value.size());
  request.Reply(request.MakeReply());
  for (auto it = kv_waiters_.begin(); it != kv_waiters_.end();) {
    if (it->key != key) {
      ++it;
      continue;
    }
    Message reply = it->request.MakeReply();
    reply.builder().getBody().setKvValue(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(slot.data()), slot.size()));
    it->request.Reply(std::move(reply));
    it = kv_waiters_.erase(it);
  }
}

void Scheduler::HandleKvGet(Request request) {
  auto kv = request.message().reader().getBody().getKvGet();
  const std::string key = kv.getKey().cStr();
  const Millis wait(kv.getWaitMs());
  if (key.empty() || key.size() > options_.max_kv_key_bytes) {
    return request.ReplyError(Status::InvalidArgument(
        "kvGet: key must be 1 to " + std::to_string(options_.max_kv_key_bytes) + " bytes"));
  }
  if (wait > options_.max_kv_wait) {
    return request.ReplyError(Status::InvalidArgument(
        "kvGet \"" + key + "\": wait of " + std::to_string(wait.count()) + " ms exceeds the limit of " +
        std::to_string(options_.max_kv_wait.count()) + " ms"));
  }
  std::lock_guard lock(mu_);
  if (auto it = kv_.find(key); it != kv_.end()) {
    Message reply = request.MakeReply();
    reply.builder().getBody().setKvValue(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(it->second.data()), it->second.size()));
    return request.Reply(std::move(reply));
  }
  if (wait.count() == 0) return request.ReplyError(Status::NotFound("kv key \"" + key + "\" is not set"));
  kv_waiters_.push_back({std::move(request), key, Clock::now() + wait});
}

}  // namespace strata
