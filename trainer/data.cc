// data.cc: the data sources of data.h.
#include "trainer/data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <numeric>
#include <sstream>

#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"

namespace strata {
namespace {

const ops::Exec kCpu = ops::Exec::Cpu();

// A seed per batch: batch k of a stream is a function of (seed, k) only, and sample i of it a
// function of (BatchSeed, i) only, so a shard of a batch does not depend on the other shards.
uint64_t BatchSeed(uint64_t seed, int64_t k) { return rng::Hash(seed, static_cast<uint64_t>(k)); }
uint64_t SampleSeed(uint64_t batch_seed, int64_t i) { return rng::Hash(batch_seed, static_cast<uint64_t>(i)); }

// The sample seeds of this shard's part of global batch `k`.
std::vector<uint64_t> ShardSeeds(uint64_t seed, int64_t k, int64_t global_batch, const DataShard& shard) {
  const int64_t local = global_batch / shard.count;
  std::vector<uint64_t> out(local);
  const uint64_t bs = BatchSeed(seed, k);
  const int64_t first = shard.SpanOf(k, local).in_batch;
  for (int64_t i = 0; i < local; ++i) out[i] = SampleSeed(bs, first + i);
  return out;
}

// The held-out set of a synthetic source: eval_samples drawn from a seed stream of their own,
// in batches of batch_size (the last one short).
template <typename MakeBatch>
std::vector<Batch> SyntheticEvalSet(const DataOptions& d, int64_t batch_size, MakeBatch&& make) {
  std::vector<Batch> out;
  for (int64_t i = 0; i * batch_size < d.eval_samples; ++i) {
    const int64_t n = std::min(batch_size, d.eval_samples - i * batch_size);
    std::vector<uint64_t> seeds(n);
    // Sample g of the held-out set depends on g only, not on how the set is batched.
    for (int64_t j = 0; j < n; ++j) seeds[j] = SampleSeed(d.seed ^ 0xE7A1ull, i * batch_size + j);
    out.push_back(make(seeds));
  }
  return out;
}

// Inputs on a low-dimensional manifold, targets from a nonlinear teacher of the latent point:
//   z ~ N(0, I_k),  x = z @ U (U: k x in, N(0, 1/k), so every input has unit variance),
//   y = z @ L / sqrt(k) + 0.5 tanh(z @ W / sqrt(k)) @ V / sqrt(h)     (h = kTeacherHidden),
// noise-free: every target has variance about 1.1, a tenth of it from the nonlinear part.
// k = latent_dim; latent_dim 0 makes x itself the latent point (k = in, U = I). Full-rank
// isotropic inputs are a much harder task for a ReLU MLP whose width is a small multiple of its
// input: early in training it behaves like a random-features model, whose error on a linear
// target stays near c * in / (hidden - in) (c ~ 0.36 for ReLU), about 0.1 for 1024 -> 4096; real
// inputs, like these, have far fewer degrees of freedom than coordinates.
class RegressionSource final : public DataSource {
 public:
  static constexpr int64_t kTeacherHidden = 64;
  static constexpr float kNonlinearWeight = 0.5f;

  RegressionSource(const DataOptions& d, const ModelOptions& m, int64_t batch, DataShard shard)
      : d_(d), in_(m.mlp_in), out_(m.mlp_out), k_(d.latent_dim > 0 ? d.latent_dim : m.mlp_in), seq_(d.seq_len),
        batch_(batch), shard_(shard) {
    rng::Stream s(rng::Derive(d.seed, "regression.teacher"));
    auto fill = [&s](std::vector<float>& v, int64_t n, double scale) {
      v.resize(n);
      for (auto& w : v) w = static_cast<float>(s.Normal() * scale);
    };
    const double rk = 1.0 / std::sqrt(static_cast<double>(k_));
    if (d.latent_dim > 0) fill(embed_, k_ * in_, rk);
    fill(linear_, k_ * out_, rk);
    fill(hidden_, k_ * kTeacherHidden, rk);
    fill(readout_, kTeacherHidden * out_, 1.0 / std::sqrt(static_cast<double>(kTeacherHidden)));
  }
  Batch Next() override { return Make(ShardSeeds(d_.seed, position_++, batch_, shard_)); }
  std::vector<Batch> EvalSet(int64_t batch_size) override {
    return SyntheticEvalSet(d_, batch_size, [this](const std::vector<uint64_t>& seeds) { return Make(seeds); });
  }

 private:
  // out[0, m) = v[0, k) @ a (a: k x m, row-major), summed in a fixed order: a sample's values
  // depend on its own latent point only, never on how many samples share its batch (a GEMM's
  // blocking does depend on that, and shards must tile the whole batch bit for bit).
  static void VecMat(const float* v, const std::vector<float>& a, int64_t k, int64_t m, float* out) {
    std::fill_n(out, m, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const float c = v[j];
      const float* row = a.data() + j * m;
      for (int64_t o = 0; o < m; ++o) out[o] += c * row[o];
    }
  }
  // With seq_len S, sample i is S points, point j drawn from Hash(seed_i, j).
  Batch Make(const std::vector<uint64_t>& seeds) const {
    const int64_t samples = static_cast<int64_t>(seeds.size());
    const int64_t per = seq_ > 0 ? seq_ : 1, n = samples * per;
    Batch b;
    b.x = ops::NewTensor(kCpu, seq_ > 0 ? Shape{samples, seq_, in_} : Shape{n, in_});
    b.target = ops::NewTensor(kCpu, seq_ > 0 ? Shape{samples, seq_, out_} : Shape{n, out_});
    std::vector<float> z(k_), h(kTeacherHidden), nonlinear(out_);
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t seed = seeds[static_cast<size_t>(i / per)];
      rng::Stream s(seq_ > 0 ? rng::Hash(seed, static_cast<uint64_t>(i % per)) : seed);
      for (auto& v : z) v = static_cast<float>(s.Normal());
      float* x = b.x.data_as<float>() + i * in_;
      if (embed_.empty()) {
        std::copy(z.begin(), z.end(), x);
      } else {
        VecMat(z.data(), embed_, k_, in_, x);
      }
      float* y = b.target.data_as<float>() + i * out_;
      VecMat(z.data(), linear_, k_, out_, y);
      VecMat(z.data(), hidden_, k_, kTeacherHidden, h.data());
      for (auto& v : h) v = std::tanh(v);
      VecMat(h.data(), readout_, kTeacherHidden, out_, nonlinear.data());
      for (int64_t o = 0; o < out_; ++o) y[o] += kNonlinearWeight * nonlinear[o];
    }
    b.samples = samples;
    if (seq_ > 0) b.tokens = n;
    return b;
  }
  DataOptions d_;
  int64_t in_, out_, k_, seq_, batch_;
  DataShard shard_;
  std::vector<float> embed_, linear_, hidden_, readout_;  // U, L, W, V of the comment above
};

// Click logs: each field's id is Zipf-distributed; click ~ Bernoulli(sigmoid(bias + sum of the
// planted weights of the ids)). The planted probability is returned as the oracle.
class ClickLogSource final : public DataSource {
 public:
  ClickLogSource(const DataOptions& d, const ModelOptions& m, int64_t batch, DataShard shard)
      : d_(d), fields_(m.fields), vocab_(m.field_vocab), batch_(batch), shard_(shard) {
    cdf_.resize(vocab_);
    double total = 0;
    for (int64_t r = 0; r < vocab_; ++r) total += std::pow(r + 1.0, -d.zipf_exponent);
    double acc = 0;
    for (int64_t r = 0; r < vocab_; ++r) cdf_[r] = (acc += std::pow(r + 1.0, -d.zipf_exponent) / total);
    weights_.resize(fields_ * vocab_);
    rng::Stream s(rng::Derive(d.seed, "click_log.planted"));
    for (auto& w : weights_) w = static_cast<float>(s.Normal() * d.planted_scale);
    bias_ = -1.0f;  // a CTR around 30%
  }
  Batch Next() override { return Make(ShardSeeds(d_.seed, position_++, batch_, shard_)); }
  std::vector<Batch> EvalSet(int64_t batch_size) override {
    return SyntheticEvalSet(d_, batch_size, [this](const std::vector<uint64_t>& seeds) { return Make(seeds); });
  }

 private:
  Batch Make(const std::vector<uint64_t>& seeds) const {
    const int64_t n = static_cast<int64_t>(seeds.size());
    Batch b;
    b.ids = ops::NewTensor(kCpu, {n, fields_}, DType::kI32);
    b.target = ops::NewTensor(kCpu, {n});
    b.oracle = ops::NewTensor(kCpu, {n});
    for (int64_t i = 0; i < n; ++i) {
      rng::Stream s(seeds[i]);
      double logit = bias_;
      for (int64_t f = 0; f < fields_; ++f) {
        const double u = s.Uniform();
        const int64_t rank = std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
        const int64_t id = std::min(rank, vocab_ - 1);
        b.ids.data_as<int32_t>()[i * fields_ + f] = static_cast<int32_t>(f * vocab_ + id);
        logit += weights_[f * vocab_ + id];
      }
      const double p = 1.0 / (1.0 + std::exp(-logit));
      b.oracle.data_as<float>()[i] = static_cast<float>(p);
      b.target.data_as<float>()[i] = s.Uniform() < p ? 1.0f : 0.0f;
    }
    b.samples = n;
    return b;
  }
  DataOptions d_;
  int64_t fields_, vocab_, batch_;
  DataShard shard_;
  std::vector<double> cdf_;
  std::vector<float> weights_;
  float bias_;
};

// Criteo TSV: label, 13 integer features, 26 categorical hex hashes (empty fields allowed).
// Integers become log(1 + max(x, 0)); categoricals are hashed into field_vocab ids per field.
// The last eval_samples lines are held out; training cycles over the rest in file order.
class CriteoSource final : public DataSource {
 public:
  static Result<std::unique_ptr<DataSource>> Open(const DataOptions& d, const ModelOptions& m,
                                                  int64_t batch, DataShard shard) {
    std::ifstream in(d.path);
    if (!in) return Status::NotFound("cannot open criteo file " + d.path);
    auto src = std::unique_ptr<CriteoSource>(new CriteoSource(m, batch, shard));
    std::string line;
    int64_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.empty()) continue;
      STRATA_RETURN_IF_ERROR(src->Parse(line).WithContext(d.path + ":" + std::to_string(lineno)));
    }
    const int64_t total = static_cast<int64_t>(src->labels_.size());
    if (total < 2) return Status::InvalidArgument(d.path + ": fewer than 2 samples");
    src->train_ = std::max<int64_t>(1, total - std::min(d.eval_samples, total / 2));
    return std::unique_ptr<DataSource>(std::move(src));
  }
  Batch Next() override {
    // Global batch k is lines [k * batch, (k + 1) * batch) of the training part (cyclic); this
    // shard reads its slice of them.
    const int64_t local = batch_ / shard_.count;
    const int64_t start = shard_.SpanOf(position_++, local).in_stream % train_;
    std::vector<int64_t> rows(local);
    for (int64_t i = 0; i < local; ++i) rows[i] = (start + i) % train_;
    return Make(rows);
  }
  std::vector<Batch> EvalSet(int64_t batch_size) override {
    std::vector<Batch> out;
    const int64_t total = static_cast<int64_t>(labels_.size());
    for (int64_t s = train_; s < total; s += batch_size) {
      std::vector<int64_t> rows;
      for (int64_t i = s; i < std::min(total, s + batch_size); ++i) rows.push_back(i);
      out.push_back(Make(rows));
    }
    return out;
  }

 private:
  static constexpr int kInts = 13, kCats = 26;
  CriteoSource(const ModelOptions& m, int64_t batch, DataShard shard)
      : fields_(m.fields), vocab_(m.field_vocab), dense_(m.dense), batch_(batch), shard_(shard) {}

  Status Parse(const std::string& line) {
    std::vector<std::string> cols;
    std::stringstream ss(line);
    std::string col;
    while (std::getline(ss, col, '\t')) cols.push_back(col);
    if (!line.empty() && line.back() == '\t') cols.emplace_back();
    if (cols.size() != 1 + kInts + kCats) {
      return Status::InvalidArgument("expected 40 tab-separated columns, got " +
                                     std::to_string(cols.size()));
    }
    if (cols[0] != "0" && cols[0] != "1") return Status::InvalidArgument("label must be 0 or 1");
    labels_.push_back(cols[0] == "1" ? 1.0f : 0.0f);
    for (int i = 0; i < dense_; ++i) {
      double v = 0;
      if (i < kInts && !cols[1 + i].empty()) v = std::strtod(cols[1 + i].c_str(), nullptr);
      dense_values_.push_back(static_cast<float>(std::log1p(std::max(v, 0.0))));
    }
    for (int64_t f = 0; f < fields_; ++f) {
      const std::string& c = f < kCats ? cols[1 + kInts + f] : std::string();
      const uint64_t h = c.empty() ? 0 : rng::Derive(static_cast<uint64_t>(f), c.c_str());
      ids_.push_back(static_cast<int32_t>(f * vocab_ + static_cast<int64_t>(h % vocab_)));
    }
    return Status::OK();
  }
  Batch Make(const std::vector<int64_t>& rows) const {
    const int64_t n = static_cast<int64_t>(rows.size());
    Batch b;
    b.ids = ops::NewTensor(kCpu, {n, fields_}, DType::kI32);
    b.target = ops::NewTensor(kCpu, {n});
    if (dense_ > 0) b.x = ops::NewTensor(kCpu, {n, dense_});
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(ids_.begin() + rows[i] * fields_, fields_, b.ids.data_as<int32_t>() + i * fields_);
      if (dense_ > 0) std::copy_n(dense_values_.begin() + rows[i] * dense_, dense_, b.x.data_as<float>() + i * dense_);
      b.target.data_as<float>()[i] = labels_[rows[i]];
    }
    b.samples = n;
    return b;
  }
  int64_t fields_, vocab_, dense_, batch_;
  DataShard shard_;
  int64_t train_ = 0;
  std::vector<float> labels_, dense_values_;
  std::vector<int32_t> ids_;
};

// Byte-level text: sequences of `context` + 1 bytes at offsets drawn from (seed, batch index);
// the last eval_samples bytes are held out.
class TextSource final : public DataSource {
 public:
  static Result<std::unique_ptr<DataSource>> Open(const DataOptions& d, const ModelOptions& m,
                                                  int64_t batch, DataShard shard) {
    std::ifstream in(d.path, std::ios::binary);
    if (!in) return Status::NotFound("cannot open text file " + d.path);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const int64_t n = static_cast<int64_t>(bytes.size());
    const int64_t held = std::min(d.eval_samples, n / 5);
    if (n - held < 2 * (m.context + 1) || held < m.context + 1) {
      return Status::InvalidArgument(d.path + ": too short for context " + std::to_string(m.context));
    }
    auto src = std::unique_ptr<TextSource>(new TextSource(d, m, batch, shard));
    src->bytes_ = std::move(bytes);
    src->train_end_ = n - held;
    return std::unique_ptr<DataSource>(std::move(src));
  }
  Batch Next() override {
    std::vector<int64_t> starts;
    for (uint64_t seed : ShardSeeds(d_.seed, position_++, batch_, shard_)) {
      starts.push_back(static_cast<int64_t>(rng::Hash(seed, 0) % (train_end_ - context_ - 1)));
    }
    return Make(starts);
  }
  std::vector<Batch> EvalSet(int64_t batch_size) override {
    std::vector<Batch> out;
    std::vector<int64_t> starts;
    for (int64_t st = train_end_; st + context_ + 1 <= static_cast<int64_t>(bytes_.size()); st += context_) {
      starts.push_back(st);
      if (static_cast<int64_t>(starts.size()) == batch_size) {
        out.push_back(Make(starts));
        starts.clear();
      }
    }
    if (!starts.empty()) out.push_back(Make(starts));
    return out;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  TextSource(const DataOptions& d, const ModelOptions& m, int64_t batch, DataShard shard)
      : d_(d), context_(m.context), batch_(batch), shard_(shard) {}
  Batch Make(const std::vector<int64_t>& starts) const {
    const int64_t n = static_cast<int64_t>(starts.size());
    Batch b;
    b.ids = ops::NewTensor(kCpu, {n, context_}, DType::kI32);
    b.target = ops::NewTensor(kCpu, {n, context_}, DType::kI32);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t t = 0; t < context_; ++t) {
        b.ids.data_as<int32_t>()[i * context_ + t] = bytes_[starts[i] + t];
        b.target.data_as<int32_t>()[i * context_ + t] = bytes_[starts[i] + t + 1];
      }
    }
    b.samples = n;
    b.tokens = n * context_;
    return b;
  }
  DataOptions d_;
  int64_t context_, batch_;
  DataShard shard_;
  std::vector<uint8_t> bytes_;
  int64_t train_end_ = 0;
};

}  // namespace

Result<std::unique_ptr<DataSource>> CreateDataSource(const DataOptions& data,
                                                     const ModelOptions& model,
                                                     int64_t batch_size, DataShard shard) {
  using K = DataOptions::Kind;
  using M = ModelOptions::Kind;
  const bool fits = (data.kind == K::kRegression && model.kind == M::kMlp) ||
                    ((data.kind == K::kClickLog || data.kind == K::kCriteo) && model.kind == M::kCtr) ||
                    (data.kind == K::kText && model.kind == M::kGpt);
  if (!fits) return Status::InvalidArgument("data.kind does not match model.kind");
  if (shard.count < 1 || shard.rank < 0 || shard.rank >= shard.count) {
    return Status::InvalidArgument("data shard " + std::to_string(shard.rank) + " of " + std::to_string(shard.count));
  }
  if (batch_size % shard.count != 0) {
    return Status::InvalidArgument("train.batch_size " + std::to_string(batch_size) +
                                   " (the global micro-batch) must be divisible by the " +
                                   std::to_string(shard.count) + " data-parallel trainers");
  }
  switch (data.kind) {
    case K::kRegression:
      return std::unique_ptr<DataSource>(std::make_unique<RegressionSource>(data, model, batch_size, shard));
    case K::kClickLog:
      if (model.dense != 0) return Status::InvalidArgument("click_log data has no dense features: set model.dense=0");
      return std::unique_ptr<DataSource>(std::make_unique<ClickLogSource>(data, model, batch_size, shard));
    case K::kCriteo:
      return CriteoSource::Open(data, model, batch_size, shard);
    case K::kText:
      if (model.vocab < 256) return Status::InvalidArgument("text data needs model.vocab >= 256");
      return TextSource::Open(data, model, batch_size, shard);
  }
  return Status::Internal("unknown data kind");
}

double Auc(const std::vector<float>& scores, const std::vector<float>& labels) {
  STRATA_CHECK_EQ(scores.size(), labels.size());
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double rank_sum = 0, pos = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double avg_rank = (i + j + 1) / 2.0;  // 1-based ranks i+1..j
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += avg_rank;
        pos += 1;
      }
    }
    i = j;
  }
  const double neg = static_cast<double>(scores.size()) - pos;
  if (pos == 0 || neg == 0) return 0.5;
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

double UnigramEntropy(const std::vector<uint8_t>& bytes) {
  std::vector<double> count(256, 0);
  for (uint8_t b : bytes) count[b] += 1;
  double h = 0;
  for (double c : count) {
    if (c > 0) h -= c / bytes.size() * std::log(c / bytes.size());
  }
  return h;
}

}  // namespace strata
