// net.h: the little plain-socket networking a cluster needs besides ZeroMQ: whether a tcp://
// endpoint can be reached at all (so an unreachable scheduler is an error naming its host and
// port, not a silent wait), and the address a node bound on every interface should advertise.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"

namespace strata {

using Millis = std::chrono::milliseconds;

// Tries to open a TCP connection to `endpoint` (tcp://host:port), resolving the host again on
// every try, until one succeeds or `timeout` passes. The error names the host and port and the
// last failure (a name that does not resolve, connection refused, no route). Endpoints that are
// not tcp:// are OK at once. Blocks up to `timeout` (plus one connect attempt, at most 1 s).
Status WaitReachable(const std::string& endpoint, Millis timeout);

// The address to register for a socket bound at `bound` (what ZeroMQ reports, e.g.
// tcp://0.0.0.0:41234): its host replaced by `advertise_host` when that is given, else by
// `hostname` when it bound every interface (0.0.0.0, *, ::); otherwise `bound` itself.
std::string AdvertisedAddress(const std::string& bound, const std::string& advertise_host,
                              const std::string& hostname);

// Whether a tcp:// endpoint names every interface (0.0.0.0, *, ::), which no peer can dial.
bool IsWildcardEndpoint(const std::string& endpoint);

}  // namespace strata
