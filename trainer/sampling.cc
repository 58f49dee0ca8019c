// sampling.cc: PickToken.
#include "trainer/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace strata {

int64_t PickToken(const float* logits, int64_t vocab, const InferOptions& o, double draw) {
  if (o.greedy) return std::max_element(logits, logits + vocab) - logits;
  // Probabilities at the temperature, in double; candidates by falling probability (ties by
  // index, so the order is the same everywhere).
  const double mx = *std::max_element(logits, logits + vocab);
  std::vector<double> p(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) p[static_cast<size_t>(i)] = std::exp((logits[i] - mx) / o.temperature);
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return p[static_cast<size_t>(a)] > p[static_cast<size_t>(b)];
  });
  size_t keep = o.top_k > 0 ? std::min<size_t>(static_cast<size_t>(o.top_k), order.size()) : order.size();
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += p[static_cast<size_t>(order[i])];
  if (o.top_p < 1.0) {
    // The smallest prefix whose share of the kept mass reaches top_p.
    double run = 0;
    for (size_t i = 0; i < keep; ++i) {
      run += p[static_cast<size_t>(order[i])];
      if (run >= o.top_p * total) {
        keep = i + 1;
        total = run;
        break;
      }
    }
  }
  double target = draw * total, run = 0;
  for (size_t i = 0; i < keep; ++i) {
    run += p[static_cast<size_t>(order[i])];
    if (target < run) return order[i];
  }
  return order[keep - 1];
}

}  // namespace strata
