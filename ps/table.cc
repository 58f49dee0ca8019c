// table.cc: TableSpec validation, wire conversion, partitioning and initializers.
#include "ps/table.h"

#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "common/hash.h"

namespace strata {
namespace {

// Uniform in [0, 1) from 53 random bits.
double Uniform01(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace

std::string TableSpec::Differences(const TableSpec& other) const {
  std::string out;
  auto field = [&](const char* name, bool differs, const std::string& mine, const std::string& theirs) {
    if (!differs) return;
    if (!out.empty()) out += ", ";
    out += std::string(name) + " " + mine + " vs " + theirs;
  };
  auto num = [](auto v) { return std::to_string(v); };
  auto kind_name = [](TableKind k) { return std::string(k == TableKind::kDense ? "dense" : "sparse"); };
  auto consistency_name = [](Consistency c) {
    return std::string(c == Consistency::kBsp ? "bsp" : c == Consistency::kAsp ? "asp" : "ssp");
  };
  field("id", id != other.id, num(id), num(other.id));
  field("name", name != other.name, "\"" + name + "\"", "\"" + other.name + "\"");
  field("kind", kind != other.kind, kind_name(kind), kind_name(other.kind));
  field("dim", dim != other.dim, num(dim), num(other.dim));
  field("numel", numel != other.numel, num(numel), num(other.numel));
  field("chunk_floats", chunk_floats != other.chunk_floats, num(chunk_floats), num(other.chunk_floats));
  auto fnum = [](float v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  const OptimizerSpec &o = optimizer, &p = other.optimizer;
  field("optimizer.kind", o.kind != p.kind, num(static_cast<int>(o.kind)), num(static_cast<int>(p.kind)));
  field("optimizer.lr", o.lr != p.lr, fnum(o.lr), fnum(p.lr));
  field("optimizer.momentum", o.momentum != p.momentum, fnum(o.momentum), fnum(p.momentum));
  field("optimizer.beta1", o.beta1 != p.beta1, fnum(o.beta1), fnum(p.beta1));
  field("optimizer.beta2", o.beta2 != p.beta2, fnum(o.beta2), fnum(p.beta2));
  field("optimizer.eps", o.eps != p.eps, fnum(o.eps), fnum(p.eps));
  field("optimizer.weight_decay", o.weight_decay != p.weight_decay, fnum(o.weight_decay), fnum(p.weight_decay));
  field("optimizer.clip_norm", o.clip_norm != p.clip_norm, fnum(o.clip_norm), fnum(p.clip_norm));
  field("optimizer.initial_accumulator", o.initial_accumulator != p.initial_accumulator, fnum(o.initial_accumulator),
        fnum(p.initial_accumulator));
  field("init", !(init == other.init), "(kind " + num(static_cast<int>(init.kind)) + ", seed " + num(init.seed) + ")",
        "(kind " + num(static_cast<int>(other.init.kind)) + ", seed " + num(other.init.seed) + ")");
  field("consistency", consistency != other.consistency, consistency_name(consistency),
        consistency_name(other.consistency));
  field("staleness", staleness != other.staleness, num(staleness), num(other.staleness));
  field("aggregate", aggregate != other.aggregate, num(static_cast<int>(aggregate)),
        num(static_cast<int>(other.aggregate)));
  field("pushers", pushers != other.pushers, num(pushers), num(other.pushers));
  field("clipped", clipped != other.clipped, clipped ? "true" : "false", other.clipped ? "true" : "false");
  field("placement", placement != other.placement, num(placement), num(other.placement));
  return out;
}

Status TableSpec::Validate() const {
  const std::string where = "table " + std::to_string(id) + " (\"" + name + "\"): ";
  auto bad = [&](const std::string& what) { return Status::InvalidArgument(where + what); };
  if (name.empty() || name.size() > 256) return bad("name must be 1 to 256 bytes");
  if (kind == TableKind::kSparse) {
    if (dim == 0 || dim > (1u << 16)) return bad("dim must be in [1, 65536], got " + std::to_string(dim));
  } else {
    if (numel == 0 || numel > (1ull << 40)) return bad("numel must be in [1, 2^40], got " + std::to_string(numel));
    if (chunk_floats == 0 || chunk_floats > (1u << 26)) {
      return bad("chunk_floats must be in [1, 2^26], got " + std::to_string(chunk_floats));
    }
  }
  const OptimizerSpec& o = optimizer;
  if (!(o.lr > 0 && std::isfinite(o.lr))) return bad("optimizer.lr must be positive");
  if (!(o.momentum >= 0 && o.momentum < 1)) return bad("optimizer.momentum must be in [0, 1)");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return bad("optimizer.beta1 must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return bad("optimizer.beta2 must be in [0, 1)");
  if (!(o.eps > 0)) return bad("optimizer.eps must be positive");
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay))) return bad("optimizer.weight_decay must be >= 0");
  if (!(o.clip_norm >= 0 && std::isfinite(o.clip_norm))) return bad("optimizer.clip_norm must be >= 0");
  if (!(o.initial_accumulator >= 0)) return bad("optimizer.initial_accumulator must be >= 0");
  if (init.kind == InitKind::kUniform && !(init.a < init.b)) return bad("init: uniform needs a < b");
  if (init.kind == InitKind::kNormal && !(init.b >= 0)) return bad("init: normal needs stddev b >= 0");
  if (consistency == Consistency::kSsp && staleness > 1000000) return bad("staleness is absurd");
  if (pushers > 0 && (kind != TableKind::kDense || consistency != Consistency::kBsp)) {
    return bad("pushers is for dense BSP tables only");
  }
  if (clipped && pushers == 0) return bad("clipped (global gradient clipping) needs a dense BSP table with pushers");
  if (pushers > (1u << 20)) return bad("pushers must be at most 2^20, got " + std::to_string(pushers));
  if (!init.shard.whole()) {
    STRATA_RETURN_IF_ERROR(init.shard.Validate("table " + name + ": init shard"));
    const Shape local = init.shard.LocalShape();
    int64_t n = 1;
    for (int64_t d : local) n *= d;
    if (kind == TableKind::kDense && static_cast<uint64_t>(n) != numel) return bad("init shard does not hold numel floats");
    if (kind == TableKind::kSparse && (init.shard.axis != 0 || local.size() != 2 || local[1] != dim)) {
      return bad("init shard of a sparse table must split [rows, dim] by rows");
    }
  }
  if (init.row_dim > 0 && kind == TableKind::kDense && numel % init.row_dim != 0) return bad("init row_dim does not divide numel");
  return Status::OK();
}

int TableSpec::StateSlots() const {
  switch (optimizer.kind) {
    case OptimizerKind::kSgd: return optimizer.momentum > 0 ? 1 : 0;
    case OptimizerKind::kAdagrad: return 1;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW: return 2;
  }
  return 0;
}

int TableSpec::RecordWidth() const { return static_cast<int>(RowFloats()) * (1 + StateSlots()) + 1; }

uint32_t TableSpec::ChunkLength(uint64_t c) const {
  const uint64_t begin = c * chunk_floats;
  return static_cast<uint32_t>(std::min<uint64_t>(chunk_floats, numel - begin));
}

void ToWire(const TableSpec& in, wire::TableSpec::Builder out) {
  out.setId(in.id);
  out.setName(in.name);
  out.setKind(static_cast<wire::TableKind>(in.kind));
  out.setDim(in.dim);
  out.setNumel(in.numel);
  out.setChunkFloats(in.chunk_floats);
  auto o = out.initOptimizer();
  o.setKind(static_cast<wire::OptimizerKind>(in.optimizer.kind));
  o.setLr(in.optimizer.lr);
  o.setMomentum(in.optimizer.momentum);
  o.setBeta1(in.optimizer.beta1);
  o.setBeta2(in.optimizer.beta2);
  o.setEps(in.optimizer.eps);
  o.setWeightDecay(in.optimizer.weight_decay);
  o.setClipNorm(in.optimizer.clip_norm);
  o.setInitialAccumulator(in.optimizer.initial_accumulator);
  auto i = out.initInit();
  i.setKind(static_cast<wire::InitKind>(in.init.kind));
  i.setA(in.init.a);
  i.setB(in.init.b);
  i.setSeed(in.init.seed);
  const ShardSpec& sh = in.init.shard;
  auto global = i.initShardGlobal(static_cast<unsigned>(sh.global.size()));
  for (size_t d = 0; d < sh.global.size(); ++d) global.set(static_cast<unsigned>(d), sh.global[d]);
  i.setShardAxis(sh.axis);
  i.setShardBlocks(sh.blocks);
  i.setShardIndex(sh.index);
  i.setShardParts(sh.parts);
  i.setRowDim(in.init.row_dim);
  out.setConsistency(static_cast<wire::ConsistencyMode>(in.consistency));
  out.setStaleness(in.staleness);
  out.setAggregate(static_cast<wire::Aggregate>(in.aggregate));
  out.setPushers(in.pushers);
  out.setClipped(in.clipped);
  out.setPlacement(in.placement);
}

TableSpec FromWire(wire::TableSpec::Reader in) {
  TableSpec t;
  t.id = in.getId();
  t.name = in.getName().cStr();
  t.kind = static_cast<TableKind>(in.getKind());  // enum ranges checked by Decode
  t.dim = in.getDim();
  t.numel = in.getNumel();
  t.chunk_floats = in.getChunkFloats();
  auto o = in.getOptimizer();
  t.optimizer = {static_cast<OptimizerKind>(o.getKind()), o.getLr(), o.getMomentum(), o.getBeta1(),
                 o.getBeta2(), o.getEps(), o.getWeightDecay(), o.getClipNorm(),
                 o.getInitialAccumulator()};
  auto i = in.getInit();
  t.init = InitSpec::Of(static_cast<InitKind>(i.getKind()), i.getA(), i.getB(), i.getSeed());
  for (int64_t d : i.getShardGlobal()) t.init.shard.global.push_back(d);
  if (i.getShardParts() > 1) {
    t.init.shard.axis = i.getShardAxis();
    t.init.shard.blocks = i.getShardBlocks();
    t.init.shard.index = i.getShardIndex();
    t.init.shard.parts = i.getShardParts();
  }
  t.init.row_dim = i.getRowDim();
  t.consistency = static_cast<Consistency>(in.getConsistency());
  t.staleness = in.getStaleness();
  t.aggregate = static_cast<Aggregate>(in.getAggregate());
  t.pushers = in.getPushers();
  t.clipped = in.getClipped();
  t.placement = in.getPlacement();
  return t;
}

uint32_t SparseServer(uint64_t key, uint32_t servers) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(SplitMix64(key)) * servers) >> 64);
}

uint32_t DenseServer(const TableSpec& spec, uint64_t chunk, uint32_t servers) {
  return static_cast<uint32_t>((chunk + spec.PlacementOffset()) % servers);
}

void PlaceDense(TableSpec* spec, std::vector<uint64_t>* loads) {
  const auto servers = static_cast<uint32_t>(loads->size());
  if (servers == 0 || spec->kind != TableKind::kDense) return;
  // The offset whose heaviest server afterwards is lightest, then whose loads are most even
  // (least sum of squares; on a mix of 1- to 8-chunk tables over 8 servers the heaviest alone
  // left them 112% of a chunk apart, this 53%); ties to the smallest offset. Chunk c adds its
  // floats to server (c + o) % servers: full rounds spread evenly, so the choice is where the
  // remainder (chunks past a multiple of servers, and the short last one) lands.
  const uint64_t chunks = spec->NumChunks();
  uint32_t best = 0;
  std::pair<uint64_t, double> best_key{UINT64_MAX, 0.0};
  std::vector<uint64_t> after(servers);
  for (uint32_t o = 0; o < servers; ++o) {
    after = *loads;
    for (uint64_t c = 0; c < chunks; ++c) after[(c + o) % servers] += spec->ChunkLength(c);
    double squares = 0;
    for (uint64_t l : after) squares += static_cast<double>(l) * static_cast<double>(l);
    const std::pair<uint64_t, double> key{*std::max_element(after.begin(), after.end()), squares};
    if (key < best_key) {
      best_key = key;
      best = o;
    }
  }
  spec->placement = best;
  for (uint64_t c = 0; c < chunks; ++c) (*loads)[(c + best) % servers] += spec->ChunkLength(c);
}

namespace {
// Element j of key `key` under a uniform or normal init: a counter-based stream per (seed, key),
// so the value depends on nothing else.
float RandomInit(const InitSpec& init, uint64_t key, uint64_t j) {
  const uint64_t base = SplitMix64(init.seed ^ SplitMix64(key));
  const uint64_t r1 = SplitMix64(base + 2 * j);
  if (init.kind == InitKind::kUniform) return static_cast<float>(init.a + (init.b - init.a) * Uniform01(r1));
  const uint64_t r2 = SplitMix64(base + 2 * j + 1);
  const double u1 = 1.0 - Uniform01(r1);  // (0, 1]: log is finite
  const double u2 = Uniform01(r2);
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  return static_cast<float>(init.a + init.b * z);
}
}  // namespace

void InitValues(const InitSpec& init, uint64_t key, std::span<float> value) {
  if (!init.shard.whole()) key += static_cast<uint64_t>(init.shard.BlockOffset(0));
  switch (init.kind) {
    case InitKind::kZeros:
      std::fill(value.begin(), value.end(), 0.0f);
      return;
    case InitKind::kConstant:
      std::fill(value.begin(), value.end(), init.a);
      return;
    case InitKind::kUniform:
    case InitKind::kNormal:
      break;
  }
  for (size_t j = 0; j < value.size(); ++j) value[j] = RandomInit(init, key, j);
}

void InitDenseValues(const InitSpec& init, uint64_t first, std::span<float> value) {
  if (init.kind == InitKind::kZeros || init.kind == InitKind::kConstant) {
    InitValues(init, first, value);
    return;
  }
  for (size_t j = 0; j < value.size(); ++j) {
    const auto g = static_cast<uint64_t>(init.shard.GlobalIndex(static_cast<int64_t>(first + j)));
    value[j] = init.row_dim ? RandomInit(init, g / init.row_dim, g % init.row_dim) : RandomInit(init, g, 0);
  }
}

uint32_t RecordStep(std::span<const float> record) {
  uint32_t step;
  std::memcpy(&step, &record.back(), sizeof(step));
  return step;
}

void SetRecordStep(std::span<float> record, uint32_t step) {
  std::memcpy(&record.back(), &step, sizeof(step));
}

}  // namespace strata
