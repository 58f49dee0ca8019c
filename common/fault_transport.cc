// fault_transport.cc: FaultInjectingTransport.
#include "common/fault_transport.h"

namespace strata {

FaultInjectingTransport::FaultInjectingTransport(std::unique_ptr<Transport> inner,
                                                 const FaultOptions& options)
    : inner_(std::move(inner)), options_(options), rng_(options.seed) {
  delay_thread_ = std::thread([this] { RunDelays(); });
}

FaultInjectingTransport::~FaultInjectingTransport() { Shutdown(); }

FaultInjectingTransport::Fate FaultInjectingTransport::Decide() {
  std::lock_guard lock(mu_);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  if (u(rng_) < options_.drop_rate) return Fate::kDrop;
  if (options_.delay_ms > 0 && u(rng_) < options_.delay_rate) return Fate::kDelay;
  return Fate::kPass;
}

void FaultInjectingTransport::Later(std::function<void()> send) {
  ++delayed_;
  std::lock_guard lock(mu_);
  due_.emplace(std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.delay_ms),
               std::move(send));
  cv_.notify_one();
}

Status FaultInjectingTransport::Send(PeerId peer, Frames frames) {
  switch (Decide()) {
    case Fate::kDrop: ++dropped_; return Status::OK();  // silently, as a lossy network would
    case Fate::kDelay:
      Later([this, peer, f = std::move(frames)]() mutable { (void)inner_->Send(peer, std::move(f)); });
      return Status::OK();
    case Fate::kPass: break;
  }
  return inner_->Send(peer, std::move(frames));
}

Status FaultInjectingTransport::Reply(const Source& to, Frames frames) {
  switch (Decide()) {
    case Fate::kDrop: ++dropped_; return Status::OK();
    case Fate::kDelay:
      Later([this, to, f = std::move(frames)]() mutable { (void)inner_->Reply(to, std::move(f)); });
      return Status::OK();
    case Fate::kPass: break;
  }
  return inner_->Reply(to, std::move(frames));
}

void FaultInjectingTransport::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    stop_ = true;
    due_.clear();
    cv_.notify_all();
  }
  if (delay_thread_.joinable()) delay_thread_.join();
  inner_->Shutdown();
}

void FaultInjectingTransport::RunDelays() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    if (due_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const auto when = due_.begin()->first;
    if (std::chrono::steady_clock::now() < when) {
      cv_.wait_until(lock, when);
      continue;
    }
    auto send = std::move(due_.begin()->second);
    due_.erase(due_.begin());
    lock.unlock();
    send();
    lock.lock();
  }
}

}  // namespace strata
