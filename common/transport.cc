// transport.cc: endpoint validation and the Transport factory.
#include "common/transport.h"

#include <charconv>

#include "common/fault_transport.h"
#include "common/inproc_transport.h"
#include "common/zmq_transport.h"

namespace strata {

Status ValidateEndpoint(const std::string& e) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument("endpoint \"" + e + "\": " + why);
  };
  if (e.rfind("tcp://", 0) == 0) {
    const std::string rest = e.substr(6);
    const size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0) return bad("expected tcp://host:port");
    const std::string port = rest.substr(colon + 1);
    if (port == "*") return Status::OK();
    int value = -1;
    auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (ec != std::errc() || ptr != port.data() + port.size() || value < 0 || value > 65535) {
      return bad("port must be a number in [0, 65535]");
    }
    return Status::OK();
  }
  if (e.rfind("ipc://", 0) == 0) {
    if (e.size() == 6) return bad("expected ipc:///path");
    if (e.size() - 6 > 100) return bad("ipc path longer than 100 bytes (the socket path limit)");
    return Status::OK();
  }
  if (e.rfind("mem://", 0) == 0) {
    if (e.size() == 6) return bad("expected mem://name");
    return Status::OK();
  }
  return bad("scheme must be tcp://, ipc:// or mem://");
}

Result<std::unique_ptr<Transport>> MakeTransport(const std::string& endpoint,
                                                 const TransportOptions& options, InprocHub* hub) {
  STRATA_RETURN_IF_ERROR(ValidateEndpoint(endpoint));
  std::unique_ptr<Transport> t;
  if (endpoint.rfind("mem://", 0) == 0) {
    if (hub == nullptr) return Status::InvalidArgument("mem:// endpoints need an InprocHub");
    t = std::make_unique<InprocTransport>(hub);
  } else {
    t = std::make_unique<ZmqTransport>(options);
  }
  if (options.fault.enabled()) {
    t = std::make_unique<FaultInjectingTransport>(std::move(t), options.fault);
  }
  return t;
}

}  // namespace strata
