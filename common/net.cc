// net.cc: TCP reachability probes (getaddrinfo + non-blocking connect) and advertised addresses.
#include "common/net.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

namespace strata {
namespace {

struct HostPort {
  std::string host, port;
};

// tcp://host:port -> host (brackets of an IPv6 address removed) and port.
bool SplitTcp(const std::string& endpoint, HostPort* out) {
  if (endpoint.rfind("tcp://", 0) != 0) return false;
  const std::string rest = endpoint.substr(6);
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return false;
  out->host = rest.substr(0, colon);
  out->port = rest.substr(colon + 1);
  if (out->host.size() >= 2 && out->host.front() == '[' && out->host.back() == ']') {
    out->host = out->host.substr(1, out->host.size() - 2);
  }
  return true;
}

bool IsWildcardHost(const std::string& host) {
  return host == "*" || host == "0.0.0.0" || host == "::" || host == "[::]";
}

// One connect attempt to every address `host` resolves to; empty on success, else why not.
std::string TryConnect(const HostPort& hp, Millis attempt_timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &found); rc != 0) {
    return std::string("cannot resolve host \"") + hp.host + "\": " + gai_strerror(rc);
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> list(found, &freeaddrinfo);
  std::string why = "no address";
  for (addrinfo* a = list.get(); a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    int err = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int ready = poll(&p, 1, static_cast<int>(attempt_timeout.count()));
        socklen_t len = sizeof(err);
        if (ready == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (ready == 0) err = ETIMEDOUT;
        if (ready < 0) err = errno;
      }
    }
    close(fd);
    if (err == 0) return "";
    why = std::strerror(err);
  }
  return why;
}

}  // namespace

Status WaitReachable(const std::string& endpoint, Millis timeout) {
  HostPort hp;
  if (!SplitTcp(endpoint, &hp)) return Status::OK();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const std::string why = TryConnect(hp, Millis(1000));
    if (why.empty()) return Status::OK();
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Unavailable("cannot reach " + endpoint + " (host " + hp.host + ", port " +
                                 hp.port + "): " + why + "; gave up after " +
                                 std::to_string(timeout.count()) + " ms of retries");
    }
    std::this_thread::sleep_for(Millis(200));
  }
}

std::string AdvertisedAddress(const std::string& bound, const std::string& advertise_host,
                              const std::string& hostname) {
  HostPort hp;
  if (!SplitTcp(bound, &hp)) return bound;
  if (!advertise_host.empty()) return "tcp://" + advertise_host + ":" + hp.port;
  if (IsWildcardHost(hp.host)) return "tcp://" + hostname + ":" + hp.port;
  return bound;
}

bool IsWildcardEndpoint(const std::string& endpoint) {
  HostPort hp;
  return SplitTcp(endpoint, &hp) && IsWildcardHost(hp.host);
}

}  // namespace strata
