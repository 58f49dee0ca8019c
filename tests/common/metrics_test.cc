// metrics_test.cc: MetricsRegistry's exposition text and label escaping.
#include "common/metrics.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace strata
