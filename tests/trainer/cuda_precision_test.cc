// GPU test of train.precision bf16: a transformer block on CUDA (cuBLAS's bf16 matmuls, the
// saved activations cast to bf16 on the device) against the same block on the CPU at the same
// precision. cuBLAS's rounding of its inputs need not be the CPU's round to nearest and its sums
// run in another order, so the bound is bf16's: every output, dx and gradient within 2^-5 of the
// CPU's (relative, norm-wise), and the saved activations the same bytes. Skipped without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "common/allocator.h"
#include "trainer/nn/layers.h"
#include "trainer/ops/cuda_exec.h"
#include "trainer/ops/ops.h"
#include "tests/trainer/random_tensor.h"

namespace strata::nn {
namespace {

struct Outcome {
  std::vector<Tensor> tensors;  // y, dx, then every gradient, on the host
  int64_t saved = 0;
};

ops::Exec Bf16(ops::Exec ex) {
  ex.matmul = ops::MatmulPrecision::kBf16;
  ex.saved = DType::kBF16;
  return ex;
}

using testing::RelativeError;

// One forward and backward of the block on `ex` (sync: the CUDA stream to wait for, or null).
Outcome RunBlock(const ops::Exec& ex, ops::CudaExec* sync) {
  const ops::Exec cpu = ops::Exec::Cpu();
  auto on_device = [&](const Tensor& host) {
    if (!ex.is_cuda()) return host;
    Tensor d = ops::NewTensor(ex, host.shape());
    STRATA_CHECK_OK(d.CopyFrom(host));
    return d;
  };
  ParameterRegistry reg(ex, 3);
  TransformerBlock block(reg, "block", 64, 4, 1, 0.0f);
  Context ctx(ex, true, 5);
  Tensor y = block.Forward(on_device(testing::RandomTensor({2, 16, 64}, 9)), ctx);
  Outcome out;
  out.saved = ctx.saved_bytes();
  Tensor dx = block.Backward(on_device(testing::RandomTensor({2, 16, 64}, 10)), ctx);
  if (sync) STRATA_CHECK_OK(sync->Synchronize());
  std::vector<Tensor> all{y, dx};
  for (const auto& p : reg.params()) all.push_back(p->grad);
  for (const Tensor& t : all) {
    Tensor h = ops::NewTensor(cpu, t.shape());
    STRATA_CHECK_OK(h.CopyFrom(t));
    out.tensors.push_back(h);
  }
  return out;
}

TEST(CudaPrecisionTest, Bf16BlockMatchesTheCpusBf16) {
  if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
  auto cuda = ops::CudaExec::Create(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
  const Outcome cpu = RunBlock(Bf16(ops::Exec::Cpu()), nullptr);
  const Outcome gpu = RunBlock(Bf16((*cuda)->exec()), cuda->get());
  EXPECT_EQ(gpu.saved, cpu.saved);
  ASSERT_EQ(gpu.tensors.size(), cpu.tensors.size());
  for (size_t i = 0; i < cpu.tensors.size(); ++i) {
    EXPECT_LE(RelativeError(gpu.tensors[i], cpu.tensors[i]), 0x1p-5) << "tensor " << i << " (y, dx, gradients)";
  }
}

}  // namespace
}  // namespace strata::nn
