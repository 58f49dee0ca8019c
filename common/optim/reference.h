// reference.h: the double-precision reference of the optimizer kernels (kernels.h): the same
// formulas, every intermediate and the bias correction in double, each state rounded to float
// once when stored. Plain loops, one thread; the tests compare every kernel path against it.
#pragma once

#include "common/optim/kernels.h"

namespace strata::optim {

void AdamReference(const AdamHyper& h, const AdamArrays& a);
void SgdReference(const SgdHyper& h, const SgdArrays& a);

}  // namespace strata::optim
