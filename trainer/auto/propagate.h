// propagate.h: sharding propagation. From the placements of a few annotated tensors, every
// other tensor of a model's graph (op_graph.h) gets a placement, forward and backward, through
// the per-operator rules (sharding_rules.h); where several placements are feasible the cheapest
// in communication wins; the reshards the rules need are inserted and counted.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"
#include "trainer/auto/op_graph.h"
#include "trainer/auto/placement_text.h"
#include "trainer/auto/sharding_rules.h"

namespace strata {

struct DerivedTensor {
  std::string name;
  Shape shape;
  std::vector<Placement> placements;
  std::string how;  // "annotated", "chosen by cost: ...", ... (empty: from the op's rule)
};

// One reshard the rules asked for: `what` it moves, from which placements to which, on which
// mesh (stage), the steps (reshard.h) and the bytes the rank at coordinate 0 of that mesh counts
// for it. Activations' reshards happen once per micro-batch (`times` of them: 2 where a
// recomputed forward runs again in backward), gradient synchronisations once per step. A
// hand-off between meshes is on the mesh it leaves (forward) or reaches (backward).
struct DerivedReshard {
  std::string what;
  Shape shape;
  std::vector<Placement> from, to;
  std::string steps;
  uint64_t bytes = 0;
  bool per_step = false;  // a gradient's synchronisation (else per micro-batch)
  int mesh = 0;
  int times = 1;
};

// What a collective costs on a group of n ranks: latency + wire bytes / bandwidth, the ring's
// wire bytes per rank (all-reduce 2 (n-1)/n of its buffer; all-gather, reduce-scatter and
// all-to-all (n-1)/n). Only the ratio of the two matters to the choices. The defaults are of
// the order Gloo over loopback measures on this project's 2-core machine.
struct LinkCosts {
  double latency_s = 50e-6;
  double bytes_per_s = 2e9;
};

struct PropagateOptions {
  ProcessMesh mesh = *ProcessMesh::Make({{"x", 1}});
  // "name=P,..." as the job writes them; a name is a tensor's, or the dotted suffix of several
  // (attn.qkv.weight: every block's). "input" places the batch (and its targets).
  std::vector<NamedPlacements> annotations;
  int64_t micro_batches = 1;
  // By unit: whether its forward runs again in backward (model.recompute: gpt's blocks;
  // parallel.recompute full: every unit), repeating its forward's reshards.
  std::vector<bool> recompute;
  LinkCosts link;
};

struct Propagation {
  // Per mesh dimension: "model" (an annotation shards a parameter on it: every parameter a
  // layer can split is split, its axis chosen by cost), "data" (no parameter sharded: the
  // batch is split, S(0), and parameters replicated: the seed's default), "" (size 1).
  std::vector<std::string> roles;
  std::map<std::string, Placements> parameters;  // how each parameter is stored
  bool vocab_parallel_loss = false;  // the loss kept the logits' vocabulary shard
  std::vector<DerivedTensor> tensors;  // forward in op order, then the gradients
  std::vector<DerivedReshard> reshards;
  // What the rank at coordinate 0 moves, by operation (CommOpName's words): per micro-batch
  // (activations, counting recomputation) and per step (gradients).
  std::map<std::string, uint64_t> per_micro_batch, per_step;
  double cost_s = 0;  // LinkCosts' time of a step's collectives
};

// InvalidArgument naming the annotation when it names no tensor or does not fit it.
Result<Propagation> Propagate(const OpGraph& graph, const PropagateOptions& options);

}  // namespace strata
