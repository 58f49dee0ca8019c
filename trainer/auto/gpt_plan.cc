// gpt_plan.cc: DeriveGptAutoPlan, gpt's plan from a few annotations: sharding propagation over
// its graph, then each mesh dimension matched to the data or Megatron tensor parallelism the
// trainer runs.
#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "trainer/auto/auto_plan.h"
#include "trainer/auto/op_graph.h"
#include "trainer/auto/propagate.h"

namespace strata {
namespace {

// How Megatron's split stores each gpt parameter along a tensor-parallel dimension (the trainer's
// layers: gpt.cc, layers.cc); every other parameter is whole.
Placement MegatronPlacement(const std::string& name) {
  auto ends = [&](const char* suffix) {
    const std::string s = suffix;
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends(".attn.qkv.weight") || ends(".mlp.fc1.weight") || name == "gpt.head.weight") {
    return Shard{1};
  }
  if (ends(".attn.qkv.bias") || ends(".mlp.fc1.bias") || ends(".attn.proj.weight") ||
      ends(".mlp.fc2.weight") || name == "gpt.tok.weight") {
    return Shard{0};
  }
  return Replicate{};
}

}  // namespace

Result<AutoPlan> DeriveGptAutoPlan(const TrainJob& job) {
  const AutoOptions& o = job.auto_parallel;
  if (o.meshes != 1) {
    return Status::InvalidArgument("auto.meshes: gpt's plans from placements use one mesh (no "
                                   "pipeline stages from placements yet), not " +
                                   std::to_string(o.meshes));
  }
  AutoPlan plan;
  STRATA_ASSIGN_OR_RETURN(plan.mesh, ParseMesh(o.mesh));
  const ProcessMesh& mesh = plan.mesh;
  PropagateOptions options;
  options.mesh = mesh;
  for (const std::string& text : o.placements) {
    Result<NamedPlacements> named = ParseTensorPlacements(text, mesh);
    if (!named.ok()) return named.status().WithContext("auto.placements");
    if (named->name.find('@') != std::string::npos) {
      return Status::InvalidArgument("auto.placements: '" + named->name +
                                     "': gpt's plans from placements use one mesh");
    }
    options.annotations.push_back(*named);
  }
  const ParallelOptions& par = job.parallel;
  options.micro_batches = par.micro_batches ? par.micro_batches : job.train.micro_batches;
  STRATA_ASSIGN_OR_RETURN(OpGraph graph, BuildGptGraph(job.model, job.train.batch_size));
  for (int u = 0; u < graph.units; ++u) {
    const bool block = u > 0 && u < graph.units - 1;
    options.recompute.push_back(par.recompute == ParallelOptions::Recompute::kFull ||
                                (job.model.recompute && block));
  }
  STRATA_ASSIGN_OR_RETURN(Propagation p, Propagate(graph, options));

  // Each dimension onto a plan the trainer runs.
  plan.roles.assign(static_cast<size_t>(mesh.ndim()), "");
  for (int d = 0; d < mesh.ndim(); ++d) {
    const std::string& role = p.roles[static_cast<size_t>(d)];
    if (role.empty()) continue;
    const std::string dim = mesh.dims()[static_cast<size_t>(d)].name;
    const bool tp = role == "model";
    // Weights first: a bias follows its weight, so the weight is the one to name.
    std::vector<std::pair<std::string, Placements>> params(p.parameters.begin(), p.parameters.end());
    std::stable_partition(params.begin(), params.end(), [](const auto& e) {
      return e.first.size() > 7 && e.first.compare(e.first.size() - 7, 7, ".weight") == 0;
    });
    for (const auto& [name, placements] : params) {
      const Placement want = tp ? MegatronPlacement(name) : Placement(Replicate{});
      const Placement& got = placements[static_cast<size_t>(d)];
      if (got != want) {
        return Status::InvalidArgument(fmt::format(
            "auto: {} is {} on mesh dimension '{}', a {} dimension, where the trainer's {} "
            "holds it {}: the placements derive no plan the trainer runs",
            name, ToString(got), dim, role, tp ? "Megatron tensor parallelism" : "data parallelism",
            ToString(want)));
      }
    }
    for (const DerivedTensor& t : p.tensors) {
      if (t.name != "input") continue;
      const Placement want = tp ? Placement(Replicate{}) : Placement(Shard{0});
      if (t.placements[static_cast<size_t>(d)] != want) {
        return Status::InvalidArgument(fmt::format(
            "auto: the input is {} on mesh dimension '{}', a {} dimension: the trainer runs it "
            "{}",
            ToString(t.placements[static_cast<size_t>(d)]), dim, role, ToString(want)));
      }
    }
    if (tp && !p.vocab_parallel_loss) {
      return Status::InvalidArgument("auto: the loss gathers the vocabulary on mesh dimension '" +
                                     dim + "'; the trainer runs the vocab-parallel loss");
    }
    const std::string r = tp ? "tp" : "dp";
    for (int e = 0; e < d; ++e) {
      if (plan.roles[static_cast<size_t>(e)] == r) {
        return Status::InvalidArgument("auto: mesh dimensions '" +
                                       mesh.dims()[static_cast<size_t>(e)].name + "' and '" + dim +
                                       "' are both " + r + "; the trainer runs one of each");
      }
    }
    plan.roles[static_cast<size_t>(d)] = r;
    (tp ? plan.tp : plan.dp) = mesh.dim_size(d);
  }
  plan.tensors = p.tensors;
  plan.reshards = p.reshards;
  plan.per_micro_batch = p.per_micro_batch;
  plan.per_step = p.per_step;
  plan.propagation = std::move(p);
  return plan;
}

}  // namespace strata
