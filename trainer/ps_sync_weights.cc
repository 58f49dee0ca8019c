// ps_sync_weights.cc: where PsSync keeps an offload trainer's working weights: in the
// parameters' fp32 values, or (sync.wire bf16) in bf16 copies from which a unit's fp32 values
// are made for as long as the unit computes (ps_sync.h).
#include <vector>

#include "common/dtype.h"
#include "trainer/ops/ops.h"
#include "trainer/ps_sync.h"

namespace strata {
size_t PsSync::Floats(size_t index) const {
  return static_cast<size_t>(*ShapeNumel(dense_[index].param->shard.LocalShape()));
}

void PsSync::HoldWeightsInBf16() {
  bf16_weights_.clear();
  for (const Remote& r : dense_) {
    Tensor& v = r.param->value;
    Tensor w = ops::NewTensor(exec_, v.shape(), DType::kBF16);
    ops::Cast(exec_, v, w);  // the initial values, rounded (the first pull replaces them)
    bf16_weights_.push_back(std::move(w));
    v = Tensor();
  }
}

Status PsSync::StoreWeights(size_t index, const float* host) {
  const size_t n = Floats(index);
  if (bf16_weights_.empty()) {
    Tensor& v = dense_[index].param->value;
    return v.CopyFrom(Tensor::HostView(const_cast<float*>(host), v, DType::kF32));
  }
  std::vector<uint16_t> narrow(n);
  ConvertF32ToBF16(host, narrow.data(), n);
  return StoreWeightsBf16(index, narrow.data());
}

Status PsSync::StoreWeightsBf16(size_t index, const uint16_t* host) {
  Tensor& w = bf16_weights_[index];
  return w.CopyFrom(Tensor::HostView(const_cast<uint16_t*>(host), w, DType::kBF16));
}

Status PsSync::LoadWeightsBf16(size_t index, uint16_t* host) {
  const Tensor& w = bf16_weights_[index];
  return Tensor::HostView(host, w, DType::kBF16).CopyFrom(w);
}

// Predict (ps_sync.cc) with the weights held in bf16: the pulls and the last one are bf16 as the
// wire brought them, the extrapolation is taken in fp32 and rounded to nearest.
Status PsSync::PredictBf16(size_t index, std::vector<uint16_t>& pulled) {
  std::vector<uint16_t>& last = last_pull_bf16_[index];
  if (last.size() != pulled.size()) {
    return Status::Internal("sync.delayed_predict: parameter " + dense_[index].param->name + " changed size");
  }
  if (!last_valid_[index]) {
    STRATA_RETURN_IF_ERROR(LoadWeightsBf16(index, last.data()));
    last_valid_[index] = true;
  }
  for (size_t i = 0; i < pulled.size(); ++i) {
    last[i] = FloatToBF16(2.0f * BF16ToFloat(pulled[i]) - BF16ToFloat(last[i]));
  }
  STRATA_RETURN_IF_ERROR(StoreWeightsBf16(index, last.data()));
  last.swap(pulled);  // the next prediction starts from this pull
  return Status::OK();
}

Status PsSync::LoadWeights(size_t index, float* host) {
  const size_t n = Floats(index);
  if (bf16_weights_.empty()) {
    const Tensor& v = dense_[index].param->value;
    return Tensor::HostView(host, v, DType::kF32).CopyFrom(v);
  }
  std::vector<uint16_t> narrow(n);
  STRATA_RETURN_IF_ERROR(LoadWeightsBf16(index, narrow.data()));
  ConvertBF16ToF32(narrow.data(), host, n);
  return Status::OK();
}

void PsSync::MakeValues(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= units_.size()) return;
  for (size_t i : units_[static_cast<size_t>(unit)]) {
    Tensor& v = dense_[i].param->value;
    if (v.defined()) continue;  // made for an earlier pass not yet freed
    v = ops::NewTensor(exec_, bf16_weights_[i].shape());
    ops::Cast(exec_, bf16_weights_[i], v);
  }
}

void PsSync::FreeValues(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= units_.size()) return;
  for (size_t i : units_[static_cast<size_t>(unit)]) dense_[i].param->value = Tensor();
}

void PsSync::MakeAllValues() {
  if (bf16_weights_.empty()) return;
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) MakeValues(u);
}

void PsSync::FreeAllValues() {
  if (bf16_weights_.empty()) return;
  for (int u = 0; u < static_cast<int>(units_.size()); ++u) FreeValues(u);
}

int64_t PsSync::bf16_weight_floats() const {
  int64_t n = 0;
  for (const Tensor& w : bf16_weights_) n += w.numel();
  return n;
}

}  // namespace strata
