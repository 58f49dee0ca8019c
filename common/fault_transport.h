// fault_transport.h: FaultInjectingTransport wraps any Transport and drops or delays a seeded
// random fraction of outgoing messages (FaultOptions), so tests can exercise timeouts, retries
// and failure detection through the real code path.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "common/transport.h"

namespace strata {

class FaultInjectingTransport final : public Transport {
 public:
  FaultInjectingTransport(std::unique_ptr<Transport> inner, const FaultOptions& options);
  ~FaultInjectingTransport() override;

  void SetReceiver(Receiver receiver) override { inner_->SetReceiver(std::move(receiver)); }
  Result<std::string> Bind(const std::string& endpoint) override { return inner_->Bind(endpoint); }
  Result<PeerId> Connect(const std::string& address) override { return inner_->Connect(address); }
  Status Send(PeerId peer, Frames frames) override;
  Status Reply(const Source& to, Frames frames) override;
  void Shutdown() override;

  uint64_t dropped() const { return dropped_; }
  uint64_t delayed() const { return delayed_; }

 private:
  enum class Fate { kPass, kDrop, kDelay };
  Fate Decide();
  void Later(std::function<void()> send);
  void RunDelays();

  std::unique_ptr<Transport> inner_;
  const FaultOptions options_;
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> delayed_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  std::mt19937_64 rng_;
  std::multimap<std::chrono::steady_clock::time_point, std::function<void()>> due_;
  bool stop_ = false;
  std::thread delay_thread_;
};

}  // namespace strata
