// table.h: a parameter-server table as plain values: TableSpec (kind, shape, optimizer,
// initializer, consistency), how a table is spread over servers (dense chunks round-robin,
// sparse keys by a well-mixed hash), and the layout of one stored record
// [value | optimizer state | step count].
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/shard.h"
#include "common/status.h"
#include "common/wire.capnp.h"

namespace strata {

enum class TableKind : uint8_t { kDense = 0, kSparse = 1 };
enum class OptimizerKind : uint8_t { kSgd = 0, kAdagrad = 1, kAdam = 2, kAdamW = 3 };
enum class InitKind : uint8_t { kZeros = 0, kConstant = 1, kUniform = 2, kNormal = 3 };
enum class Consistency : uint8_t { kBsp = 0, kAsp = 1, kSsp = 2 };
enum class Aggregate : uint8_t { kSum = 0, kMean = 1 };

struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.01f;
  float momentum = 0.0f;   // sgd: 0 disables the momentum buffer
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // adam/sgd/adagrad: L2 added to the gradient; adamw: decoupled
  float clip_norm = 0.0f;     // per-row (per-chunk for dense) gradient clipping; 0 = off
  float initial_accumulator = 0.1f;  // adagrad
  bool operator==(const OptimizerSpec&) const = default;
};

// How a parameter's values start, on a server (InitValues, InitDenseValues) and in the trainer
// (nn::ParameterRegistry::Create, which sets the seed from the parameter's name).
struct InitSpec {
  InitKind kind = InitKind::kZeros;
  float a = 0.0f;  // constant value; uniform low; normal mean
  float b = 0.0f;  // uniform high; normal stddev
  uint64_t seed = 0;
  // A tensor-parallel shard starts as its slice of the unsplit tensor: the values of a dense
  // table's element g, or of a sparse table's row k, are those of the unsplit tensor's element
  // shard.GlobalIndex(g), or row k + shard.BlockOffset(0) (a sparse table splits by rows).
  ShardSpec shard;
  // Nonzero: values are keyed by rows of this many floats, as a sparse table's are (an
  // embedding table held dense, say), rather than by element.
  uint32_t row_dim = 0;
  bool operator==(const InitSpec&) const = default;

  static InitSpec Zeros() { return {}; }
  static InitSpec Constant(float value) { return Of(InitKind::kConstant, value, 0.0f); }
  static InitSpec Uniform(float low, float high) { return Of(InitKind::kUniform, low, high); }
  static InitSpec Normal(float stddev, float mean = 0.0f) { return Of(InitKind::kNormal, mean, stddev); }
  static InitSpec Of(InitKind kind, float a, float b, uint64_t seed = 0) {
    InitSpec s;
    s.kind = kind;
    s.a = a;
    s.b = b;
    s.seed = seed;
    return s;
  }
};

struct TableSpec {
  uint32_t id = 0;
  std::string name;
  TableKind kind = TableKind::kSparse;
  uint32_t dim = 0;            // sparse: floats per row
  uint64_t numel = 0;          // dense: floats in the tensor
  // dense: 2 MiB chunks spread over the servers, one request each, so a call's chunks pipeline
  // (the server reads or applies one while the next is on the wire); on loopback 2 MiB moved a
  // 16 MiB tensor faster than 4 MiB or one 16 MiB message (strata-bench ps).
  uint32_t chunk_floats = 1 << 19;
  OptimizerSpec optimizer;
  InitSpec init;
  Consistency consistency = Consistency::kAsp;
  uint32_t staleness = 0;      // ssp
  Aggregate aggregate = Aggregate::kMean;
  // Dense BSP only: how many trainers push each chunk per clock. Nonzero: a chunk's clock is
  // applied as soon as that many pushes of it arrived (mean: divided by pushers), and pulls of
  // the next clock are answered once every chunk is, without waiting for the clock messages
  // (what a trainer that pulls the next step's parameters early needs). 0: applied when every
  // live trainer finished the clock (mean: divided by the live trainers).
  uint32_t pushers = 0;
  // Dense BSP with pushers (global gradient clipping, optimizer.clip_norm): chunks are held, not
  // applied as they complete; a clock's gradNorm requests sum their squares, and the clock
  // messages apply them scaled by the clock's gradScale (server_clip.cc).
  bool clipped = false;
  // Dense: chunk c lives on server (c + placement) % servers (DenseServer). The trainer picks
  // it so that the servers hold about the same bytes (PlaceDense); kPlaceById, the default,
  // uses the table id, as every table did before (old checkpoints keep their layout).
  static constexpr uint32_t kPlaceById = 0xffffffffu;
  uint32_t placement = kPlaceById;

  bool operator==(const TableSpec&) const = default;

  // Checks every field; the error names the table and the field.
  Status Validate() const;
  // The fields in which `other` differs from this spec, "name this vs that" each, comma-separated
  // (the optimizer's and the initializer's as a whole); empty when they are equal.
  std::string Differences(const TableSpec& other) const;
  // Floats of optimizer state per value float (0 for plain sgd, 1 for momentum/adagrad, 2 adam).
  int StateSlots() const;
  // Floats per stored record: value, state, and one slot holding the step count.
  int RecordWidth() const;
  // Floats of value in one record: dim (sparse), or chunk_floats capped by numel (dense: a
  // small tensor's record is no bigger than the tensor).
  uint32_t RowFloats() const {
    return kind == TableKind::kSparse ? dim : static_cast<uint32_t>(std::min<uint64_t>(chunk_floats, numel));
  }
  uint64_t NumChunks() const { return (numel + chunk_floats - 1) / chunk_floats; }
  // Where the round-robin of dense chunks starts: placement, or the id under kPlaceById.
  uint32_t PlacementOffset() const { return placement == kPlaceById ? id : placement; }
  // Floats of value in dense chunk `c` (the last one may be short).
  uint32_t ChunkLength(uint64_t c) const;
};

void ToWire(const TableSpec& in, wire::TableSpec::Builder out);
TableSpec FromWire(wire::TableSpec::Reader in);

// The server (0..servers-1) that holds sparse key `key`: a splitmix64 hash of the key, reduced
// by multiply-shift, so sequential or strided ids spread evenly.
uint32_t SparseServer(uint64_t key, uint32_t servers);
// The server that holds dense chunk `chunk` of `spec`: round-robin from the table's offset
// (TableSpec::placement), so the first chunks of different tables land on different servers.
uint32_t DenseServer(const TableSpec& spec, uint64_t chunk, uint32_t servers);
// Chooses `spec`'s placement so that its chunks go first to the servers holding the fewest
// bytes so far, and adds its chunks' bytes (value floats) to `loads` (one entry per server;
// every trainer passes the same tables in the same order, so all choose alike). Without it a
// model whose tensors alternate one-chunk weights and small biases put every weight on the
// same server (ids alternate parity).
void PlaceDense(TableSpec* spec, std::vector<uint64_t>* loads);

// Fills a sparse row with the initializer's values for `key` (a row of the unsplit table, see
// InitSpec::shard: a shard's row k is the unsplit table's row k + shard.BlockOffset(0)). Deterministic: the same key gives the same values on any
// server at any time.
void InitValues(const InitSpec& init, uint64_t key, std::span<float> value);
// Fills dense elements [first, first + value.size()): element g's value depends only on g (and
// init.shard and row_dim), so a dense tensor's initial values do not depend on its chunking,
// the number of servers, or how tensor parallelism split it.
void InitDenseValues(const InitSpec& init, uint64_t first, std::span<float> value);

// The step count kept in a record's last slot (stored as raw bits, exact to 2^32).
uint32_t RecordStep(std::span<const float> record);
void SetRecordStep(std::span<float> record, uint32_t step);

}  // namespace strata
