// data_split.cc: SplitSamples and ContextChunks (data_split.h).
#include "trainer/data_split.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "trainer/ops/ops.h"

namespace strata {
namespace {

// `t` with only `chunks` of dimension `d` kept, concatenated in order.
Tensor KeepChunks(const Tensor& t, int d, const std::vector<Chunk>& chunks) {
  if (!t.defined() || t.dim() <= d) return t;
  int64_t kept = 0, span = 0;
  for (const Chunk& c : chunks) {
    kept += c.length;
    span = std::max(span, c.offset + c.length);
  }
  STRATA_CHECK(span <= t.size(d)) << "context split: chunks reach " << span << " of a dimension of " << t.size(d)
                                  << " in " << ShapeToString(t.shape());
  int64_t outer = 1, inner = static_cast<int64_t>(t.element_size());
  for (int i = 0; i < d; ++i) outer *= t.size(i);
  for (int i = d + 1; i < t.dim(); ++i) inner *= t.size(i);
  Shape shape = t.shape();
  shape[static_cast<size_t>(d)] = kept;
  Tensor out = ops::NewTensor(ops::Exec::Cpu(), shape, t.dtype());
  const auto* src = static_cast<const char*>(t.data());
  auto* dst = static_cast<char*>(out.data());
  for (int64_t o = 0; o < outer; ++o) {
    for (const Chunk& c : chunks) {
      const size_t bytes = static_cast<size_t>(c.length * inner);
      std::memcpy(dst, src + (o * t.size(d) + c.offset) * inner, bytes);
      dst += bytes;
    }
  }
  return out;
}

class SplitSource final : public DataSource {
 public:
  SplitSource(std::unique_ptr<DataSource> inner, int axis, std::vector<Chunk> chunks)
      : inner_(std::move(inner)), dim_(1 + axis), chunks_(std::move(chunks)) {}

  Batch Next() override {
    ++position_;
    return Split(inner_->Next());
  }
  std::vector<Batch> EvalSet(int64_t batch_size) override {
    std::vector<Batch> out;
    for (Batch& b : inner_->EvalSet(batch_size)) out.push_back(Split(std::move(b)));
    return out;
  }
  void Seek(int64_t position) override {
    position_ = position;
    inner_->Seek(position);
  }

 private:
  Batch Split(Batch b) const {
    const Tensor& first = b.ids.defined() ? b.ids : b.x;
    const int64_t whole = first.defined() && first.dim() > dim_ ? first.size(dim_) : 0;
    b.x = KeepChunks(b.x, dim_, chunks_);
    b.ids = KeepChunks(b.ids, dim_, chunks_);
    b.target = KeepChunks(b.target, dim_, chunks_);
    if (whole > 0 && b.tokens > 0) {
      const Tensor& kept = b.ids.defined() ? b.ids : b.x;
      b.tokens = b.tokens / whole * kept.size(dim_);
    }
    return b;
  }

  std::unique_ptr<DataSource> inner_;
  int dim_;
  std::vector<Chunk> chunks_;
};

}  // namespace

std::unique_ptr<DataSource> SplitSamples(std::unique_ptr<DataSource> inner, int axis, std::vector<Chunk> chunks) {
  return std::make_unique<SplitSource>(std::move(inner), axis, std::move(chunks));
}

std::vector<Chunk> ContextChunks(const ModelOptions& model, int64_t length, int cp, int rank) {
  // Causal attention's cost grows along the sequence: gpt balances it; per-token models split evenly.
  if (model.kind == ModelOptions::Kind::kGpt) return CausalBalancedChunks(length, cp, rank);
  return {EvenChunk(length, cp, rank)};
}

}  // namespace strata
