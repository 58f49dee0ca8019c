// zmq_transport.cc: ZmqTransport.
#include "common/zmq_transport.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <zmq_addon.hpp>

#include "common/check.h"
#include "common/source_name.h"

namespace strata {
namespace {

// zmq_bind understands "*" for an ephemeral port; we accept the more familiar ":0".
std::string ZmqEndpoint(const std::string& endpoint) {
  if (endpoint.rfind("tcp://", 0) == 0 && endpoint.size() > 2 &&
      endpoint.compare(endpoint.size() - 2, 2, ":0") == 0) {
    return endpoint.substr(0, endpoint.size() - 1) + "*";
  }
  return endpoint;
}

zmq::message_t ToZmq(const Buffer& b) {
  if (b.size() < ZmqTransport::kZeroCopyMinBytes || !b.owner()) {
    return zmq::message_t(b.data(), b.size());
  }
  // The hint keeps the buffer's owner alive until ZeroMQ's I/O thread has written it.
  auto* hint = new std::shared_ptr<const void>(b.owner());
  return zmq::message_t(
      const_cast<std::byte*>(b.data()), b.size(),
      [](void*, void* h) { delete static_cast<std::shared_ptr<const void>*>(h); }, hint);
}

Buffer FromZmq(zmq::message_t&& msg) {
  // Move first: small messages live inside zmq_msg_t, so data() changes with the move.
  auto owned = std::make_shared<zmq::message_t>(std::move(msg));
  return Buffer(owned->data(), owned->size(), owned);
}

}  // namespace

ZmqTransport::ZmqTransport(const TransportOptions& options)
    : options_(options),
      context_(options.io_threads),
      limit_(options.max_connections_per_host) {
  if (options_.curve.enabled()) {
    for (const std::string& z85 : options_.curve.authorized) {
      std::string key(32, '\0');
      STRATA_CHECK(zmq_z85_decode(reinterpret_cast<uint8_t*>(key.data()), z85.c_str()) != nullptr)
          << "authorized key " << z85 << " was not checked when read";
      authorized_.insert(std::move(key));
    }
  }
  if (options_.curve.enabled() || options_.max_connections_per_host > 0) {
    // Bound before any socket of this context can receive a handshake; used by the I/O thread.
    zap_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::rep);
    zap_->set(zmq::sockopt::linger, 0);
    zap_->bind("inproc://zeromq.zap.01");
  }
  io_thread_ = std::thread([this] { Run(); });
}

ZmqTransport::~ZmqTransport() { Shutdown(); }

void ZmqTransport::SetReceiver(Receiver receiver) {
  std::lock_guard lock(mu_);
  receiver_ = std::move(receiver);
}

void ZmqTransport::ConfigureSocket(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, options_.send_hwm);
  socket.set(zmq::sockopt::rcvhwm, options_.recv_hwm);
  // Checked against each frame's header: a larger frame drops the connection unbuffered.
  socket.set(zmq::sockopt::maxmsgsize, MaxFrameBytes());
}

Status ZmqTransport::CheckFrameSizes(const Frames& frames) const {
  for (const Buffer& b : frames) {
    if (static_cast<int64_t>(b.size()) > MaxFrameBytes()) {
      return Status::InvalidArgument("a message frame of " + std::to_string(b.size()) + " bytes exceeds transport.max_message_mb (" +
                                     std::to_string(options_.max_message_mb) +
                                     " MiB), past which the receiver drops the connection; raise it in the job file");
    }
  }
  return Status::OK();
}

void ZmqTransport::DrainMonitor() {
  if (!monitor_) return;
  std::vector<zmq::message_t> event;
  for (;;) {
    event.clear();
    if (!zmq::recv_multipart(*monitor_, std::back_inserter(event), zmq::recv_flags::dontwait)) return;
    // libzmq's monitor event: a 6-byte frame (uint16 event, uint32 value: here the connection's
    // file descriptor), then the endpoint.
    if (event.empty() || event[0].size() < 6) continue;
    uint16_t kind = 0;
    uint32_t value = 0;
    std::memcpy(&kind, event[0].data(), sizeof(kind));
    std::memcpy(&value, static_cast<const char*>(event[0].data()) + 2, sizeof(value));
    const int fd = static_cast<int>(value);
    if (kind == ZMQ_EVENT_ACCEPTED) limit_.Opened(fd, ConnectionLimit::PeerHost(fd));
    if (kind == ZMQ_EVENT_DISCONNECTED) limit_.Closed(fd);
  }
}

void ZmqTransport::AnswerZap() {
  std::vector<zmq::message_t> request;
  if (!zmq::recv_multipart(*zap_, std::back_inserter(request), zmq::recv_flags::dontwait)) return;
  // The connection asking was accepted before its handshake began: its event is queued already.
  DrainMonitor();
  // version, request id, domain, address, identity, mechanism, credentials...
  const std::string host = request.size() >= 4 ? request[3].to_string() : std::string();
  const bool admitted = limit_.Admit(host);
  const bool curve = request.size() >= 7 && request[5].to_string_view() == "CURVE" &&
                     request[6].size() == 32;
  const bool ok = admitted && (options_.curve.enabled() ? curve && authorized_.contains(request[6].to_string()) : true);
  std::array<zmq::message_t, 6> reply;
  reply[0] = zmq::message_t(std::string_view("1.0"));
  if (request.size() >= 2) reply[1].copy(request[1]);
  reply[2] = zmq::message_t(std::string_view(ok ? "200" : "400"));
  reply[3] = zmq::message_t(std::string_view(ok ? "OK" : admitted ? "unknown client key" : "too many connections"));
  try {
    zmq::send_multipart(*zap_, reply);
  } catch (const zmq::error_t& e) {
    spdlog::warn("transport: cannot answer an authentication request: {}", e.what());
  }
  if (ok) return;
  if (!admitted) {
    if (const LogLimiter::Tick tick = crowded_.Count(host); tick.log) {
      spdlog::warn("transport: refused a connection from {}: it holds {} open, more than "
                   "transport.max_connections_per_host ({}); {} refused from it, {} since its last warning "
                   "({} from {} hosts in all)",
                   host, limit_.Open(host), limit_.per_host(), tick.total, tick.since, tick.all, tick.peers);
    }
    return;
  }
  const LogLimiter::Tick tick = refusals_.Count(host);
  if (!tick.log) return;
  std::string who = host.empty() ? "?" : host;
  std::string key = "no CURVE key";
  if (curve) {
    char z85[41];
    zmq_z85_encode(z85, static_cast<const uint8_t*>(request[6].data()), 32);
    key = std::string("key ") + z85;
  }
  spdlog::warn("transport: refused a connection from {} ({} not in cluster.curve.authorized_keys); "
               "{} refused from it, {} since its last warning ({} from {} hosts in all)",
               who, key, tick.total, tick.since, tick.all, tick.peers);
}

Result<std::string> ZmqTransport::Bind(const std::string& endpoint) {
  STRATA_RETURN_IF_ERROR(ValidateEndpoint(endpoint));
  auto socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::router);
  ConfigureSocket(*socket);
  socket->set(zmq::sockopt::router_mandatory, 1);  // unknown routes fail instead of vanishing
  if (options_.curve.enabled()) {
    socket->set(zmq::sockopt::curve_server, 1);
    socket->set(zmq::sockopt::curve_secretkey, options_.curve.server.secret_key);
  }
  std::unique_ptr<zmq::socket_t> monitor;
  if (zap_) socket->set(zmq::sockopt::zap_domain, "strata");
  if (options_.max_connections_per_host > 0) {
    // Watched from before the bind, so that no accepted connection goes uncounted.
    char name[64];
    std::snprintf(name, sizeof(name), "inproc://strata-monitor-%p", static_cast<void*>(socket.get()));
    if (zmq_socket_monitor(socket->handle(), name, ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
      return Status::IOError(std::string("bind ") + endpoint + ": socket monitor: " + zmq_strerror(zmq_errno()));
    }
    monitor = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::pair);
    monitor->set(zmq::sockopt::linger, 0);
    monitor->connect(name);
  }
  std::string bound;
  try {
    socket->bind(ZmqEndpoint(endpoint));
    bound = socket->get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return Status::IOError("bind " + endpoint + ": " + e.what());
  }
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return Status::Cancelled("transport is shut down");
    if (new_router_ || router_.socket) return Status::FailedPrecondition("already bound");
    // Handing a socket to another thread is allowed with a full fence; the mutex is one.
    new_router_ = std::move(socket);
    new_monitor_ = std::move(monitor);
    wakeup_.Signal();
    constexpr std::string_view kIpc = "ipc://";
    if (bound.rfind(kIpc, 0) == 0 && bound.size() > kIpc.size() && bound[kIpc.size()] != '@') {
      ipc_file_ = bound.substr(kIpc.size());  // '@': an abstract socket, no file
    }
  }
  return bound;
}

Result<PeerId> ZmqTransport::Connect(const std::string& address) {
  STRATA_RETURN_IF_ERROR(ValidateEndpoint(address));
  std::lock_guard lock(mu_);
  if (shut_down_) return Status::Cancelled("transport is shut down");
  if (auto it = peer_by_address_.find(address); it != peer_by_address_.end()) return it->second;
  auto socket = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::dealer);
  ConfigureSocket(*socket);
  if (options_.curve.enabled()) {
    socket->set(zmq::sockopt::curve_serverkey, options_.curve.server.public_key);
    socket->set(zmq::sockopt::curve_publickey, options_.curve.client.public_key);
    socket->set(zmq::sockopt::curve_secretkey, options_.curve.client.secret_key);
  }
  try {
    socket->connect(address);
  } catch (const zmq::error_t& e) {
    return Status::IOError("connect " + address + ": " + e.what());
  }
  const PeerId id = next_peer_++;
  peer_by_address_[address] = id;
  new_links_.emplace_back(id, std::move(socket));
  wakeup_.Signal();
  return id;
}

Status ZmqTransport::Enqueue(Outgoing out) {
  bool small = true;
  for (const Buffer& f : out.frames) small = small && f.size() < kZeroCopyMinBytes;
  const size_t add = small ? BatchWriter::BytesOf(out.frames) : 0;
  const size_t max_bytes = std::min<size_t>(kMaxBatchBytes, static_cast<size_t>(MaxFrameBytes()));
  // A message of many small frames may not fit in a batch at all: it goes as it is, frame by
  // frame, each under max_message_mb (one batch frame of it could exceed that, and the peer's
  // ZeroMQ would drop the connection at its header).
  if (small && BatchWriter::kHeaderBytes + add > max_bytes) small = false;
  std::unique_lock lock(mu_);
  if (shut_down_) return Status::Cancelled("transport is shut down");
  if (out.peer != kNoPeer && out.peer >= next_peer_) {
    return Status::InvalidArgument("unknown peer " + std::to_string(out.peer));
  }
  const bool was_empty = outbox_.empty();
  // This destination's open batch, if any (few destinations are in flight at once).
  auto open = std::find_if(open_batches_.begin(), open_batches_.end(), [&](size_t i) {
    return outbox_[i].peer == out.peer && outbox_[i].route == out.route;
  });
  if (!small) {
    if (open != open_batches_.end()) open_batches_.erase(open);  // later messages queue after this one
    outbox_.push_back(std::move(out));
  } else {
    if (open != open_batches_.end()) {
      const BatchWriter& b = *outbox_[*open].batch;
      if (b.messages() == kMaxBatchMessages || b.bytes() + add > max_bytes) {
        open_batches_.erase(open);
        open = open_batches_.end();
      }
    }
    if (open == open_batches_.end()) {
      outbox_.push_back(Outgoing{out.peer, out.route, {}, std::make_unique<BatchWriter>()});
      open_batches_.push_back(outbox_.size() - 1);
      open = open_batches_.end() - 1;
    }
    // Copied here, so that the message's memory goes back to the allocator on this thread.
    outbox_[*open].batch->Append(out.frames);
  }
  lock.unlock();
  // One wake-up per batch: the I/O thread takes the whole outbox each time it wakes. A handler
  // replying on the I/O thread needs none: Run() takes the outbox before it polls again.
  // Signalled after unlocking, so that the woken thread does not block on the lock at once.
  if (was_empty && std::this_thread::get_id() != io_thread_.get_id()) wakeup_.Signal();
  return Status::OK();
}

Status ZmqTransport::Send(PeerId peer, Frames frames) {
  if (peer == kNoPeer) return Status::InvalidArgument("send to no peer");
  STRATA_RETURN_IF_ERROR(CheckFrameSizes(frames));
  return Enqueue(Outgoing{peer, {}, std::move(frames), nullptr});
}

Status ZmqTransport::Reply(const Source& to, Frames frames) {
  if (to.from_peer()) return Send(to.peer, std::move(frames));
  if (to.route.empty()) return Status::InvalidArgument("reply without a route");
  STRATA_RETURN_IF_ERROR(CheckFrameSizes(frames));
  return Enqueue(Outgoing{kNoPeer, to.route, std::move(frames), nullptr});
}

void ZmqTransport::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    stop_ = true;
    wakeup_.Signal();
  }
  if (io_thread_.joinable()) io_thread_.join();
  // Queued frames get `linger_ms` to leave (zmq_close lingers; the context close waits).
  const int linger = options_.linger_ms;
  for (Link* link : {&router_}) {
    if (link->socket) link->socket->set(zmq::sockopt::linger, linger);
  }
  for (Link& link : links_) {
    if (link.socket) link.socket->set(zmq::sockopt::linger, linger);
  }
  links_.clear();
  router_.socket.reset();
  new_links_.clear();
  new_router_.reset();
  monitor_.reset();
  new_monitor_.reset();
  zap_.reset();
  context_.close();
  if (!ipc_file_.empty()) ::unlink(ipc_file_.c_str());
}

size_t ZmqTransport::TakeCommands() {
  {
    std::lock_guard lock(mu_);
    taken_.swap(outbox_);
    open_batches_.clear();
    if (new_router_) router_.socket = std::move(new_router_);
    if (new_monitor_) monitor_ = std::move(new_monitor_);
    for (auto& [id, socket] : new_links_) {
      if (links_.size() <= id) links_.resize(id + 1);
      links_[id].socket = std::move(socket);
    }
    new_links_.clear();
  }
  if (taken_.empty()) return 0;
  size_t largest = 0;
  for (Outgoing& out : taken_) {
    if (out.batch) {
      largest = std::max(largest, out.batch->messages());
      out.frames.push_back(out.batch->Finish());
      out.batch.reset();
    }
    if (out.peer == kNoPeer) {
      if (!router_.socket) continue;  // a reply needs the socket its request came in on
      router_.backlog.push_back(std::move(out));
    } else {
      links_[out.peer].backlog.push_back(std::move(out));
    }
  }
  taken_.clear();
  if (router_.socket) Flush(router_);
  for (Link& link : links_) {
    if (link.socket) Flush(link);
  }
  return largest;
}

void ZmqTransport::WaitToCoalesce() {
  if (!streaming_ || options_.coalesce_us <= 0) return;
  const auto due = last_take_ + std::chrono::microseconds(options_.coalesce_us);
  if (std::chrono::steady_clock::now() < due) std::this_thread::sleep_until(due);
}

bool ZmqTransport::TrySend(zmq::socket_t& socket, Outgoing& out) {
  try {
    const size_t n = out.frames.size();
    if (out.peer == kNoPeer) {
      zmq::message_t route(out.route.data(), out.route.size());
      if (!socket.send(route, zmq::send_flags::dontwait | zmq::send_flags::sndmore)) return false;
    }
    for (size_t i = 0; i < n; ++i) {
      auto flags = zmq::send_flags::dontwait;
      if (i + 1 < n) flags = flags | zmq::send_flags::sndmore;
      // ZeroMQ delivers multipart messages atomically: only a first part can meet a full queue.
      if (!socket.send(ToZmq(out.frames[i]), flags)) return false;
    }
  } catch (const zmq::error_t& e) {
    // EHOSTUNREACH: the requester is gone. Nothing to retry; the peer's timeout covers it.
    spdlog::debug("transport: dropped a message: {}", e.what());
  }
  return true;
}

void ZmqTransport::Flush(Link& link) {
  while (!link.backlog.empty() && TrySend(*link.socket, link.backlog.front())) {
    link.backlog.pop_front();
  }
}

void ZmqTransport::DeliverBatch(const Source& source, zmq::message_t&& batch) {
  auto reader = BatchReader::Open(FromZmq(std::move(batch)), kMaxBatchMessages);
  if (!reader.ok()) {
    const std::string from = SourceName(source);
    if (const LogLimiter::Tick tick = bad_batches_.Count(from); tick.log) {
      spdlog::warn("transport: dropped a malformed batch from {}: {}; {} dropped from it, {} since its last "
                   "warning ({} from {} senders in all)",
                   from, reader.status().ToString(), tick.total, tick.since, tick.all, tick.peers);
    }
    return;
  }
  if (!receiver_) return;
  Frames frames;
  while (reader->Next(&frames)) receiver_(source, std::move(frames));
}

void ZmqTransport::Drain(zmq::socket_t& socket, PeerId peer) {
  // Bounded so one busy socket cannot starve the others.
  std::vector<zmq::message_t>& parts = parts_;  // reused: no allocation per message
  for (int n = 0; n < 256; ++n) {
    parts.clear();
    if (!zmq::recv_multipart(socket, std::back_inserter(parts), zmq::recv_flags::dontwait)) return;
    Source source;
    size_t first = 0;
    if (peer == kNoPeer) {
      if (parts.size() < 2) continue;  // a ROUTER always prepends the route
      source.route = parts[0].to_string();
      first = 1;
    } else {
      source.peer = peer;
    }
    if (parts.size() == first + 1 && IsBatch(Buffer(parts[first].data(), parts[first].size(), nullptr))) {
      DeliverBatch(source, std::move(parts[first]));
      continue;
    }
    Frames frames;
    frames.reserve(parts.size() - first);
    for (size_t i = first; i < parts.size(); ++i) frames.push_back(FromZmq(std::move(parts[i])));
    if (receiver_) receiver_(source, std::move(frames));
  }
}

void ZmqTransport::Run() {
  // WaitToCoalesce sleeps for tens of microseconds: without this, Linux may let such a sleep
  // run 50 us late (the default timer slack).
  if (options_.coalesce_us > 0) prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  std::vector<zmq::pollitem_t> items;
  std::vector<PeerId> item_peer;
  while (!stop_) {
    items.clear();
    item_peer.clear();
    items.push_back({nullptr, wakeup_.fd(), ZMQ_POLLIN, 0});
    item_peer.push_back(kNoPeer);
    if (zap_) items.push_back({zap_->handle(), 0, ZMQ_POLLIN, 0});
    const size_t monitor_item = items.size();
    if (monitor_) items.push_back({monitor_->handle(), 0, ZMQ_POLLIN, 0});
    const size_t first_link = items.size();
    item_peer.resize(first_link, kNoPeer);
    if (router_.socket) {
      short events = ZMQ_POLLIN | (router_.backlog.empty() ? 0 : ZMQ_POLLOUT);
      items.push_back({router_.socket->handle(), 0, events, 0});
      item_peer.push_back(kNoPeer);
    }
    for (PeerId id = 0; id < links_.size(); ++id) {
      if (!links_[id].socket) continue;
      short events = ZMQ_POLLIN | (links_[id].backlog.empty() ? 0 : ZMQ_POLLOUT);
      items.push_back({links_[id].socket->handle(), 0, events, 0});
      item_peer.push_back(id);
    }
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      spdlog::error("transport: poll failed: {}", e.what());
      break;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      wakeup_.Clear();  // before taking the outbox: a later signal is for later work
      if (stop_) break;
      WaitToCoalesce();
      last_take_ = std::chrono::steady_clock::now();
      streaming_ = TakeCommands() >= kStreamMessages;
    }
    if (monitor_ && (items[monitor_item].revents & ZMQ_POLLIN)) DrainMonitor();
    if (zap_ && (items[1].revents & ZMQ_POLLIN)) AnswerZap();
    for (size_t i = first_link; i < items.size(); ++i) {
      const PeerId peer = item_peer[i];
      Link& link = peer == kNoPeer ? router_ : links_[peer];
      if (items[i].revents & ZMQ_POLLOUT) Flush(link);
      if (items[i].revents & ZMQ_POLLIN) Drain(*link.socket, peer);
    }
    // Replies that handlers queued from this thread (they sent no wake-up).
    bool queued;
    {
      std::lock_guard lock(mu_);
      queued = !outbox_.empty();
    }
    if (queued) TakeCommands();
  }
  // What callers queued before Shutdown() (a last reply, say) still goes out; the sockets'
  // linger gives it time to leave.
  TakeCommands();
}

}  // namespace strata
