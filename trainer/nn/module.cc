// module.cc: ParameterRegistry, Context and the Layer wrapper (recompute, the split backward,
// gradient-ready reports).
#include "trainer/nn/module.h"

#include <vector>

#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"

namespace strata::nn {

Parameter& ParameterRegistry::Create(const std::string& name, Shape shape, InitSpec init,
                                     bool weight_decay, bool sparse) {
  return CreateShard(name, ShardSpec::Whole(std::move(shape)), init, weight_decay, sparse);
}

Parameter& ParameterRegistry::CreateShard(const std::string& name, const ShardSpec& shard,
                                          InitSpec init, bool weight_decay, bool sparse) {
  const Status valid = shard.Validate(name);
  STRATA_CHECK(valid.ok()) << valid.ToString();
  const Shape shape = shard.LocalShape();
  STRATA_CHECK(!by_name_.contains(name)) << "parameter " << name << " created twice";
  STRATA_CHECK(!sparse || shape.size() == 2) << "sparse parameter " << name << " must be 2-D";
  auto p = std::make_unique<Parameter>();
  p->name = name;
  p->weight_decay = weight_decay;
  p->sparse = sparse;
  p->init = init;
  if (!shard.whole()) p->init.shard = shard;
  p->shard = shard;
  p->init.seed = rng::Derive(seed_, name.c_str());
  const InitSpec& spec = p->init;
  // Initialised on the host: in the device's own memory on the CPU (its allocator may hold the
  // trainer to train.memory_limit_mb), staged and copied on CUDA.
  const ops::Exec host_exec = exec_.is_cuda() ? ops::Exec::Cpu() : exec_;
  Tensor host = ops::NewTensor(host_exec, shape);
  std::span<float> v(host.data_as<float>(), static_cast<size_t>(host.numel()));
  if (sparse) {
    // Row k of the table is keyed by its row in the unsplit table.
    STRATA_CHECK(shard.whole() || shard.axis == 0) << name << ": a sparse table splits by rows";
    const size_t dim = static_cast<size_t>(shape[1]);
    for (int64_t k = 0; k < shape[0]; ++k) InitValues(spec, static_cast<uint64_t>(k), v.subspan(k * dim, dim));
  } else {
    InitDenseValues(spec, 0, v);  // a shard's element i is the unsplit one's GlobalIndex(i)
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
  // A released gradient (ZeRO-2 between steps, ZeRO-3) is made zeroed when it is needed.
  for (auto& p : params_) {
    if (p->grad.defined()) ops::Fill(exec_, p->grad, 0.0f);
  }
}

int64_t ParameterRegistry::NumElements() const {
  int64_t n = 0;
  for (const auto& p : params_) n += *ShapeNumel(p->shard.LocalShape());
  return n;
}

void Context::Save(const void* owner, std::string_view key, Tensor t) {
  saved_[{owner, std::string(key)}] = Saved{std::move(t), false};
}

void Context::SaveActivation(const void* owner, std::string_view key, const Tensor& t) {
  const DType to = exec_.saved;
  if (!training_ || to == DType::kF32 || t.dtype() != DType::kF32 || !t.is_contiguous()) {
    return Save(owner, key, t);
  }
  Tensor narrow = ops::NewTensor(exec_, t.shape(), to);
  ops::Cast(exec_, t, narrow);
  saved_[{owner, std::string(key)}] = Saved{std::move(narrow), true};
}

Tensor Context::Get(const void* owner, std::string_view key) const {
  auto it = saved_.find({owner, std::string(key)});
  STRATA_CHECK(it != saved_.end()) << "nothing saved under '" << key
                                   << "' (backward without forward on this context?)";
  const Tensor& t = it->second.t;
  if (!it->second.narrowed) return t;
  Tensor wide = ops::NewTensor(exec_, t.shape());
  ops::Cast(exec_, t, wide);
  return wide;
}

void Context::Drop(const void* owner, std::string_view key) {
  saved_.erase({owner, std::string(key)});
}

void Context::Clear() {
  saved_.clear();
  scratch_.clear();
}

size_t Context::num_saved() const {
  size_t n = saved_.size();
  for (const auto& [owner, scratch] : scratch_) n += scratch->num_saved();
  return n;
}

int64_t Context::saved_bytes() const {
  int64_t n = 0;
  for (const auto& [key, s] : saved_) n += static_cast<int64_t>(s.t.nbytes());
  for (const auto& [owner, scratch] : scratch_) n += scratch->saved_bytes();
  return n;
}

Context& Context::NewScratch(const void* owner) {
  auto scratch = std::make_unique<Context>(exec_, training_, seed_);
  scratch->set_grad_ready(grad_ready_);
  auto [it, inserted] = scratch_.emplace(owner, std::move(scratch));
  STRATA_CHECK(inserted) << "a second scratch context for one layer (BackwardInput twice?)";
  return *it->second;
}

std::unique_ptr<Context> Context::TakeScratch(const void* owner) {
  auto it = scratch_.find(owner);
  STRATA_CHECK(it != scratch_.end()) << "no scratch context (BackwardWeight without BackwardInput?)";
  std::unique_ptr<Context> scratch = std::move(it->second);
  scratch_.erase(it);
  return scratch;
}

Tensor Layer::Forward(const Tensor& x, Context& ctx) {
  if (!recompute_) return DoForward(x, ctx);
  // What this forward saves is dropped on return: kept as it is, not cast to exec.saved for
  // nothing (the forward backward runs again saves as ctx does).
  ops::Exec ex = ctx.exec();
  ex.saved = DType::kF32;
  Context scratch(ex, ctx.training(), ctx.seed());
  Tensor y = DoForward(x, scratch);
  ctx.Save(this, "recompute.input", x);
  return y;
}

Tensor Layer::Backward(const Tensor& dy, Context& ctx) {
  Tensor dx;
  if (!recompute_) {
    dx = DoBackward(dy, ctx);
  } else {
    Context scratch(ctx.exec(), ctx.training(), ctx.seed());
    scratch.set_grad_ready(ctx.grad_ready());  // sublayers report through the scratch context
    DoForward(ctx.Get(this, "recompute.input"), scratch);
    dx = DoBackward(dy, scratch);
  }
  for (Parameter* p : owned_) ctx.GradReady(*p);
  return dx;
}

Tensor Layer::BackwardInput(const Tensor& dy, Context& ctx) {
  if (!recompute_) return DoBackwardInput(dy, ctx);
  // The scratch context stays in ctx for BackwardWeight, which needs what this forward saves;
  // recomputing again there would cost a second forward.
  Context& scratch = ctx.NewScratch(this);
  DoForward(ctx.Get(this, "recompute.input"), scratch);
  return DoBackwardInput(dy, scratch);
}

void Layer::BackwardWeight(Context& ctx) {
  if (!recompute_) {
    DoBackwardWeight(ctx);
  } else {
    std::unique_ptr<Context> scratch = ctx.TakeScratch(this);
    scratch->set_grad_ready(ctx.grad_ready());  // as set now: sublayers report through it
    DoBackwardWeight(*scratch);
  }  // the scratch context and what it saved are freed here
  for (Parameter* p : owned_) ctx.GradReady(*p);
}

}  // namespace strata::nn
