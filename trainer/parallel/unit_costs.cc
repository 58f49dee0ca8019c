// unit_costs.cc: MeasureUnitCosts.
#include "trainer/parallel/unit_costs.h"

#include <algorithm>
#include <chrono>

#include "trainer/device.h"
#include "trainer/ops/ops.h"

namespace strata {

Result<std::vector<double>> MeasureUnitCosts(const ModelOptions& options, const ops::Exec& exec,
                                             const Batch& sample, int reps) {
  STRATA_ASSIGN_OR_RETURN(std::vector<UnitSpec> units, ModelUnits(options));
  std::vector<double> costs;
  for (size_t i = 0; i < units.size(); ++i) {
    UnitSelection one(units.size(), false);
    one[i] = true;
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Model> m, CreateModel(options, exec, one));
    const Batch b = m->ToDevice(sample);
    const UnitRange r{static_cast<int>(i), static_cast<int>(i) + 1};
    const bool last = i + 1 == units.size();
    Tensor x;
    if (i > 0) {
      x = ops::NewTensor(exec, m->OutputShape(static_cast<int>(i) - 1, b));
      ops::Fill(exec, x, 0.01f);
    }
    std::vector<double> times;
    for (int rep = 0; rep < reps + 1; ++rep) {  // the first is a warm-up
      nn::Context ctx(exec, true, 1);
      const auto start = std::chrono::steady_clock::now();
      Tensor out = m->ForwardUnits(r, b, x, ctx);
      Tensor dy;
      if (last) {
        m->loss_head().Forward(out, b.target, ctx);
        dy = m->loss_head().Backward(ctx);
      } else {
        dy = ops::NewTensor(exec, out.shape());
        ops::Fill(exec, dy, 0.01f);
      }
      m->BackwardUnits(r, dy, ctx, BackwardPart::kFull);
      SynchronizeDevice(exec);
      if (rep > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    costs.push_back(times[times.size() / 2]);
  }
  return costs;
}

}  // namespace strata
