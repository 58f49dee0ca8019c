// connection_limit.cc: ConnectionLimit.
#include "common/connection_limit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

namespace strata {

void ConnectionLimit::Opened(int fd, const std::string& host) {
  Closed(fd);  // a descriptor reused before its close was seen: the old connection is gone
  if (host.empty()) return;
  host_of_fd_[fd] = host;
  ++open_[host];
}

void ConnectionLimit::Closed(int fd) {
  auto it = host_of_fd_.find(fd);
  if (it == host_of_fd_.end()) return;
  auto open = open_.find(it->second);
  if (open != open_.end() && --open->second <= 0) open_.erase(open);
  host_of_fd_.erase(it);
}

std::string ConnectionLimit::PeerHost(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&address);
    if (inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text)) == nullptr) return "";
  } else if (address.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&address);
    if (inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof(text)) == nullptr) return "";
  } else {
    return "";
  }
  return text;
}

bool ConnectionLimit::Admit(const std::string& host) {
  if (per_host_ <= 0 || host.empty() || Open(host) <= per_host_) return true;
  ++refused_;
  return false;
}

int ConnectionLimit::Open(const std::string& host) const {
  auto it = open_.find(host);
  return it == open_.end() ? 0 : it->second;
}

}  // namespace strata
