// device_test.cc: ChooseCudaDevice, the GPU a trainer takes (no GPU needed: a pure function).
#include "trainer/device.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

int Pick(const std::string& spec, int visible, bool cluster, int rank, int local_task) {
  Result<int> r = ChooseCudaDevice(spec, visible, cluster, rank, local_task);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : -1;
}

TEST(ChooseCudaDeviceTest, TheLocalTaskPicksModuloTheVisibleGpus) {
  // srun -n 8 on two nodes of 4 GPUs each, every GPU visible to every task: SLURM_LOCALID 0..3.
  for (int local = 0; local < 4; ++local) EXPECT_EQ(Pick("cuda", 4, true, 7 - local, local), local);
  // More tasks than GPUs on a node: they share, round-robin.
  EXPECT_EQ(Pick("cuda", 4, true, 0, 5), 1);
  EXPECT_EQ(Pick("cuda", 2, true, 0, 6), 0);
  // --gpus-per-task 1: each task sees its own GPU only, as device 0.
  for (int local = 0; local < 8; ++local) EXPECT_EQ(Pick("cuda", 1, true, local, local), 0);
}

TEST(ChooseCudaDeviceTest, TheLocalTaskBeatsTheRank) {
  // Trainer 5 of the job is the second task of its node: GPU 1, not 5 % 4.
  EXPECT_EQ(Pick("cuda", 4, true, 5, 1), 1);
}

TEST(ChooseCudaDeviceTest, WithoutALocalTaskARankOrZero) {
  EXPECT_EQ(Pick("cuda", 4, true, 6, -1), 2);   // strata-launch: consecutive ranks on one host
  EXPECT_EQ(Pick("cuda", 4, false, 6, -1), 0);  // one process, no cluster
}

TEST(ChooseCudaDeviceTest, AnExplicitIndexWins) {
  EXPECT_EQ(Pick("cuda:3", 4, true, 1, 2), 3);
  EXPECT_EQ(Pick("cuda:0", 1, true, 5, 3), 0);
  Result<int> r = ChooseCudaDevice("cuda:4", 4, true, 0, 0);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("only 4 CUDA device(s) are visible"), std::string::npos) << r.status().ToString();
}

TEST(ComputeDeviceTest, TheCpuTakesEveryPrecision) {
  Result<std::unique_ptr<ComputeDevice>> d =
      ComputeDevice::Open("cpu", false, 0, 0, -1, ops::MatmulPrecision::kBf16, DType::kBF16);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->exec().matmul, ops::MatmulPrecision::kBf16);
  EXPECT_EQ((*d)->exec().saved, DType::kBF16);
  Result<std::unique_ptr<ComputeDevice>> f16 =
      ComputeDevice::Open("cpu", false, 0, 0, -1, ops::MatmulPrecision::kFp32, DType::kF16);
  ASSERT_FALSE(f16.ok());
  EXPECT_EQ(f16.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f16.status().message().find("f16"), std::string::npos) << f16.status().ToString();
}

TEST(ChooseCudaDeviceTest, NoVisibleGpuOrABadSpecIsAnError) {
  Result<int> r = ChooseCudaDevice("cuda", 0, true, 0, 0);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("CUDA_VISIBLE_DEVICES"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(ChooseCudaDevice("cpu", 4, true, 0, 0).ok());
  EXPECT_FALSE(ChooseCudaDevice("gpu:1", 4, true, 0, 0).ok());
}

}  // namespace
}  // namespace strata
