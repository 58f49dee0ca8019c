// ps_sync.h: PsSync, a trainer whose parameters the servers hold (sync.mode ps, hybrid and
// offload). Dense parameters live in dense tables and embeddings in sparse tables, of which a
// step pulls only the rows its batch touches (remapped into a compact local table); gradients
// are pushed back and the optimizer runs on the servers, so the trainer keeps no optimizer
// state.
//
// ps and hybrid pull every parameter before the step and push every gradient after it (the
// next step's pull issued early where the consistency model allows). offload (SetUnits)
// pipelines both through the model's units, as ZeRO-Offload does through the CPU:
//  - a dense gradient is pushed as soon as backward finished it (GradReady), so pushes and the
//    servers' per-chunk applies run behind the rest of backward;
//  - after the clock, every unit's pull is issued in forward order, and each unit's forward
//    waits only for its own (UnitHooks): the first units compute while the last ones arrive.
//    Under BSP (sync.pull_early) a unit's pull goes earlier, once backward pushed its
//    gradients, stamped with the next clock: a server answers it as soon as it applied them;
//  - with the delayed update (DeepSpeed's DPU) the pull for step n + 1 is issued at the start of
//    step n, before this trainer's step-n clock, so it returns the weights after step n - 1's
//    update (the server cannot apply step n before this trainer's clock): deterministic, one
//    step stale, and the servers' apply of step n - 1 runs behind step n's compute;
//  - with sync.wire bf16 the working weights are held in bf16 between uses (the values the wire
//    brings, nothing rounded further): a unit's fp32 values exist only while it computes, made
//    before its forward and its backward and freed after (ps_sync_weights.cc). The delayed
//    update's copies (the pulls arriving, the last pull) are bf16 as well, and its prediction is
//    rounded to bf16;
//  - a unit's gradients exist only from its first backward of the step until the servers
//    acknowledged their push, as ZeRO-Offload moves them off the device as backward makes them
//    (ps_sync_grads.cc): between steps the trainer holds the weights alone. A bf16 push reads
//    its own rounded copy, so the fp32 gradient goes as soon as it is pushed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/client.h"
#include "trainer/data.h"
#include "trainer/grad_sync.h"
#include "trainer/models/model.h"
#include "trainer/nn/module.h"
#include "trainer/optim.h"
#include "trainer/trace.h"
#include "trainer/train_options.h"

namespace strata {

struct PsSyncOptions {
  int trainers = 1;             // every trainer of the job (they all clock)
  int replicas = 1;             // the data-parallel replicas that push this rank's tables
  uint32_t first_table_id = 0;  // tables get ids from here (pipeline ranks' ids differ)
  // Appended to every table's name: a tensor-parallel shard's tables ("#tp0/2") are its own,
  // whole parameters included (each tp rank keeps its copy on its own tables).
  std::string table_suffix;
};

// How long pushes and pulls were in flight (the union of their intervals, from issue to the
// reply's arrival) and how long the training thread waited for them: the rest ran behind
// compute.
struct PsOverlap {
  double push_seconds = 0, push_exposed_seconds = 0;
  double pull_seconds = 0, pull_exposed_seconds = 0;
  int64_t unit_pulls = 0, early_unit_pulls = 0;  // offload: units pulled; of them, during backward
  static double Hidden(double total, double exposed) { return total > 0 ? std::max(0.0, 1.0 - exposed / total) : 0; }
};

// Used by one training thread.
class PsSync final : public GradSync, public UnitHooks {
 public:
  // Creates one table per parameter that lives on the servers (every parameter in ps and
  // offload mode; the sparse ones in hybrid) and marks them remote. Fails if the optimizer
  // cannot run on the servers as configured.
  static Result<std::unique_ptr<PsSync>> Create(PsClient& client, nn::ParameterRegistry& reg,
                                                const TrainJob& job, const PsSyncOptions& options,
                                                Trace* trace);
  ~PsSync() override;
  PsSync(const PsSync&) = delete;
  PsSync& operator=(const PsSync&) = delete;

  // offload: dense parameters pulled per unit of `model` (install this object as its UnitHooks)
  // and pushed as backward finishes them; `delayed_from`: the first step that runs on the
  // weights one update behind (-1: never).
  // `predict` (sync.delayed_predict): a delayed step computes on the pulled weights moved on by
  // the last update, staged + (staged - the weights the previous step computed on).
  void SetUnits(const Model& model, int64_t delayed_from, bool predict);

  // Makes parameters ready for computing on `batches` (a step's micro-batches, or one eval
  // batch): takes the prefetched pull if it was for these batches, else pulls now; writes the
  // values into the parameters and rewrites each batch's ids into the compact sparse rows.
  // offload: dense values arrive unit by unit in the forward (BeforeUnit); `training` false (an
  // evaluation between steps) computes on what the next step would (the delayed update: what
  // the last one did).
  Status Prepare(std::vector<Batch>& batches, int64_t step, bool training = true);
  // Issues the pull for `batches` (the next step) without waiting.
  void Prefetch(const std::vector<Batch>& batches);
  void BeginStep(int64_t /*step*/) override {}
  // offload: pushes a dense gradient now.
  void GradReady(nn::Parameter& p) override;
  // Pushes every remote gradient not pushed yet (the compact rows of sparse ones), waits for
  // the servers and finishes the clock. offload: then issues the next step's unit pulls.
  Status Finish(int64_t step) override;

  // offload: waits for every unit's pull the next forward would wait for (the values become
  // the ones the next step computes on).
  Status WaitAllUnits();
  // offload with the weights in bf16: every parameter's fp32 values made (a checkpoint reads
  // them), and freed again. No-ops otherwise.
  void MakeAllValues();
  void FreeAllValues();
  // offload: a unit's forward waits for its parameters' pull; its backward makes its gradients.
  void BeforeUnit(int unit, Pass pass, UnitRange walk, const nn::Context& ctx) override;
  void AfterUnit(int unit, Pass pass, const nn::Context& ctx) override;

  // Whether a pull issued before this step's push may be used for the next step: ASP, or SSP
  // with staleness >= 1. (BSP must pull after the clock.)
  bool prefetch_before_compute() const { return early_prefetch_; }
  bool has_sparse() const { return !sparse_.empty(); }
  // Global clipping (optimizer.clip_norm under BSP): the servers clip each clock by the norm of
  // the averaged gradient over every table of every stage; the last Finish's norm, before
  // clipping (what Trainer::ClipGradients reports).
  bool clips() const { return clip_norm_ > 0; }
  double grad_norm() const { return grad_norm_; }
  bool offload() const { return !units_.empty(); }
  // Host floats held to receive delayed pulls (the second copy of the weights DPU needs).
  int64_t staging_bytes() const;
  // offload with sync.wire bf16: the weights' floats held in bf16 between uses (0 otherwise).
  int64_t bf16_weight_floats() const;
  // offload: the most bytes of per-unit gradients and of the pushes' copies of them alive at
  // once, since construction (gradients held between steps, outside the units, not counted).
  int64_t grad_peak_bytes() const { return grad_peak_bytes_; }
  // Totals since construction.
  PsOverlap overlap() const;

 private:
  struct Remote {
    nn::Parameter* param;
    uint32_t table;
    uint32_t dim;  // sparse: floats per row
  };
  using Clock = std::chrono::steady_clock;
  struct InFlight {  // a ticket and when it was issued
    PsTicket ticket;
    Clock::time_point issued;
  };
  struct Pull {  // one pull in flight
    std::vector<uint64_t> keys;  // sorted unique ids of the batches
    std::vector<std::vector<float>> dense;   // by dense_ index
    std::vector<std::vector<float>> sparse;  // by sparse_ index: keys.size() * dim
    std::vector<InFlight> tickets;
  };
  // offload: one unit's dense pulls. The values land in the parameters themselves, or (delayed
  // update: the parameters are still in use when the pull is issued; device tensors) in
  // `staged`, copied in once the unit's forward needs them.
  struct UnitPull {
    std::vector<InFlight> pulls;            // by the unit's dense parameters
    std::vector<std::vector<float>> staged;  // likewise; empty when pulled in place
    std::vector<std::vector<uint16_t>> staged_bf16;  // instead, when the weights are held in bf16
    bool issued = false;
    bool pending = false;                    // issued and not yet waited for
    bool predict = false;  // delayed: the parameters become staged + (staged - what they hold)
  };
  PsSync(PsClient& client, Trace* trace) : client_(client), trace_(trace) {}
  // After this clock's pushes were acknowledged: the global norm from the servers and the factor
  // every trainer's clock message carries (1 without clipping or within the norm).
  Result<float> GlobalClipScale();
  static std::vector<uint64_t> Keys(const std::vector<Batch>& batches);
  std::unique_ptr<Pull> StartPull(std::vector<uint64_t> keys);
  // offload: issues every unit's pulls, in forward order, into `into` (by unit).
  void IssueUnitPulls(std::vector<UnitPull>& into, bool staged);
  // Unit `u`'s pulls into `up`; `next_clock`: of the clock after this one, before the Clock.
  void IssueUnitPull(UnitPull& up, size_t u, bool staged, bool next_clock);
  // Undelayed BSP: after the unit's last backward of the step, its next pull (into early_).
  void PullEarly(int unit);
  Status WaitUnit(int unit);
  Status Predict(size_t index, std::vector<float>& pulled);  // index: into dense_
  Status PredictBf16(size_t index, std::vector<uint16_t>& pulled);  // the weights in bf16
  // The working weights of dense_[index] from / into host floats: the parameter's value, or its
  // bf16 copy (rounded to nearest on the way in) when the weights are held in bf16.
  Status StoreWeights(size_t index, const float* host);
  Status LoadWeights(size_t index, float* host);
  Status StoreWeightsBf16(size_t index, const uint16_t* host);  // the weights held in bf16
  Status LoadWeightsBf16(size_t index, uint16_t* host);
  size_t Floats(size_t index) const;  // of dense_[index]
  // bf16 weights: a unit's fp32 values made from the bf16 copies, and freed.
  void MakeValues(int unit);
  void FreeValues(int unit);
  // SetUnits, with sync.wire bf16: the values become bf16 copies.
  void HoldWeightsInBf16();
  // Waits for `f` and records its interval (for overlap()) and its trace event.
  Status WaitRecorded(InFlight& f, bool pull, const char* name);

  // A dense push in flight and what it reads: its own copy (the gradient in bf16, or a device
  // gradient staged on the host) or the gradient itself (in place). The frames hold either
  // (PsClient::PushDense's owner), so a frame ZeroMQ still has queued for a server that died
  // never reads freed memory; this object's references go once the servers acknowledged it.
  static constexpr size_t kCopied = static_cast<size_t>(-1);
  struct Push {
    InFlight f;
    std::shared_ptr<const void> copy;  // null: the push reads the gradient in place
    int64_t copy_bytes = 0;
    size_t grad = kCopied;  // offload: the dense_ index of the gradient it reads in place
    bool acknowledged = false;
  };
  // Pushes `g` to dense `table` (scaled already).
  Push SendDense(uint32_t table, const Tensor& g);
  // Pushes the step's compact rows of sparse `r` (its first `rows` rows).
  PsTicket SendSparse(const Remote& r, int64_t rows);
  // The gradients per unit (ps_sync_grads.cc). SetUnits frees them; a unit's backward makes them
  // (zeroed); an acknowledged push frees its own.
  void HoldGradsPerUnit();
  void MakeGrads(int unit);
  void MakeGrad(size_t index);
  void FreeGrad(size_t index);
  void CountGradBytes(int64_t bytes);
  void PushDense(const Remote& r);
  // Waits for `p`, frees what it read. Reap: for every push whose replies are all in.
  Status Acknowledge(Push& p);
  void Reap();
  // Waits for every push not acknowledged yet; the first error, Reap's included.
  Status AcknowledgeAll();
  // `g` rounded to bf16 into `out`.
  static void RoundToBf16(const Tensor& g, std::vector<uint16_t>& out);

  PsClient& client_;
  Trace* trace_;
  std::vector<Remote> dense_, sparse_;
  int64_t capacity_ = 0;  // rows of each compact sparse table
  bool early_prefetch_ = false;
  double clip_norm_ = 0;   // global clipping: optimizer.clip_norm; 0: off
  double grad_norm_ = 0;   // the last clock's global gradient norm
  float push_scale_ = 1.0f;   // gradients are scaled by this before a push (see Create)
  float dense_scale_ = 1.0f;  // dense ones by this
  ops::Exec exec_;            // the parameters' device
  std::unique_ptr<Pull> prefetched_;
  std::vector<uint64_t> keys_;  // of the current step (what PushAndClock pushes)

  // offload (SetUnits)
  std::vector<std::vector<size_t>> units_;  // by unit: indices into dense_
  std::unordered_map<const nn::Parameter*, size_t> dense_index_;  // into dense_
  OptimizerOptions optimizer_;  // its schedule: the lr factor each step's pushes carry
  int64_t total_steps_ = 0;
  int64_t delayed_from_ = -1;
  bool predict_ = false;
  std::vector<std::vector<float>> last_pull_;  // delayed_predict: by dense_ index, the last pull
  std::vector<std::vector<uint16_t>> last_pull_bf16_;  // instead, when the weights are in bf16
  std::vector<bool> last_valid_;               // whether last_pull_ holds one yet
  int64_t step_ = 0;
  std::vector<UnitPull> next_;   // the pulls the next forward waits for
  std::vector<UnitPull> ahead_;  // delayed update: the pulls for the step after that
  std::vector<UnitPull> early_;  // undelayed BSP: the next step's, issued during backward
  bool early_pulls_ = false;     // sync.pull_early under BSP
  std::vector<bool> pushed_;     // by dense_ index, this step
  std::vector<Push> pushes_;     // this step's
  Status push_error_;            // the first failure Reap met (Finish returns it)
  // By dense_ index: whether the gradient lives per unit (every parameter of a unit), and its
  // shape.
  std::vector<bool> grad_per_unit_;
  std::vector<Shape> grad_shape_;
  int64_t grad_bytes_ = 0, grad_peak_bytes_ = 0;  // per-unit gradients and push copies alive
  bool wire_bf16_ = false;
  // offload, sync.wire bf16: by dense_ index, the weights in bf16 on the parameters' device
  // (empty otherwise); the parameters' values exist only while their unit computes.
  std::vector<Tensor> bf16_weights_;
  // Overlap accounting: every push's and pull's [issue, reply) and the waits.
  std::vector<std::pair<Clock::time_point, Clock::time_point>> push_spans_, pull_spans_;
  double push_exposed_ = 0, pull_exposed_ = 0;
  int64_t unit_pulls_ = 0, early_unit_pulls_ = 0;
};

}  // namespace strata
