// metrics.h: MetricsRegistry, the values a process exposes on its Prometheus /metrics endpoint
// (cluster.metrics_port; docs/metrics.md names every metric), rendered in the text exposition
// format, and Histogram, a latency distribution over fixed buckets. Thread-safe: any thread may
// Set (or Observe) while another renders.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace strata {

// Counts of observations by fixed upper bounds (Prometheus `le`, inclusive), their sum and count.
// Observe is lock-free (relaxed atomics), so a Read beside running Observes may see a sum and
// bucket counts one observation apart. Not copyable: Read() gives a value.
class Histogram {
 public:
  struct Snapshot {
    std::vector<double> bounds;    // upper bounds, ascending; +Inf implied after the last
    std::vector<uint64_t> counts;  // per bucket (not cumulative): bounds.size() + 1, the last above every bound
    double sum = 0;
    uint64_t count = 0;
  };
  // Seconds, 100 us to 60 s: request, step, sync and checkpoint times.
  static std::vector<double> SecondsBounds();

  // `bounds` are sorted and deduplicated; NaN bounds are dropped.
  explicit Histogram(std::vector<double> bounds = SecondsBounds());
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  // Counts `value` in the first bucket whose bound is >= it (the +Inf bucket above all). NaN is
  // not counted.
  void Observe(double value);
  Snapshot Read() const;

 private:
  const std::vector<double> bounds_;
  const std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0};
};

class MetricsRegistry {
 public:
  enum class Type { kGauge, kCounter, kHistogram };

  // Sets `name{labels}` to `value`. `labels` is the inside of the braces, e.g. `table="emb"`
  // (empty: none). The first Set of a name fixes its help text and type.
  void Set(const std::string& name, const std::string& help, Type type, double value,
           const std::string& labels = "");
  // Sets the histogram series `name{labels}`: rendered as name_bucket{...,le="B"} (cumulative,
  // through le="+Inf"), name_sum and name_count. The first set of a name fixes its help text.
  void SetHistogram(const std::string& name, const std::string& help, const Histogram::Snapshot& value,
                    const std::string& labels = "");
  // The exposition text: "# HELP", "# TYPE" and one line per series, names in order.
  std::string Text() const;

 private:
  struct Family {
    std::string help;
    Type type = Type::kGauge;
    std::map<std::string, double> series;  // by labels
    std::map<std::string, Histogram::Snapshot> histograms;  // by labels
  };
  Family& FamilyLocked(const std::string& name, const std::string& help, Type type);

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// A label value with \, " and newlines escaped as the format requires.
std::string MetricLabel(const std::string& key, const std::string& value);

}  // namespace strata
