// source_name.h: SourceName, how logs name where a message came from: "peer N" for a link this
// node connected, "connection 0a1b2c3d4e" (the ROUTER's routing id, in hex) for a requester. It
// is also the key LogLimiter counts a peer's events under.
#pragma once

#include <string>

#include "common/transport.h"

namespace strata {

inline std::string SourceName(const Source& source) {
  if (source.from_peer()) return "peer " + std::to_string(source.peer);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name = "connection ";
  for (char c : source.route) {
    const auto b = static_cast<unsigned char>(c);
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  return name;
}

}  // namespace strata
