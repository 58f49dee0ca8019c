// trainer_connect.cc: how a trainer takes its place in the plan: the unit costs a "cost"
// partition shares, its communicators (MakeGroups), and its gradient synchronisation
// (Connect: the parameter servers' tables, the all-reduce or ZeRO over the dp group).
#include <nlohmann/json.hpp>

#include "cluster/node.h"
#include "common/logging.h"
#include "trainer/comm/gloo_communicator.h"
#include "trainer/device.h"
#include "trainer/grad_sync.h"
#include "trainer/parallel/unit_costs.h"
#include "trainer/ps_sync.h"
#include "trainer/trainer.h"
#include "trainer/zero3.h"
#if STRATA_HAVE_CUDA
#include "common/cuda_check.h"
#include "trainer/comm/nccl_communicator.h"
#endif

namespace strata {

Result<std::vector<double>> Trainer::SharedUnitCosts() {
  // Trainer 0 measures and publishes; every trainer cuts the model the same way.
  const std::string key = "parallel/unit_costs";
  const Millis timeout(job_.sync.timeout_ms);
  if (rank_ == 0) {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<DataSource> data,
                            CreateDataSource(job_.data, job_.model, job_.train.batch_size, {0, plan_.dp}));
    STRATA_ASSIGN_OR_RETURN(std::vector<double> costs, MeasureUnitCosts(job_.model, device_->exec(), data->Next()));
    STRATA_RETURN_IF_ERROR(node_->KvSet(key, nlohmann::json(costs).dump()));
    std::string line;
    for (size_t i = 0; i < costs.size(); ++i) line += (i ? " " : "") + std::to_string(costs[i] * 1e3).substr(0, 6);
    spdlog::info("parallel.partition cost: forward + backward ms per unit: {}", line);
    return costs;
  }
  STRATA_ASSIGN_OR_RETURN(const std::string text, node_->KvGet(key, timeout));
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array()) return Status::Corruption("parallel/unit_costs in the kv store is not a list: " + text);
  return j.get<std::vector<double>>();
}

Status Trainer::MakeGroups() {
  const Millis timeout(job_.sync.timeout_ms);
  const bool cuda = device_->exec().is_cuda();
  CommunicatorFactory make = [&](const std::string& name, int rank, int size) -> Result<std::unique_ptr<Communicator>> {
    if (cuda) {
#if STRATA_HAVE_CUDA
      // Device tensors move over NCCL on its own stream, ordered by events.
      NcclOptions nccl;
      nccl.device = device_->exec().device.index;
      nccl.timeout = timeout;
      // Tensor-parallel collectives run inside layers, between their kernels: on the layers'
      // stream, so that they are ordered with the kernels without a host wait.
      if (name.starts_with("trainers/tp/")) nccl.stream = static_cast<cudaStream_t>(device_->exec().stream);
      STRATA_ASSIGN_OR_RETURN(auto comm, MakeNcclCommunicator(*node_, name, rank, size, nccl));
      return std::unique_ptr<Communicator>(std::move(comm));
#endif
    }
    GlooOptions gloo;
    gloo.timeout = timeout;
    if (name.starts_with("trainers/pp/")) {
      gloo.shm_ring_bytes = static_cast<uint64_t>(job_.parallel.shm_ring_mb * (1 << 20));
    } else if (job_.parallel.shm_ring_mb > 0 && (name.starts_with("trainers/dp/") || name.starts_with("trainers/tp/"))) {
      // No hand-offs here, but the small all-reduces (the step's loss and gradient norm, a
      // tensor-parallel layer's activations at small micro-batches) go through shared memory when
      // the group is on one host (GlooCommunicator); a ring holds the largest of them whole.
      gloo.shm_ring_bytes = kShmAllReduceMaxBytes;
    }
    return MakeGlooCommunicator(*node_, name, rank, size, gloo);
  };
  // Replicas all-reduce (allreduce, hybrid) or meet only on the servers (ps), where they may
  // be asynchronous: then they share no group, and each reports its own loss.
  // offload under BSP keeps the group for the loss: its replicas step together.
  const SyncOptions& sync = job_.sync;
  const bool dp_group = sync.mode == SyncOptions::Mode::kOffload ? sync.consistency == Consistency::kBsp
                                                                 : sync.mode != SyncOptions::Mode::kPs;
  // An elastic trainer is a replica of its own in the first trainers' plan (ps mode: no group).
  STRATA_ASSIGN_OR_RETURN(groups_, MakeParallelGroups(plan_, elastic_ ? 0 : rank_, make, dp_group));
  return Status::OK();
}

Status Trainer::Connect() {
  const SyncOptions& sync = job_.sync;
  const Millis timeout(sync.timeout_ms);
  nn::ParameterRegistry& reg = model_->params();
  if (UsesServers(sync.mode)) {
    client_ = std::make_unique<PsClient>(*node_, timeout, job_.server_replication);
    PsSyncOptions o;
    o.trainers = world_;
    o.replicas = plan_.dp * plan_.cp;  // every rank holding this (pp, tp) shard pushes its tables
    // One set of tables per (pp, tp) shard, shared by its dp replicas.
    o.first_table_id = static_cast<uint32_t>(groups_.pp_rank) << 16 | static_cast<uint32_t>(groups_.tp_rank) << 10;
    if (plan_.tp > 1) o.table_suffix = "#tp" + std::to_string(groups_.tp_rank) + "/" + std::to_string(plan_.tp);
    STRATA_ASSIGN_OR_RETURN(ps_, PsSync::Create(*client_, reg, job_, o, trace_.get()));
    syncs_.push_back(ps_.get());
    if (sync.mode == SyncOptions::Mode::kOffload && sync.overlap && !job_.infer.enabled()) {
      ps_->SetUnits(*model_, sync.delayed_update ? sync.delayed_warmup : -1, sync.delayed_predict);
      model_->set_unit_hooks(ps_.get());
      if (rank_ == 0) {
        spdlog::info("offload: optimizer state on the servers; gradients pushed as backward finishes them, "
                     "parameters pulled unit by unit ahead of the forward{}",
                     sync.delayed_update ? fmt::format(", delayed update from step {}{}", sync.delayed_warmup + 1,
                                                                   sync.delayed_predict ? " (weights predicted)" : "")
                                         : "");
      }
    }
  }
  if (job_.infer.enabled()) return Status::OK();  // nothing to synchronise
  if ((sync.mode == SyncOptions::Mode::kAllReduce || sync.mode == SyncOptions::Mode::kHybrid) && groups_.dp) {
    Communicator& dp = *groups_.dp;
#if STRATA_HAVE_CUDA
    if (reg.exec().is_cuda()) {
      // The values were uploaded on the legacy stream, and NCCL's stream does not wait for it.
      CUDA_CHECK(cudaDeviceSynchronize());
    }
#endif
    // Every replica starts from the same values: the initialisers are seeded by name, so they
    // already are; the broadcast makes it so whatever the model did at construction.
    std::vector<nn::Parameter*> local;
    for (auto& p : reg.params()) {
      if (p->remote) continue;
      local.push_back(p.get());
      STRATA_RETURN_IF_ERROR(dp.Broadcast(p->value.data_as<float>(), p->value.numel(), 0)
                                 .WithContext("broadcasting " + p->name));
    }
    // A stream-ordered (NCCL) communicator has only enqueued the broadcasts.
    STRATA_RETURN_IF_ERROR(dp.Synchronize().WithContext("broadcasting the parameters"));
    const auto bytes = static_cast<size_t>(sync.bucket_mb * 1024 * 1024);
    const int zero = job_.parallel.zero;
    void* stream = reg.exec().is_cuda() ? reg.exec().stream : nullptr;
    if (zero == 3) {
      zero3_ = std::make_unique<Zero3Sync>(dp, *model_, sync.overlap, trace_.get(), stream);
      syncs_.push_back(zero3_.get());
      if (rank_ == 0) {
        spdlog::info("ZeRO-3 over {} replicas: {} buckets (one a unit), parameters gathered per unit{}", plan_.dp,
                     zero3_->buckets().size(), sync.overlap ? ", the next unit's prefetched" : "");
      }
      return Status::OK();
    }
    reducer_ = std::make_unique<BucketAllReducer>(dp, std::move(local), reg.exec(), bytes, sync.overlap, zero,
                                                  trace_.get(), stream);
    syncs_.push_back(reducer_.get());
    if (zero > 0 && !reg.exec().is_cuda()) {
      // The all-gather after each optimizer step overlaps the next forward, unit by unit.
      reducer_->SetUnits(*model_);
      model_->set_unit_hooks(reducer_.get());
    }
    if (rank_ == 0) {
      spdlog::info("{} over {} replicas: {} buckets of up to {} MiB{}",
                   zero > 0 ? "ZeRO-" + std::to_string(zero) + " (reduce-scatter, sharded optimizer, all-gather)"
                            : std::string("all-reduce"),
                   plan_.dp, reducer_->num_buckets(), sync.bucket_mb, sync.overlap ? ", overlapped with backward" : "");
    }
  }
  return Status::OK();
}

}  // namespace strata
