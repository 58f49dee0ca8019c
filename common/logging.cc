// logging.cc: the default logger's sink and pattern.
#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <mutex>

namespace strata {
namespace {

std::string Pattern(std::string_view role, int rank) {
  std::string id(role);
  id += ':';
  id += rank >= 0 ? std::to_string(rank) : std::string("?");
  return "[%Y-%m-%d %H:%M:%S.%e] [" + id + "] [%^%l%$] %v";
}

}  // namespace

bool IsValidLogLevel(std::string_view level) {
  if (level == "off") return true;
  return spdlog::level::from_str(std::string(level)) != spdlog::level::off;
}

bool InitLogging(const LogOptions& options) {
  static std::once_flag once;
  std::call_once(once, [] {
    auto logger = spdlog::stderr_color_mt("strata");
    spdlog::set_default_logger(logger);
  });
  SetLogIdentity(options.role, options.rank);
  if (!IsValidLogLevel(options.level)) return false;
  spdlog::set_level(spdlog::level::from_str(options.level));
  spdlog::flush_on(spdlog::level::warn);
  return true;
}

void SetLogIdentity(std::string_view role, int rank) { spdlog::set_pattern(Pattern(role, rank)); }

}  // namespace strata
