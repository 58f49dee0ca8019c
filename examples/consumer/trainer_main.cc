// trainer_main.cc: a program outside strata's tree that trains through the installed training
// library (strata::trainer): a small MLP regression job run in this process, its step times
// read back from the /metrics registry the trainer publishes to (common/metrics.h). It checks
// that every step ran, the loss fell, and the step-time histogram counted every step.
#include <cmath>
#include <cstdio>
#include <string>

#include "common/metrics.h"
#include "trainer/trainer.h"

int main() {
  using namespace strata;
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kMlp;
  job.model.mlp_in = 16;
  job.model.mlp_hidden = 64;
  job.model.mlp_out = 8;
  job.data.kind = DataOptions::Kind::kRegression;
  job.data.latent_dim = 4;
  job.data.eval_samples = 256;
  job.optimizer.lr = 0.003;
  job.train.steps = 40;
  job.train.batch_size = 64;
  job.train.log_every = 10;
  job.train.progress = false;
  job.train.metrics_path = "";
  auto trainer = Trainer::Create(job);
  if (!trainer.ok()) {
    std::fprintf(stderr, "trainer consumer: creating the trainer: %s\n", trainer.status().ToString().c_str());
    return 1;
  }
  MetricsRegistry metrics;
  (*trainer)->SetMetrics(&metrics);
  auto summary = (*trainer)->Run();
  if (!summary.ok()) {
    std::fprintf(stderr, "trainer consumer: training: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  const auto& losses = summary->losses;
  if (losses.size() != static_cast<size_t>(job.train.steps)) {
    std::fprintf(stderr, "trainer consumer: %zu losses for %lld steps\n", losses.size(),
                 static_cast<long long>(job.train.steps));
    return 1;
  }
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += losses[i];
    last += losses[losses.size() - 1 - i];
  }
  if (!std::isfinite(last) || !(last < first)) {
    std::fprintf(stderr, "trainer consumer: the loss did not fall: first 5 steps %g, last 5 %g\n", first / 5, last / 5);
    return 1;
  }
  const std::string text = metrics.Text();
  const std::string count_line = "\nstrata_trainer_step_duration_seconds_count " + std::to_string(job.train.steps) + "\n";
  if (text.find(count_line) == std::string::npos) {
    std::fprintf(stderr, "trainer consumer: the metrics lack%s:\n%s", count_line.c_str(), text.c_str());
    return 1;
  }
  std::printf("trainer consumer: %zu steps through strata::trainer, loss %.4g -> %.4g, %lld step times: ok\n",
              losses.size(), first / 5, last / 5, static_cast<long long>(job.train.steps));
  return 0;
}
