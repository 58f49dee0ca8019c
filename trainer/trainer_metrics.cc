// trainer_metrics.cc: Trainer::SetMetrics (the trainer's /metrics figures come from Progress).
#include "trainer/trainer.h"

#include "trainer/progress.h"

namespace strata {

void Trainer::SetMetrics(MetricsRegistry* registry) { progress_->SetMetrics(registry); }

}  // namespace strata
