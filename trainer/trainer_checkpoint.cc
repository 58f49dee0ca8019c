// trainer_checkpoint.cc: the trainer's part of checkpoints (checkpoint.h): which rank writes
// which tensors, the rendezvous that publishes the manifest only after every shard file is
// durable, and loading this rank's shards under its own plan.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cluster/node.h"
#include "common/logging.h"
#include "trainer/checkpoint.h"
#include "trainer/progress.h"
#include "trainer/ps_sync.h"
#include "trainer/trainer.h"
#include "trainer/zero3.h"

namespace strata {

std::vector<ShardTensor> Trainer::CheckpointTensors() {
  nn::ParameterRegistry& reg = model_->params();
  std::vector<ShardTensor> all;
  // ps and hybrid: what the servers hold is in their tables (saved by them), not here.
  const bool servers_hold = ps_ && !ps_->offload();
  for (auto& p : reg.params()) {
    if (!(servers_hold && p->remote)) all.push_back({p->name, p->shard, p->value});
  }
  // Optimizer state ("adamw.m/<param>") is shaped and split as its parameter.
  for (auto& [name, t] : optimizer_->State()) {
    const nn::Parameter* p = reg.Find(name.substr(name.find('/') + 1));
    all.push_back({name, p ? p->shard : ShardSpec::Whole(t.shape()), t});
  }
  return all;
}

Status Trainer::SaveCheckpoint() {
  const std::string& dir = job_.train.checkpoint_dir;
  const std::string step_dir = CheckpointStepDir(dir, step_);
  const std::string key = "checkpoint/" + CheckpointStepName(step_) + "/";
  const Millis timeout(job_.sync.timeout_ms);
  CheckpointManifest m;
  // A sharded optimizer's whole state, assembled by every replica (a collective) for the
  // first to write: the file is the same under any ZeRO stage and dp size.
  STRATA_RETURN_IF_ERROR(optimizer_->GatherState().WithContext("gathering the optimizer state for checkpoint " + step_dir));
  // offload: the weights are the servers'; the pulls in flight bring the latest (the optimizer
  // state stays on the servers: the checkpoint holds the weights only).
  if (ps_ && ps_->offload()) {
    STRATA_RETURN_IF_ERROR(ps_->WaitAllUnits().WithContext("checkpoint " + step_dir));
    ps_->MakeAllValues();  // weights held in bf16: the fp32 values the file takes, freed on return
  }
  struct FreeValues {
    PsSync* ps;
    ~FreeValues() {
      if (ps) ps->FreeAllValues();
    }
  } free_values{ps_ && ps_->offload() ? ps_.get() : nullptr};
  // ZeRO-3: the parameters too (every replica gathers; the first writes; all free them after).
  if (zero3_) STRATA_RETURN_IF_ERROR(zero3_->GatherAll().WithContext("checkpoint " + step_dir));
  if (groups_.dp_rank == 0 && groups_.cp_rank == 0) {
    // Replicas (and context-parallel ranks) hold the same values: the first writes. A whole parameter is replicated over
    // the tensor-parallel ranks: the first of them writes it.
    std::vector<ShardTensor> mine;
    for (ShardTensor& t : CheckpointTensors()) {
      if (!t.spec.whole() || groups_.tp_rank == 0) mine.push_back(std::move(t));
    }
    std::error_code ec;
    std::filesystem::create_directories(step_dir, ec);
    if (ec) optimizer_->ReleaseGatheredState();
    if (ec && zero3_) STRATA_RETURN_IF_ERROR(zero3_->ReleaseAll(/*take=*/false));
    if (ec) return Status::IOError("cannot create " + step_dir + ": " + ec.message());
    const std::string name = ShardFileName(groups_.pp_rank, groups_.tp_rank);
    const nlohmann::json meta = {{"step", step_}, {"pp_rank", groups_.pp_rank}, {"tp_rank", groups_.tp_rank},
                                 {"plan", plan_.ToString()}};
    auto written = WriteShardFile(step_dir + "/" + name, meta.dump(), mine);
    mine.clear();
    optimizer_->ReleaseGatheredState();
    if (zero3_) STRATA_RETURN_IF_ERROR(zero3_->ReleaseAll(/*take=*/false));
    STRATA_ASSIGN_OR_RETURN(const FileDigest digest, std::move(written));
    if (node_) {
      STRATA_RETURN_IF_ERROR(node_->KvSet(key + name, nlohmann::json{digest.bytes, digest.checksum}.dump())
                                 .WithContext("announcing checkpoint file " + name));
    } else {
      m.files.push_back({name, digest});
    }
  }
  optimizer_->ReleaseGatheredState();  // the replicas that did not write
  if (zero3_) STRATA_RETURN_IF_ERROR(zero3_->ReleaseAll(/*take=*/false));
  if (node_) {
    // The manifest names only files that are durable: every writer has finished.
    STRATA_RETURN_IF_ERROR(node_->Barrier(key + "written", wire::BarrierScope::TRAINERS, timeout)
                               .WithContext("waiting for every trainer to write checkpoint " + step_dir));
    if (ps_ && !ps_->offload()) {
      // Every trainer has pushed this step (its pushes were answered, so applied) and waits
      // here: the servers write their tables as of this step, then training goes on.
      if (rank_ == 0) STRATA_RETURN_IF_ERROR(client_->SaveTables(step_dir));
      STRATA_RETURN_IF_ERROR(node_->Barrier(key + "servers", wire::BarrierScope::TRAINERS, timeout)
                                 .WithContext("waiting for the servers to save their tables into " + step_dir));
    }
    if (rank_ != 0) return Status::OK();
    for (int p = 0; p < plan_.pp; ++p) {
      for (int t = 0; t < plan_.tp; ++t) {
        const std::string name = ShardFileName(p, t);
        STRATA_ASSIGN_OR_RETURN(const std::string text, node_->KvGet(key + name, timeout));
        auto j = nlohmann::json::parse(text, nullptr, false);
        if (!j.is_array() || j.size() != 2) return Status::Corruption("checkpoint file digest in the kv store: " + text);
        m.files.push_back({name, {j[0].get<uint64_t>(), j[1].get<uint64_t>()}});
      }
    }
  }
  m.step = step_;
  m.optimizer_step = optimizer_->step();
  m.data_batches = data_->position();
  m.batch_size = job_.train.batch_size;
  m.micro_batches = plan_.micro_batches;
  m.dp = plan_.dp;
  m.tp = plan_.tp;
  m.pp = plan_.pp;
  m.vpp = plan_.vpp;
  m.plan = plan_.ToString();
  STRATA_RETURN_IF_ERROR(PublishCheckpoint(dir, m));
  progress_->Metrics(nlohmann::json{{"step", step_}, {"checkpoint", step_dir}}.dump());
  return Status::OK();
}

Status Trainer::LoadCheckpoint(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const CheckpointReader reader, CheckpointReader::Open(path));
  const CheckpointManifest& m = reader.manifest();
  // Every replica draws its slice of global batch k, so the data position is a count of global
  // batches: the same under any plan. A different batch size is converted through samples.
  const int64_t samples = m.data_batches * m.batch_size;
  const int64_t batch = job_.train.batch_size;
  if (samples % batch != 0) {
    return Status::InvalidArgument(path + ": written after " + std::to_string(samples) + " samples (batches of " +
                                   std::to_string(m.batch_size) + "), not a whole number of train.batch_size " +
                                   std::to_string(batch));
  }
  if ((m.batch_size != batch || m.micro_batches != plan_.micro_batches) && rank_ == 0) {
    spdlog::warn("{}: written with batches of {} x {} micro-batches, resumed with {} x {}: the run goes on with "
                 "other batches than the uninterrupted one", path, m.batch_size, m.micro_batches, batch,
                 plan_.micro_batches);
  }
  // ZeRO-3: the full values are made (gathered), loaded into, and each rank keeps its slices.
  if (zero3_) STRATA_RETURN_IF_ERROR(zero3_->GatherAll().WithContext("loading " + path));
  Status loaded = LoadShards(reader, CheckpointTensors());
  if (zero3_) STRATA_RETURN_IF_ERROR(zero3_->ReleaseAll(/*take=*/loaded.ok()));
  STRATA_RETURN_IF_ERROR(loaded);
  optimizer_->StateLoaded();
  step_ = m.step;
  data_->Seek(samples / batch);
  optimizer_->set_step(m.optimizer_step);
  if (rank_ == 0) spdlog::info("checkpoint {} was written by {}; this run: {}", path, m.PlanString(), plan_.ToString());
  return Status::OK();
}

}  // namespace strata
