// message_parts.h: the parts of a Message that hold its Cap'n Proto body, outgoing and
// incoming. Internal to the codec (message.cc, message_decode.cc).
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstdint>
#include <optional>

#include "common/message.h"

namespace strata {

struct Message::Arena {
  // The first segment, zeroed as MallocMessageBuilder requires of one it is given (it zeroes
  // what it used again when destroyed).
  alignas(capnp::word) uint64_t words[kArenaWords] = {};
  capnp::MallocMessageBuilder builder{
      kj::arrayPtr(reinterpret_cast<capnp::word*>(words), kArenaWords)};
  // The root, found once: a builder (or reader) points at the root struct, which never moves,
  // and looking it up again costs a bounds-checked pointer read every time.
  wire::Envelope::Builder root = builder.initRoot<wire::Envelope>();
};

struct Message::Incoming {
  kj::ArrayPtr<const capnp::word> words;  // the body, in the envelope frame
  std::optional<capnp::FlatArrayMessageReader> reader;
  wire::Envelope::Reader root;  // of `reader`, once validated
};

}  // namespace strata
