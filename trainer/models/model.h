// model.h: Model, what strata-trainer trains: a parameter registry, an ordered list of units (the
// pieces a pipeline cuts into stages: embedding, blocks, head) and a loss head. The models are
// mlp (regression; the seeds' 1024 -> 4096 -> 1024), ctr (sparse embeddings + dense MLP + a
// wide per-id term, click prediction) and gpt (byte-level transformer LM).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainer/data.h"
#include "trainer/nn/layers.h"
#include "trainer/nn/loss.h"
#include "trainer/train_options.h"

namespace strata {

// One unit of a model, known before anything is built (a partition plans with these).
struct UnitSpec {
  std::string name;       // "gpt.block3"
  int64_t params = 0;     // parameters the unit owns
  int64_t out_width = 0;  // last dimension of its output (the leading ones are the batch's)
  // Sequence parallelism: the output holds 1/seq_parts of the sequence (dimension 1).
  int seq_parts = 1;
};

// Which units to build: all of them when empty, else unit i when i < size() and build[i].
using UnitSelection = std::vector<bool>;

// How a backward pass over units runs (see nn::Layer).
enum class BackwardPart { kFull, kInput };

// A model's units [first, last), and whether the loss follows the last one.
struct UnitRange {
  int first = 0;
  int last = 0;
  bool contains(int unit) const { return unit >= first && unit < last; }
};

// Called around every unit a forward or backward walk visits (a split backward's input half
// included; its weight half, BackwardWeightUnits, is not walked): ZeRO-3 gathers a unit's
// parameters before it computes and frees them after; ZeRO-1/2 wait for a unit's parameters'
// all-gather before its forward. On the training thread; a failed
// collective throws nn::CollectiveFailed (as tensor-parallel layers do).
class UnitHooks {
 public:
  enum class Pass { kForward, kBackward };
  virtual ~UnitHooks() = default;
  // `walk`: the units the forward (ascending) or backward (descending) walk visits.
  virtual void BeforeUnit(int unit, Pass pass, UnitRange walk, const nn::Context& ctx) = 0;
  virtual void AfterUnit(int unit, Pass pass, const nn::Context& ctx) = 0;
};

// Not thread-safe; several contexts (micro-batches) may be in flight, each used by one call at a
// time. A model may be built in part (a pipeline stage builds only its units): the parameters of
// the units it did not build do not exist in its registry.
class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  nn::ParameterRegistry& params() { return reg_; }
  const ops::Exec& exec() const { return reg_.exec(); }
  nn::LossHead& loss_head() { return head_; }

  const std::vector<UnitSpec>& units() const { return specs_; }
  int num_units() const { return static_cast<int>(specs_.size()); }
  bool built(int unit) const { return units_[unit] != nullptr; }
  // Whether the model may be cut into more than one stage (ctr's unit takes two inputs).
  virtual bool can_pipeline() const { return true; }

  // The batch on the model's device (the batch itself on the CPU).
  Batch ToDevice(const Batch& batch) const;
  // The leading (batch) dimensions every unit's output has for this batch: [N] for mlp and
  // ctr, [N, T] for gpt. A unit's output is these plus its out_width.
  virtual Shape LeadingShape(const Batch& batch) const = 0;
  Shape OutputShape(int unit, const Batch& batch) const;

  // What unit 0 takes from a batch on the device: ids (gpt) or features (mlp).
  virtual Tensor Input(const Batch& device_batch) const;
  // Forward through units [r.first, r.last) (all built). With r.first == 0 the input is the
  // batch (on the device) and `x` is unused; otherwise `x` is unit r.first's input.
  virtual Tensor ForwardUnits(UnitRange r, const Batch& device_batch, const Tensor& x,
                              nn::Context& ctx);
  // Backward through the same units in reverse, returning dL/d(input) (undefined when the
  // range starts at unit 0). kInput leaves the weight gradients to BackwardWeightUnits.
  virtual Tensor BackwardUnits(UnitRange r, const Tensor& dy, nn::Context& ctx, BackwardPart part);
  virtual void BackwardWeightUnits(UnitRange r, nn::Context& ctx);
  // Unit i's layer, for recompute switches and tests; aborts when it was not built.
  nn::Layer& unit(int i);
  // The parameters unit i created (none when it was not built), in creation order.
  std::vector<nn::Parameter*> UnitParameters(int i) const;
  // Hooks called around each unit's forward and backward (null: none). Not owned.
  void set_unit_hooks(UnitHooks* hooks) { hooks_ = hooks; }

  // Whole-model shorthands (every unit built): forward, the loss and backward (gradients
  // accumulate, scaled by grad_scale); returns the mean loss.
  double ForwardBackward(const Batch& batch, nn::Context& ctx, float grad_scale);
  // Forward and loss only. `output` (if non-null) receives the model output on the host:
  // mlp predictions [N, out], ctr logits [N], gpt logits [N, T, V].
  double Evaluate(const Batch& batch, nn::Context& ctx, Tensor* output);

 protected:
  Model(const ops::Exec& exec, uint64_t seed, nn::LossKind loss, nn::TpGroup tp = {})
      : reg_(exec, seed), head_(loss, tp) {}
  // Declares the next unit; builds it with `build` when `selection` asks for it.
  template <typename Build>
  void AddUnit(UnitSpec spec, const std::vector<bool>& selection, Build&& build) {
    const size_t i = specs_.size();
    const bool want = selection.empty() || (i < selection.size() && selection[i]);
    specs_.push_back(std::move(spec));
    const size_t first = reg_.params().size();
    units_.push_back(want ? build() : nullptr);
    unit_params_.emplace_back(first, reg_.params().size());
  }

  nn::ParameterRegistry reg_;
  nn::LossHead head_;
  std::vector<UnitSpec> specs_;
  std::vector<std::unique_ptr<nn::Layer>> units_;
  std::vector<std::pair<size_t, size_t>> unit_params_;  // by unit: [first, last) in reg_
  UnitHooks* hooks_ = nullptr;
};


// InvalidArgument naming the field when the options describe no valid model. With a split `tp`
// the model is this rank's tensor-parallel shard (gpt: Megatron's split of every block, the
// embedding and the head by vocabulary; mlp: fc1 by columns, fc2 by rows); its units' out_width
// is then what this rank's output holds (a slice between mlp's fc1 and fc2). With a split `cp`
// every sequence is split over the context-parallel ranks (gpt: positions and ring attention
// for this rank's chunks; mlp: per token, nothing to do).
Result<std::unique_ptr<Model>> CreateModel(const ModelOptions& options, const ops::Exec& exec,
                                           const UnitSelection& build = {}, nn::TpGroup tp = {}, nn::CpGroup cp = {});
// Checks that the model splits over `tp` tensor-parallel ranks, and its sequence too when
// `sequence_parallel` (InvalidArgument naming the fields otherwise).
Status CheckTensorParallel(const ModelOptions& options, int tp, bool sequence_parallel = false);
// The units a model of these options has (unsplit), without building anything.
Result<std::vector<UnitSpec>> ModelUnits(const ModelOptions& options);

// A copy of `t` on `exec`'s device (the tensor itself when already there).
Tensor ToDevice(const Tensor& t, const ops::Exec& exec);
Tensor ToHost(const Tensor& t);

}  // namespace strata
