// progress.cc: Progress.
#include "trainer/progress.h"

#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace strata {

std::string ForRank(std::string path, int rank) {
  for (size_t at; (at = path.find("{rank}")) != std::string::npos;) path.replace(at, 6, std::to_string(rank));
  return path;
}

Progress::Progress(const TrainJob& job, int rank, int trainers, bool launched)
    : job_(job), rank_(rank), trainers_(trainers), launched_(launched) {}

Status Progress::Open() {
  std::string path = job_.train.metrics_path;
  if (path.empty() || (rank_ != 0 && path.find("{rank}") == std::string::npos)) return Status::OK();
  path = ForRank(path, rank_);
  metrics_.open(path, std::ios::app);
  if (!metrics_) return Status::IOError("cannot open metrics file " + path);
  return Status::OK();
}

void Progress::Step(int64_t step, double loss, double lr, double grad_norm, double step_seconds,
                    double elapsed) {
  const TrainOptions& to = job_.train;
  const int64_t samples = to.batch_size * to.micro_batches;
  const int64_t tokens = job_.model.kind == ModelOptions::Kind::kGpt ? samples * job_.model.context : 0;
  const double sps = samples / step_seconds;
  const double eta = step_seconds * static_cast<double>(to.steps - step);
  nlohmann::json j = {{"step", step},          {"loss", loss},
                      {"lr", lr},              {"grad_norm", grad_norm},
                      {"samples_per_s", sps},  {"elapsed_s", elapsed}};
  if (tokens) j["tokens_per_s"] = tokens / step_seconds;
  if (launched_) {
    // strata-launch folds every trainer's progress into one line.
    nlohmann::json p = {{"rank", rank_}, {"step", step}, {"steps", to.steps}, {"loss", loss},
                        {"samples_per_s", sps / trainers_}, {"eta_s", eta}};
    std::printf("@progress %s\n", p.dump().c_str());
    std::fflush(stdout);
  } else if (to.progress && rank_ == 0) {
    const int e = static_cast<int>(eta);
    std::string rate = tokens ? std::to_string(static_cast<int64_t>(tokens / step_seconds)) + " tok/s"
                              : std::to_string(static_cast<int64_t>(sps)) + " samples/s";
    std::fprintf(stderr, "%sstep %lld/%lld | loss %.5f | lr %.2e | %s | ETA %02d:%02d:%02d%s",
                 isatty(STDERR_FILENO) ? "\r" : "", static_cast<long long>(step),
                 static_cast<long long>(to.steps), loss, lr, rate.c_str(), e / 3600, e / 60 % 60,
                 e % 60, isatty(STDERR_FILENO) ? "   " : "\n");
    std::fflush(stderr);
  }
  if (registry_) {
    using T = MetricsRegistry::Type;
    registry_->Set("strata_trainer_step", "steps done", T::kGauge, static_cast<double>(step));
    registry_->Set("strata_trainer_steps", "steps the job runs (train.steps)", T::kGauge, static_cast<double>(to.steps));
    registry_->Set("strata_trainer_loss", "training loss at the last reported step", T::kGauge, loss);
    registry_->Set("strata_trainer_learning_rate", "learning rate at the last reported step", T::kGauge, lr);
    registry_->Set("strata_trainer_grad_norm", "global gradient norm at the last reported step", T::kGauge, grad_norm);
    registry_->Set("strata_trainer_step_seconds", "mean step time over the last train.log_every steps", T::kGauge,
                  step_seconds);
    registry_->Set("strata_trainer_samples_per_second", "this trainer's share of the job's samples per second",
                  T::kGauge, sps / trainers_);
    registry_->SetHistogram("strata_trainer_step_duration_seconds",
                            "seconds of each training step (forward, backward, communication, optimizer)",
                            step_time_.Read());
  }
  Metrics(j.dump());
}

void Progress::Metrics(const std::string& json_line) {
  if (json_line.find("\"eval_loss\"") != std::string::npos) {
    auto j = nlohmann::json::parse(json_line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      evals_.push_back({j.value("step", int64_t{0}), j.value("eval_loss", 0.0), j.value("auc", -1.0)});
      if (registry_) {
        using T = MetricsRegistry::Type;
        registry_->Set("strata_trainer_eval_loss", "loss on the held-out set at the last evaluation", T::kGauge,
                      evals_.back().loss);
        if (evals_.back().auc >= 0) {
          registry_->Set("strata_trainer_auc", "AUC on the held-out set at the last evaluation (ctr)", T::kGauge,
                        evals_.back().auc);
        }
      }
    }
  }
  if (registry_ && json_line.find("\"grad_sync\"") != std::string::npos) {
    auto j = nlohmann::json::parse(json_line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j["grad_sync"].is_object()) {
      using T = MetricsRegistry::Type;
      registry_->Set("strata_trainer_comm_seconds", "gradient collectives' seconds over the run (at its end)",
                    T::kGauge, j["grad_sync"].value("comm_seconds", 0.0));
      registry_->Set("strata_trainer_comm_exposed_seconds",
                    "the part of them compute did not hide (at the run's end)", T::kGauge,
                    j["grad_sync"].value("exposed_seconds", 0.0));
    }
  }
  if (metrics_.is_open()) {
    metrics_ << json_line << "\n";
    metrics_.flush();
  }
}

void Progress::CheckpointTime(double seconds) {
  checkpoint_time_.Observe(seconds);
  if (registry_) {
    registry_->SetHistogram("strata_trainer_checkpoint_duration_seconds",
                            "seconds of each checkpoint this trainer took part in (train.checkpoint_every)",
                            checkpoint_time_.Read());
  }
}

void Progress::Done() {
  if (job_.train.progress && isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
}

}  // namespace strata
