// trainer_elastic.cc: Trainer's part in an elastic job (cluster.elastic, docs/reliability.md
// "Elastic membership"): which jobs may be elastic, a joined trainer's start, and leaving on a
// stop signal.
#include <spdlog/spdlog.h>

#include "cluster/node.h"
#include "ps/client.h"
#include "trainer/elastic_split.h"
#include "trainer/trainer.h"

namespace strata {

Status Trainer::CheckElastic() const {
  // The job file's own checks (LoadJobConfig) refuse cluster.elastic outside ps mode; the
  // plan's are here.
  if (plan_.pp > 1 || plan_.tp > 1 || plan_.cp > 1) {
    return Status::InvalidArgument("cluster.elastic: trainers join and leave as data-parallel replicas; the plan " +
                                   plan_.ToString() + " splits the model (parallel.pp, parallel.tp and parallel.cp must be 1)");
  }
  return Status::OK();
}

Status Trainer::StartElastic() {
  if (!node_->options().join) return Status::OK();
  // A joined trainer reads the steps the split gives it from the first one nobody leased, with
  // the servers' current parameters (its first pull), and clocks from there: under SSP its
  // clock starts where the others are, not at 0.
  STRATA_ASSIGN_OR_RETURN(const int64_t first, elastic_->Join());
  step_ = first;
  data_->Seek(first * plan_.micro_batches);
  if (client_) client_->set_clock(first);
  spdlog::info("joined the running job as trainer {}: training from step {}", rank_, first + 1);
  return Status::OK();
}

Result<bool> Trainer::ElasticStep() {
  if (stop_check_) {
    Status s = stop_check_();
    // Trainer 0 evaluates and ends the job: stopping it stops the job, as without elasticity.
    if (!s.ok() && (s.code() != StatusCode::kCancelled || rank_ == 0)) {
      return s.WithContext("after step " + std::to_string(step_) + " of " + std::to_string(job_.train.steps));
    }
    if (!s.ok() && leave_at_ < 0) {
      STRATA_ASSIGN_OR_RETURN(leave_at_, elastic_->Leave());
      spdlog::info("{}: leaving the job; the steps up to {} were leased already and are trained first", s.message(),
                   leave_at_);
    }
  }
  STRATA_RETURN_IF_ERROR(elastic_->Ensure(step_));
  if (elastic_->Member(step_)) {
    // BSP: the servers apply this step's clock once every trainer of its split clocked it.
    if (client_ && job_.sync.consistency == Consistency::kBsp) client_->set_members(elastic_->Members(step_));
    return true;
  }
  if (leave_at_ >= 0) return false;
  return Status::Aborted("trainer " + std::to_string(rank_) + " is no longer in the data split at step " +
                         std::to_string(step_ + 1) +
                         " (it was declared dead meanwhile); start a new trainer with --join instead");
}

}  // namespace strata
