// module.cc: ParameterRegistry, Context and the Layer recompute wrapper.
#include "trainer/nn/module.h"

#include <vector>

#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"

namespace strata::nn {

Parameter& ParameterRegistry::Create(const std::string& name, Shape shape, Init init,
                                     bool weight_decay) {
  STRATA_CHECK(!by_name_.contains(name)) << "parameter " << name << " created twice";
  auto p = std::make_unique<Parameter>();
  p->name = name;
  p->weight_decay = weight_decay;
  const ops::Exec cpu = ops::Exec::Cpu();
  Tensor host = ops::NewTensor(cpu, shape);
  rng::Stream stream(rng::Derive(seed_, name.c_str()));
  float* v = host.data_as<float>();
  for (int64_t i = 0; i < host.numel(); ++i) {
    switch (init.kind) {
      case Init::Kind::kZeros: v[i] = 0.0f; break;
      case Init::Kind::kOnes: v[i] = 1.0f; break;
      case Init::Kind::kNormal: v[i] = init.scale * static_cast<float>(stream.Normal()); break;
      case Init::Kind::kUniform:
        v[i] = init.scale * static_cast<float>(2.0 * stream.Uniform() - 1.0);
        break;
    }
  }
  if (exec_.is_cuda()) {
    p->value = ops::NewTensor(exec_, shape);
    STRATA_CHECK_OK(p->value.CopyFrom(host));
  } else {
    p->value = host;
  }
  p->grad = ops::NewZeros(exec_, shape);
  Parameter& ref = *p;
  by_name_.emplace(name, p.get());
  params_.push_back(std::move(p));
  return ref;
}

Parameter* ParameterRegistry::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

void ParameterRegistry::ZeroGrad() {
  for (auto& p : params_) ops::Fill(exec_, p->grad, 0.0f);
}

int64_t ParameterRegistry::NumElements() const {
  int64_t n = 0;
  for (const auto& p : params_) n += p->value.numel();
  return n;
}

void Context::Save(const void* owner, std::string_view key, Tensor t) {
  saved_[{owner, std::string(key)}] = std::move(t);
}

Tensor Context::Get(const void* owner, std::string_view key) const {
  auto it = saved_.find({owner, std::string(key)});
  STRATA_CHECK(it != saved_.end()) << "nothing saved under '" << key
                                   << "' (backward without forward on this context?)";
  return it->second;
}

int64_t Context::saved_bytes() const {
  int64_t n = 0;
  for (const auto& [key, t] : saved_) n += static_cast<int64_t>(t.nbytes());
  return n;
}

Tensor Layer::Forward(const Tensor& x, Context& ctx) {
  if (!recompute_) return DoForward(x, ctx);
  Context scratch(ctx.exec(), ctx.training(), ctx.seed());
  Tensor y = DoForward(x, scratch);
  ctx.Save(this, "recompute.input", x);
  return y;
}

Tensor Layer::Backward(const Tensor& dy, Context& ctx) {
  if (!recompute_) return DoBackward(dy, ctx);
  Context scratch(ctx.exec(), ctx.training(), ctx.seed());
  DoForward(ctx.Get(this, "recompute.input"), scratch);
  return DoBackward(dy, scratch);
}

}  // namespace strata::nn
