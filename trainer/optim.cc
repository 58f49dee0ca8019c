// optim.cc: SGD, AdamW, clipping and schedules.
#include "trainer/optim.h"

#include <cmath>

#include "trainer/ops/ops.h"

namespace strata {

void Bind(config::Binder& b, OptimizerOptions& o) {
  b.Enum("kind", o.kind, {{"sgd", OptimizerOptions::Kind::kSgd}, {"adamw", OptimizerOptions::Kind::kAdamW}},
         "update rule");
  b.Field("lr", o.lr, "peak learning rate").Range(0.0, 10.0);
  b.Field("momentum", o.momentum, "SGD momentum (0: plain SGD)").Range(0.0, 1.0);
  b.Field("nesterov", o.nesterov, "SGD: Nesterov momentum");
  b.Field("beta1", o.beta1, "AdamW first-moment decay").Range(0.0, 1.0);
  b.Field("beta2", o.beta2, "AdamW second-moment decay (0.95 steadier for transformers)")
      .Range(0.0, 1.0);
  b.Field("eps", o.eps, "AdamW denominator epsilon").Range(0.0, 1.0);
  b.Field("weight_decay", o.weight_decay,
          "decoupled (AdamW) or L2 (SGD), default 0 (PyTorch's AdamW: 0.01); only linear layers' weight "
          "matrices decay, never biases, norms or embedding tables")
      .Range(0.0, 1.0);
  b.Field("clip_norm", o.clip_norm, "clip the global gradient norm to this; 0 disables")
      .Range(0.0, 1e9);
  b.Enum("schedule", o.schedule,
         {{"constant", OptimizerOptions::Schedule::kConstant},
          {"cosine", OptimizerOptions::Schedule::kCosine}},
         "learning-rate schedule after warm-up");
  b.Field("warmup_steps", o.warmup_steps, "linear warm-up steps").Range(0, INT64_MAX);
  b.Field("min_lr_ratio", o.min_lr_ratio, "cosine: final lr as a fraction of lr").Range(0.0, 1.0);
}

double LearningRate(const OptimizerOptions& o, int64_t step, int64_t total_steps) {
  if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / o.warmup_steps;
  if (o.schedule == OptimizerOptions::Schedule::kConstant) return o.lr;
  const double span = std::max<int64_t>(1, total_steps - o.warmup_steps - 1);
  const double progress = std::min(1.0, (step - o.warmup_steps) / span);
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return o.lr * (o.min_lr_ratio + (1.0 - o.min_lr_ratio) * cosine);
}

double GradSquaredSum(nn::ParameterRegistry& reg) {
  double sq = 0;
  for (auto& p : reg.params()) {
    if (!p->remote) sq += ops::SumSquares(reg.exec(), p->grad);
  }
  return sq;
}

double GradSquaredSum(nn::ParameterRegistry& reg, bool split) {
  double sq = 0;
  for (auto& p : reg.params()) {
    if (!p->remote && p->shard.whole() != split) sq += ops::SumSquares(reg.exec(), p->grad);
  }
  return sq;
}

double GradNorm(nn::ParameterRegistry& reg) { return std::sqrt(GradSquaredSum(reg)); }

void ScaleGrads(nn::ParameterRegistry& reg, float scale) {
  for (auto& p : reg.params()) {
    if (!p->remote) ops::Scale(reg.exec(), p->grad, scale);
  }
}

double ClipGradNorm(nn::ParameterRegistry& reg, double max_norm) {
  const double norm = GradNorm(reg);
  if (max_norm > 0 && norm > max_norm) ScaleGrads(reg, static_cast<float>(max_norm / (norm + 1e-6)));
  return norm;
}

namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, nn::ParameterRegistry& reg) : o_(o), reg_(reg) {
    for (auto& p : reg.params()) {
      velocity_.push_back(p->remote ? Tensor() : ops::NewZeros(reg.exec(), p->value.shape()));
    }
  }
  void Step(double lr) override {
    ++step_;
    const auto& params = reg_.params();
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i]->remote) continue;
      const float wd = params[i]->weight_decay ? static_cast<float>(o_.weight_decay) : 0.0f;
      ops::SgdUpdate(reg_.exec(), params[i]->value, params[i]->grad, velocity_[i],
                     static_cast<float>(lr), static_cast<float>(o_.momentum), wd, o_.nesterov);
    }
  }
  std::vector<std::pair<std::string, Tensor>> State() override {
    std::vector<std::pair<std::string, Tensor>> s;
    for (size_t i = 0; i < velocity_.size(); ++i) {
      if (!velocity_[i].defined()) continue;
      s.emplace_back("sgd.v/" + reg_.params()[i]->name, velocity_[i]);
    }
    return s;
  }

 private:
  OptimizerOptions o_;
  nn::ParameterRegistry& reg_;
  std::vector<Tensor> velocity_;
};

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerOptions& o, nn::ParameterRegistry& reg) : o_(o), reg_(reg) {
    for (auto& p : reg.params()) {
      m_.push_back(p->remote ? Tensor() : ops::NewZeros(reg.exec(), p->value.shape()));
      v_.push_back(p->remote ? Tensor() : ops::NewZeros(reg.exec(), p->value.shape()));
    }
  }
  void Step(double lr) override {
    ++step_;
    const auto& params = reg_.params();
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i]->remote) continue;
      const float wd = params[i]->weight_decay ? static_cast<float>(o_.weight_decay) : 0.0f;
      ops::AdamWUpdate(reg_.exec(), params[i]->value, params[i]->grad, m_[i], v_[i],
                       static_cast<float>(lr), static_cast<float>(o_.beta1),
                       static_cast<float>(o_.beta2), static_cast<float>(o_.eps), wd, step_);
    }
  }
  std::vector<std::pair<std::string, Tensor>> State() override {
    std::vector<std::pair<std::string, Tensor>> s;
    for (size_t i = 0; i < m_.size(); ++i) {
      if (!m_[i].defined()) continue;
      s.emplace_back("adamw.m/" + reg_.params()[i]->name, m_[i]);
      s.emplace_back("adamw.v/" + reg_.params()[i]->name, v_[i]);
    }
    return s;
  }

 private:
  OptimizerOptions o_;
  nn::ParameterRegistry& reg_;
  std::vector<Tensor> m_, v_;
};

}  // namespace

std::unique_ptr<Optimizer> Optimizer::Create(const OptimizerOptions& o, nn::ParameterRegistry& reg) {
  if (o.kind == OptimizerOptions::Kind::kSgd) return std::make_unique<Sgd>(o, reg);
  return std::make_unique<AdamW>(o, reg);
}

}  // namespace strata
