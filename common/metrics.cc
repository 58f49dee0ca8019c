// metrics.cc: Histogram, MetricsRegistry.
#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace strata {
namespace {

std::vector<double> Sorted(std::vector<double> bounds) {
  std::erase_if(bounds, [](double b) { return std::isnan(b); });
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  return bounds;
}

// The shortest text that reads back as `v` ("0.0025", "60", "+Inf", "NaN").
std::string Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::general);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

std::string WithLe(const std::string& labels, const std::string& le) {
  return "{" + labels + (labels.empty() ? "" : ",") + "le=\"" + le + "\"}";
}

}  // namespace

std::vector<double> Histogram::SecondsBounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(Sorted(std::move(bounds))), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Read() const {
  Snapshot s;
  s.bounds = bounds_;
  s.counts.resize(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
    s.count += s.counts[i];
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

MetricsRegistry::Family& MetricsRegistry::FamilyLocked(const std::string& name, const std::string& help, Type type) {
  auto [it, fresh] = families_.try_emplace(name);
  if (fresh) {
    it->second.help = help;
    it->second.type = type;
  }
  return it->second;
}

void MetricsRegistry::Set(const std::string& name, const std::string& help, Type type, double value,
                          const std::string& labels) {
  std::lock_guard lock(mu_);
  FamilyLocked(name, help, type).series[labels] = value;
}

void MetricsRegistry::SetHistogram(const std::string& name, const std::string& help,
                                   const Histogram::Snapshot& value, const std::string& labels) {
  std::lock_guard lock(mu_);
  FamilyLocked(name, help, Type::kHistogram).histograms[labels] = value;
}

std::string MetricsRegistry::Text() const {
  std::lock_guard lock(mu_);
  std::string out;
  char number[64];
  for (const auto& [name, f] : families_) {
    static constexpr const char* kTypes[] = {" gauge\n", " counter\n", " histogram\n"};
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + kTypes[static_cast<int>(f.type)];
    for (const auto& [labels, v] : f.series) {
      if (std::isnan(v)) {
        std::snprintf(number, sizeof(number), "NaN");
      } else {
        std::snprintf(number, sizeof(number), "%.17g", v);
      }
      out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number + "\n";
    }
    for (const auto& [labels, h] : f.histograms) {
      uint64_t cumulative = 0;
      for (size_t i = 0; i < h.bounds.size() && i < h.counts.size(); ++i) {
        cumulative += h.counts[i];
        out += name + "_bucket" + WithLe(labels, Number(h.bounds[i])) + " " + std::to_string(cumulative) + "\n";
      }
      out += name + "_bucket" + WithLe(labels, "+Inf") + " " + std::to_string(h.count) + "\n";
      const std::string braces = labels.empty() ? "" : "{" + labels + "}";
      out += name + "_sum" + braces + " " + Number(h.sum) + "\n";
      out += name + "_count" + braces + " " + std::to_string(h.count) + "\n";
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
