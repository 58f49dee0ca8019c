// data_split.h: context parallelism's data loading. Every batch a source returns is cut along
// one axis of its samples and this rank keeps its chunks of it (gpt: chunks i and 2cp-1-i of
// every sequence's tokens, balanced for the causal mask; mlp on [seq, features] samples: an even
// share of the points), so each rank reads and computes only its part of every sample.
#pragma once

#include <memory>
#include <vector>

#include "common/mesh.h"
#include "common/status.h"
#include "trainer/data.h"

namespace strata {

// The tensors of every batch (x, ids, target; not ctr's per-sample oracle) keep, along
// dimension 1 + `axis` (dimension 0 is the batch), the `chunks` in their order. Samples stay
// whole in number; Batch::tokens counts this rank's tokens. Tensors whose extent along that
// dimension is not the chunks' span abort: CheckContextParallel (plan.h) validates the job first.
std::unique_ptr<DataSource> SplitSamples(std::unique_ptr<DataSource> inner, int axis, std::vector<Chunk> chunks);

// The chunks of `length` that context-parallel rank `rank` of `cp` reads for `job`'s model.
std::vector<Chunk> ContextChunks(const ModelOptions& model, int64_t length, int cp, int rank);

}  // namespace strata
