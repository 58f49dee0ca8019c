// inproc_transport.cc: InprocHub and InprocTransport.
#include "common/inproc_transport.h"

#include <atomic>
#include <cstdio>

#include "common/check.h"

namespace strata {
namespace {

constexpr char kScheme[] = "mem://";

std::string PrivateName() {
  static std::atomic<uint64_t> counter{0};
  return "\x01self-" + std::to_string(counter++);  // not a valid mem:// name, so no clash
}

}  // namespace

Status InprocHub::Register(const std::string& name, InprocTransport* t) {
  std::vector<std::pair<Source, Frames>> waiting;
  {
    std::lock_guard lock(mu_);
    if (!bound_.emplace(name, t).second) return Status::AlreadyExists("mem://" + name + " is bound");
    if (auto it = waiting_.find(name); it != waiting_.end()) {
      waiting = std::move(it->second);
      waiting_.erase(it);
    }
    for (auto& [source, frames] : waiting) t->Push(std::move(source), std::move(frames));
  }
  return Status::OK();
}

bool InprocHub::bound(const std::string& name) {
  std::lock_guard lock(mu_);
  return bound_.count(name) > 0;
}

void InprocHub::Unregister(const std::string& name, InprocTransport* t) {
  std::lock_guard lock(mu_);
  if (auto it = bound_.find(name); it != bound_.end() && it->second == t) bound_.erase(it);
}

void InprocHub::Deliver(const std::string& name, Source source, Frames frames) {
  std::lock_guard lock(mu_);  // held while pushing, so the target cannot unregister meanwhile
  if (auto it = bound_.find(name); it != bound_.end()) {
    it->second->Push(std::move(source), std::move(frames));
  } else if (name[0] != '\x01') {
    waiting_[name].emplace_back(std::move(source), std::move(frames));
  }
}

InprocTransport::InprocTransport(InprocHub* hub) : hub_(hub), self_(PrivateName()) {
  STRATA_CHECK_OK(hub_->Register(self_, this));
  thread_ = std::thread([this] { Run(); });
}

InprocTransport::~InprocTransport() { Shutdown(); }

void InprocTransport::SetReceiver(Receiver receiver) {
  std::lock_guard lock(mu_);
  receiver_ = std::move(receiver);
}

Result<std::string> InprocTransport::Bind(const std::string& endpoint) {
  STRATA_RETURN_IF_ERROR(ValidateEndpoint(endpoint));
  if (endpoint.rfind(kScheme, 0) != 0) return Status::InvalidArgument("not a mem:// endpoint: " + endpoint);
  const std::string name = endpoint.substr(sizeof(kScheme) - 1);
  STRATA_RETURN_IF_ERROR(hub_->Register(name, this));
  std::lock_guard lock(mu_);
  bound_names_.push_back(name);
  return endpoint;
}

Result<PeerId> InprocTransport::Connect(const std::string& address) {
  STRATA_RETURN_IF_ERROR(ValidateEndpoint(address));
  if (address.rfind(kScheme, 0) != 0) return Status::InvalidArgument("not a mem:// address: " + address);
  std::lock_guard lock(mu_);
  const std::string name = address.substr(sizeof(kScheme) - 1);
  for (PeerId id = 0; id < peers_.size(); ++id) {
    if (peers_[id] == name) return id;
  }
  peers_.push_back(name);
  return static_cast<PeerId>(peers_.size() - 1);
}

Status InprocTransport::Send(PeerId peer, Frames frames) {
  std::string name;
  {
    std::lock_guard lock(mu_);
    if (stop_) return Status::Cancelled("transport is shut down");
    if (peer >= peers_.size()) return Status::InvalidArgument("unknown peer " + std::to_string(peer));
    name = peers_[peer];
  }
  // The route tells the receiver where to send the reply: our private name and our PeerId.
  Source source;
  source.route = self_ + "/" + std::to_string(peer);
  hub_->Deliver(name, std::move(source), std::move(frames));
  return Status::OK();
}

Status InprocTransport::Reply(const Source& to, Frames frames) {
  if (to.from_peer()) return Send(to.peer, std::move(frames));
  {
    std::lock_guard lock(mu_);
    if (stop_) return Status::Cancelled("transport is shut down");
  }
  const size_t slash = to.route.rfind('/');
  if (slash == std::string::npos) return Status::InvalidArgument("malformed inproc route");
  Source source;
  source.peer = static_cast<PeerId>(std::stoul(to.route.substr(slash + 1)));
  hub_->Deliver(to.route.substr(0, slash), std::move(source), std::move(frames));
  return Status::OK();
}

void InprocTransport::Push(Source source, Frames frames) {
  std::lock_guard lock(mu_);
  if (stop_) return;
  inbox_.emplace_back(std::move(source), std::move(frames));
  cv_.notify_one();
}

void InprocTransport::Shutdown() {
  std::vector<std::string> names;
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    names.swap(bound_names_);
  }
  // Unregister before stopping so nothing is pushed into a dead inbox.
  for (const auto& n : names) hub_->Unregister(n, this);
  hub_->Unregister(self_, this);
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void InprocTransport::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !inbox_.empty(); });
    if (stop_) return;
    auto [source, frames] = std::move(inbox_.front());
    inbox_.pop_front();
    Receiver receiver = receiver_;
    lock.unlock();
    if (receiver) receiver(source, std::move(frames));
    lock.lock();
  }
}

}  // namespace strata
