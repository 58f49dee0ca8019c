// metrics.cc: MetricsRegistry.
#include "common/metrics.h"

#include <cmath>
#include <cstdio>

namespace strata {

void MetricsRegistry::Set(const std::string& name, const std::string& help, Type type, double value,
                          const std::string& labels) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = families_.try_emplace(name);
  if (fresh) {
    it->second.help = help;
    it->second.type = type;
  }
  it->second.series[labels] = value;
}

std::string MetricsRegistry::Text() const {
  std::lock_guard lock(mu_);
  std::string out;
  char number[64];
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + (f.type == Type::kCounter ? " counter\n" : " gauge\n");
    for (const auto& [labels, v] : f.series) {
      if (std::isnan(v)) {
        std::snprintf(number, sizeof(number), "NaN");
      } else {
        std::snprintf(number, sizeof(number), "%.17g", v);
      }
      out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number + "\n";
    }
  }
  return out;
}

std::string MetricLabel(const std::string& key, const std::string& value) {
  std::string out = key + "=\"";
  for (char c : value) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace strata
