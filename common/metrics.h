// metrics.h: MetricsRegistry, the values a process exposes on its Prometheus /metrics endpoint
// (cluster.metrics_port; docs/metrics.md names every metric), rendered in the text exposition
// format. Thread-safe: any thread may Set while another renders.
#pragma once

#include <map>
#include <mutex>
#include <string>

namespace strata {

class MetricsRegistry {
 public:
  enum class Type { kGauge, kCounter };

  // Sets `name{labels}` to `value`. `labels` is the inside of the braces, e.g. `table="emb"`
  // (empty: none). The first Set of a name fixes its help text and type.
  void Set(const std::string& name, const std::string& help, Type type, double value,
           const std::string& labels = "");
  // The exposition text: "# HELP", "# TYPE" and one line per series, names in order.
  std::string Text() const;

 private:
  struct Family {
    std::string help;
    Type type = Type::kGauge;
    std::map<std::string, double> series;  // by labels
  };
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// A label value with \, " and newlines escaped as the format requires.
std::string MetricLabel(const std::string& key, const std::string& value);

}  // namespace strata
