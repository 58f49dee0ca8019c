// unit_costs.h: MeasureUnitCosts, the forward + backward time of each of a model's units on one
// micro-batch, for parallel.partition: cost (balanced measured time rather than parameter
// counts: a block's attention grows with the context, an embedding's parameters cost little).
#pragma once

#include <vector>

#include "common/status.h"
#include "trainer/data.h"
#include "trainer/models/model.h"

namespace strata {

// Builds each unit alone (one at a time, so the whole model never has to fit), runs `reps`
// forward + backward passes of `sample` (unit 0 takes the batch, later units a random input of
// the shape their predecessor makes; the last unit includes the loss) and returns the median
// seconds per unit.
Result<std::vector<double>> MeasureUnitCosts(const ModelOptions& options, const ops::Exec& exec,
                                             const Batch& sample, int reps = 3);

}  // namespace strata
