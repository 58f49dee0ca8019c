// inproc_transport.h: InprocTransport, a Transport between objects in one process (mem://name
// endpoints), for unit tests of multi-node logic without sockets (gloo's in-memory store
// pattern). An InprocHub is the shared "network"; each transport has its own delivery thread,
// so receivers run off the caller's thread exactly as with ZeroMQ. Messages sent to a name
// nobody has bound yet wait in the hub until someone binds it, as ZeroMQ queues them.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/transport.h"

namespace strata {

class InprocTransport;

// The registry of bound names. Outlives every transport that uses it. Thread-safe.
class InprocHub {
 public:
  InprocHub() = default;
  InprocHub(const InprocHub&) = delete;
  InprocHub& operator=(const InprocHub&) = delete;

  // True if some transport has bound mem://name.
  bool bound(const std::string& name);

 private:
  friend class InprocTransport;
  Status Register(const std::string& name, InprocTransport* t);
  void Unregister(const std::string& name, InprocTransport* t);
  void Deliver(const std::string& name, Source source, Frames frames);

  std::mutex mu_;
  std::map<std::string, InprocTransport*> bound_;
  std::map<std::string, std::vector<std::pair<Source, Frames>>> waiting_;
};

class InprocTransport final : public Transport {
 public:
  explicit InprocTransport(InprocHub* hub);
  ~InprocTransport() override;

  void SetReceiver(Receiver receiver) override;
  Result<std::string> Bind(const std::string& endpoint) override;
  Result<PeerId> Connect(const std::string& address) override;
  Status Send(PeerId peer, Frames frames) override;
  Status Reply(const Source& to, Frames frames) override;
  void Shutdown() override;

 private:
  friend class InprocHub;
  void Push(Source source, Frames frames);
  void Run();

  InprocHub* hub_;
  const std::string self_;  // a private name replies are delivered to

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<Source, Frames>> inbox_;
  std::vector<std::string> peers_;  // bound name by PeerId
  std::vector<std::string> bound_names_;
  Receiver receiver_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace strata
