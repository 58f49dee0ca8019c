// metrics_test.cc: MetricsRegistry's exposition text and label escaping; Histogram's buckets.
#include "common/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

namespace strata {
namespace {

TEST(MetricsRegistryTest, RendersHelpTypeAndSeries) {
  MetricsRegistry m;
  m.Set("strata_b_total", "b things", MetricsRegistry::Type::kCounter, 3);
  m.Set("strata_a", "a gauge", MetricsRegistry::Type::kGauge, 0.5, MetricLabel("table", "emb"));
  m.Set("strata_a", "ignored", MetricsRegistry::Type::kCounter, 2, MetricLabel("table", "wide"));
  m.Set("strata_a", "ignored", MetricsRegistry::Type::kGauge, 1.5, MetricLabel("table", "emb"));
  EXPECT_EQ(m.Text(),
            "# HELP strata_a a gauge\n# TYPE strata_a gauge\nstrata_a{table=\"emb\"} 1.5\nstrata_a{table=\"wide\"} 2\n"
            "# HELP strata_b_total b things\n# TYPE strata_b_total counter\nstrata_b_total 3\n");
}

TEST(MetricsRegistryTest, EscapesLabelValues) {
  EXPECT_EQ(MetricLabel("t", "a\"b\\c\nd"), "t=\"a\\\"b\\\\c\\nd\"");
}

TEST(HistogramTest, CountsEachValueInTheFirstBucketWhoseBoundHoldsIt) {
  Histogram h({1, 0.5, 2, 1});  // sorted and deduplicated: 0.5, 1, 2
  for (double v : {0.1, 0.5, 0.75, 1.0, 1.5, 3.0, 100.0, std::nan("")}) h.Observe(v);
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.bounds, (std::vector<double>{0.5, 1, 2}));
  // le is inclusive: 0.5 is in the 0.5 bucket, 1.0 in the 1 bucket; NaN is not counted.
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{2, 2, 1, 2}));
  EXPECT_EQ(s.count, 7u);
  EXPECT_DOUBLE_EQ(s.sum, 0.1 + 0.5 + 0.75 + 1.0 + 1.5 + 3.0 + 100.0);
}

TEST(HistogramTest, SecondsBoundsAscend) {
  const std::vector<double> b = Histogram::SecondsBounds();
  ASSERT_GE(b.size(), 10u);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
  EXPECT_EQ(Histogram().Read().counts.size(), b.size() + 1);
}

TEST(HistogramTest, ConcurrentObservesAreAllCounted) {
  Histogram h({1, 10});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 10000; ++i) h.Observe(t % 2 == 0 ? 0.5 : 5.0);
    });
  }
  for (auto& t : threads) t.join();
  const Histogram::Snapshot s = h.Read();
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{20000, 20000, 0}));
  EXPECT_DOUBLE_EQ(s.sum, 20000 * 0.5 + 20000 * 5.0);
}

TEST(MetricsRegistryTest, RendersHistogramsInTheTextFormat) {
  MetricsRegistry m;
  Histogram h({0.0025, 1});
  h.Observe(0.001);
  h.Observe(0.5);
  h.Observe(2);
  m.SetHistogram("strata_x_seconds", "x time", h.Read(), MetricLabel("op", "pull"));
  m.SetHistogram("strata_x_seconds", "ignored", Histogram({0.0025, 1}).Read());
  EXPECT_EQ(m.Text(),
            "# HELP strata_x_seconds x time\n# TYPE strata_x_seconds histogram\n"
            "strata_x_seconds_bucket{le=\"0.0025\"} 0\nstrata_x_seconds_bucket{le=\"1\"} 0\n"
            "strata_x_seconds_bucket{le=\"+Inf\"} 0\nstrata_x_seconds_sum 0\nstrata_x_seconds_count 0\n"
            "strata_x_seconds_bucket{op=\"pull\",le=\"0.0025\"} 1\nstrata_x_seconds_bucket{op=\"pull\",le=\"1\"} 2\n"
            "strata_x_seconds_bucket{op=\"pull\",le=\"+Inf\"} 3\nstrata_x_seconds_sum{op=\"pull\"} 2.501\n"
            "strata_x_seconds_count{op=\"pull\"} 3\n");
}

}  // namespace
}  // namespace strata
