// trainer_eval.cc: Trainer::Evaluate, the held-out set through the model (loss, and AUC for
// ctr), reported by the first replica.
#include <nlohmann/json.hpp>

#include "trainer/pipeline/executor.h"
#include "trainer/progress.h"
#include "trainer/ps_sync.h"
#include "trainer/trainer.h"
#include "trainer/zero3.h"

namespace strata {

Result<EvalMetrics> Trainer::Evaluate() {
  EvalMetrics m;
  // The first replica reports; under ZeRO-3 the others run the forwards too (each unit's
  // parameters are gathered from every replica), then report nothing. Under context
  // parallelism every cp rank of the replica runs them (ring attention), its first reports.
  // Elastic trainers are each replica 0 of their own plan: trainer 0 evaluates for all.
  const bool first = elastic_ ? rank_ == 0 : groups_.dp_rank == 0;
  const bool run = first || zero3_;
  const bool report = first && groups_.cp_rank == 0;
  if (!run) return m;
  std::vector<float> scores, labels, oracle;
  double weighted = 0;
  for (const Batch& held : eval_set_) {
    std::vector<Batch> one = {held};
    if (ps_) {
      // The servers hold the parameters: pull them (and this batch's rows) first.
      STRATA_RETURN_IF_ERROR(ps_->Prepare(one, step_, /*training=*/false).WithContext("evaluation"));
    }
    const Batch& b = one[0];
    Tensor out;
    STRATA_ASSIGN_OR_RETURN(const double loss, executor_->Forward(b, &out));
    weighted += loss * b.samples;
    m.samples += b.samples;
    if (job_.model.kind == ModelOptions::Kind::kCtr) {
      scores.insert(scores.end(), out.data_as<float>(), out.data_as<float>() + out.numel());
      labels.insert(labels.end(), b.target.data_as<float>(), b.target.data_as<float>() + b.samples);
      if (b.oracle.defined()) {
        oracle.insert(oracle.end(), b.oracle.data_as<float>(), b.oracle.data_as<float>() + b.samples);
      }
    }
  }
  // The last stage computed the loss; every rank of the pipeline learns it.
  if (groups_.pp) STRATA_RETURN_IF_ERROR(groups_.pp->AllReduceHost(&weighted, 1, ReduceOp::kSum).WithContext("evaluation loss"));
  // Each cp rank's loss is the mean over its (equal) share of every sequence's tokens.
  if (groups_.cp) STRATA_RETURN_IF_ERROR(groups_.cp->AllReduceHost(&weighted, 1, ReduceOp::kAvg).WithContext("evaluation loss over the context-parallel ranks"));
  if (!report) return EvalMetrics{};
  m.loss = m.samples ? weighted / m.samples : 0;
  nlohmann::json j = {{"step", step_}, {"eval_loss", m.loss}, {"eval_samples", m.samples}};
  if (unigram_entropy_ > 0) j["unigram_entropy"] = unigram_entropy_;
  if (!scores.empty()) {
    m.auc = Auc(scores, labels);
    j["auc"] = m.auc;
    if (oracle.size() == labels.size()) {
      m.oracle_auc = Auc(oracle, labels);
      j["oracle_auc"] = m.oracle_auc;
    }
  }
  progress_->Metrics(j.dump());
  return m;
}

}  // namespace strata
