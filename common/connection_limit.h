// connection_limit.h: ConnectionLimit, the bound on how many connections one host may hold open
// to a process's bound socket (transport.max_connections_per_host). ZmqTransport watches its
// ROUTER with a ZeroMQ socket monitor: an accepted connection is counted against its peer's
// address (getpeername on the event's file descriptor), a disconnected one released; and it
// answers every handshake's authentication request (ZAP, RFC 27, which carries the peer's
// address) with a refusal while that host holds more than the bound, counting the connection
// being made. So a host that opens connection after connection gets each one past the bound
// closed by ZeroMQ at its handshake, while every other host connects as before. Connections that
// never greet are closed by ZeroMQ after its handshake interval (30 s) and hold a count until
// then. A plain value, used by the transport's I/O thread only.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

namespace strata {

class ConnectionLimit {
 public:
  // At most `per_host` connections from one host (0: no bound).
  explicit ConnectionLimit(int per_host) : per_host_(per_host) {}

  // A connection on file descriptor `fd` was accepted from `host` (an empty host, e.g. an ipc
  // peer, is not counted), or closed. A close of an fd never counted changes nothing.
  void Opened(int fd, const std::string& host);
  void Closed(int fd);
  // The peer address of a connected socket (an IPv4 or IPv6 address, as ZAP writes it), or ""
  // when it has none (not an inet socket, or closed already).
  static std::string PeerHost(int fd);

  // May a handshake from `host` go on? False while the host holds more than the bound open,
  // the connection asking counted. Counts the refusals.
  bool Admit(const std::string& host);
  int Open(const std::string& host) const;
  uint64_t refused() const { return refused_; }
  int per_host() const { return per_host_; }

 private:
  const int per_host_;
  std::unordered_map<int, std::string> host_of_fd_;
  std::unordered_map<std::string, int> open_;
  uint64_t refused_ = 0;
};

}  // namespace strata
