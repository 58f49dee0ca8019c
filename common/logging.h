// logging.h: spdlog set up once in main() so every line carries the process's role and rank:
//   [2026-11-21 10:00:00.123] [server:1] [info] listening on tcp://127.0.0.1:4242
#pragma once

#include <spdlog/spdlog.h>

#include <string>
#include <string_view>

namespace strata {

struct LogOptions {
  std::string role = "main";   // scheduler | server | trainer | launch | bench | test ...
  int rank = -1;               // -1 until the scheduler assigns one; printed as '?'
  std::string level = "info";  // trace | debug | info | warn | error | off
};

// Configures the default spdlog logger (stderr, colour when a terminal). Call from main() only.
// Returns false and leaves the level unchanged if `level` is not a known level name.
bool InitLogging(const LogOptions& options);

// Updates the role/rank shown on every subsequent line (the rank is known after registration).
void SetLogIdentity(std::string_view role, int rank);

// True if `level` names a spdlog level (used by config validation).
bool IsValidLogLevel(std::string_view level);

}  // namespace strata
