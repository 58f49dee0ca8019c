// ps_sync_grads.cc: an offload trainer's gradients, which exist per unit: made (zeroed) at the
// unit's first backward of a step, pushed as soon as backward finished them, and freed once the
// servers acknowledged the push (ps_sync.h). A push in bf16 reads its own rounded copy, so its
// fp32 gradient goes at once; an fp32 push from host memory reads the gradient in place.
#include <algorithm>
#include <chrono>
#include <vector>

#include "common/dtype.h"
#include "trainer/ops/ops.h"
#include "trainer/ps_sync.h"

namespace strata {
namespace {

int64_t Bytes(const std::vector<float>& v) { return static_cast<int64_t>(v.size() * sizeof(float)); }
int64_t Bytes(const std::vector<uint16_t>& v) { return static_cast<int64_t>(v.size() * sizeof(uint16_t)); }

}  // namespace

void PsSync::HoldGradsPerUnit() {
  grad_per_unit_.assign(dense_.size(), false);
  grad_shape_.assign(dense_.size(), {});
  for (const std::vector<size_t>& unit : units_) {
    for (size_t i : unit) {
      grad_per_unit_[i] = true;
      grad_shape_[i] = dense_[i].param->grad.shape();
      dense_[i].param->grad = Tensor();
    }
  }
}

void PsSync::CountGradBytes(int64_t bytes) {
  grad_bytes_ += bytes;
  grad_peak_bytes_ = std::max(grad_peak_bytes_, grad_bytes_);
}

void PsSync::MakeGrad(size_t index) {
  Tensor& g = dense_[index].param->grad;
  if (g.defined() || !grad_per_unit_[index]) return;
  g = ops::NewZeros(exec_, grad_shape_[index]);
  CountGradBytes(static_cast<int64_t>(g.nbytes()));
}

void PsSync::FreeGrad(size_t index) {
  Tensor& g = dense_[index].param->grad;
  if (!g.defined() || !grad_per_unit_[index]) return;
  CountGradBytes(-static_cast<int64_t>(g.nbytes()));
  g = Tensor();
}

void PsSync::MakeGrads(int unit) {
  if (unit < 0 || static_cast<size_t>(unit) >= units_.size()) return;
  for (size_t i : units_[static_cast<size_t>(unit)]) MakeGrad(i);
}

PsSync::Push PsSync::SendDense(uint32_t table, const Tensor& g) {
  Push p;
  if (wire_bf16_) {
    auto narrow = std::make_shared<std::vector<uint16_t>>();
    RoundToBf16(g, *narrow);
    p.copy_bytes = Bytes(*narrow);
    p.f = {client_.PushDenseBf16(table, narrow->data(), narrow), Clock::now()};
    p.copy = std::move(narrow);
  } else if (g.is_cpu() && g.is_contiguous()) {
    p.f = {client_.PushDense(table, g.data_as<float>(), std::make_shared<Tensor>(g)), Clock::now()};
  } else {
    auto host = std::make_shared<std::vector<float>>(static_cast<size_t>(g.numel()));
    STRATA_CHECK_OK(Tensor::HostView(host->data(), g).CopyFrom(g));
    p.copy_bytes = Bytes(*host);
    p.f = {client_.PushDense(table, host->data(), host), Clock::now()};
    p.copy = std::move(host);
  }
  return p;
}

PsTicket PsSync::SendSparse(const Remote& r, int64_t rows) {
  // PsClient::Push copies the rows (it sums a repeated key's), so a host copy may go at once.
  const Tensor g = r.param->grad.Narrow(0, 0, rows);
  if (g.is_cpu() && g.is_contiguous()) return client_.Push(r.table, keys_, g.data_as<float>(), wire_bf16_);
  std::vector<float> host(static_cast<size_t>(g.numel()));
  STRATA_CHECK_OK(Tensor::HostView(host.data(), g).CopyFrom(g));
  return client_.Push(r.table, keys_, host.data(), wire_bf16_);
}

void PsSync::PushDense(const Remote& r) {
  const size_t index = dense_index_[r.param];
  pushed_[index] = true;
  MakeGrad(index);  // zeros, if backward never reached it
  Tensor& g = r.param->grad;
  if (dense_scale_ != 1.0f) ops::Scale(exec_, g, dense_scale_);
  Push& p = pushes_.emplace_back(SendDense(r.table, g));
  CountGradBytes(p.copy_bytes);
  if (!p.copy) {
    p.grad = index;  // read in place: freed once acknowledged
  } else {
    FreeGrad(index);
  }
}

void PsSync::GradReady(nn::Parameter& p) {
  if (!offload()) return;
  auto it = dense_index_.find(&p);
  if (it == dense_index_.end()) return;  // sparse: its compact rows go at Finish
  if (pushed_[it->second]) {
    // A second report means the gradient changed after its push (a shared weight).
    throw nn::CollectiveFailed(Status::FailedPrecondition(
        "parameter " + p.name + " reported ready twice in one step: sync.mode offload pushes it at the first"));
  }
  Reap();
  PushDense(dense_[it->second]);
}

Status PsSync::Acknowledge(Push& p) {
  Status s = WaitRecorded(p.f, /*pull=*/false, "push");
  p.acknowledged = true;
  CountGradBytes(-p.copy_bytes);
  p.copy.reset();  // the frames' references keep it while ZeroMQ may still send one
  if (p.grad != kCopied) FreeGrad(p.grad);
  return s;
}

void PsSync::Reap() {
  const auto started = Clock::now();
  bool waited = false;
  for (Push& p : pushes_) {
    if (p.acknowledged || !PsClient::Arrived(p.f.ticket)) continue;
    // The replies are in: no wait, unless a part failed and goes again.
    if (Status s = Acknowledge(p); !s.ok() && push_error_.ok()) push_error_ = s;
    waited = true;
  }
  if (waited) push_exposed_ += SecondsSince(started);
}

Status PsSync::AcknowledgeAll() {
  Status status = push_error_;
  push_error_ = Status::OK();
  for (Push& p : pushes_) {
    if (p.acknowledged) continue;
    if (Status s = Acknowledge(p); !s.ok() && status.ok()) status = s;
  }
  pushes_.clear();
  return status;
}

void PsSync::RoundToBf16(const Tensor& g, std::vector<uint16_t>& out) {
  out.resize(static_cast<size_t>(g.numel()));
  if (g.is_cpu() && g.is_contiguous()) {
    ConvertF32ToBF16(g.data_as<float>(), out.data(), out.size());
    return;
  }
  std::vector<float> host(out.size());
  STRATA_CHECK_OK(Tensor::HostView(host.data(), g).CopyFrom(g));
  ConvertF32ToBF16(host.data(), out.data(), out.size());
}

}  // namespace strata
