// nccl_comm_test.cc: the NCCL communicator against CPU reference values: every collective and a
// send/recv exchange with one rank per device (2 ranks as threads need 2 devices: NCCL refuses
// two ranks of a group on one device), a group of one on a single device, and bad arguments.
// Skips without CUDA devices.
#include "trainer/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <thread>

#include "common/allocator.h"
#include "tests/trainer/inproc_trainers.h"

namespace strata {
namespace {

constexpr int kRanks = 2;

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

// Device memory for the test's floats, copied up and down synchronously (download only after
// the communicator's Synchronize()).
class DeviceFloats {
 public:
  explicit DeviceFloats(size_t count) : count_(count) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(count, 1) * sizeof(float)), cudaSuccess);
  }
  explicit DeviceFloats(const std::vector<float>& host) : DeviceFloats(host.size()) {
    EXPECT_EQ(cudaMemcpy(data_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    // A pageable upload may still be in flight when cudaMemcpy returns, and the communicator's
    // stream does not wait for the legacy stream.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(data_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;

  float* get() { return data_; }
  std::vector<float> Download() const {
    std::vector<float> host(count_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, count_ * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  float* data_ = nullptr;
  size_t count_;
};

// Small integers, so every reduction is exact in float (and kAvg divides by a power of two).
float Input(int rank, size_t j) {
  return static_cast<float>(((rank + 1) * 31 + j * 7) % 101) - 50.0f;
}

float Reference(ReduceOp op, int n, size_t j) {
  return ReferenceReduce(op, n, [j](int rank) { return Input(rank, j); });
}

class NcclCommTest : public InprocTrainersTest {
 protected:
  void SetUp() override {
    if (!CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
    StartTrainers(kRanks);
  }

  // Checks every operation of `c` (rank r of n) against the CPU reference.
  static void CheckCollectives(Communicator& c, int r, int n) {
    constexpr size_t kCount = 1001;  // deliberately odd
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      std::vector<float> host(kCount);
      for (size_t j = 0; j < kCount; ++j) host[j] = Input(r, j);
      DeviceFloats data(host);
      ASSERT_TRUE(c.AllReduce(data.get(), kCount, op).ok());
      ASSERT_TRUE(c.Synchronize().ok());
      const std::vector<float> got = data.Download();
      for (size_t j = 0; j < kCount; ++j)
        ASSERT_EQ(got[j], Reference(op, n, j)) << ReduceOpName(op) << " at " << j;

      std::vector<float> blocks(n * kCount);
      for (size_t j = 0; j < blocks.size(); ++j) blocks[j] = Input(r, j);
      DeviceFloats in(blocks), out(kCount);
      ASSERT_TRUE(c.ReduceScatter(in.get(), out.get(), kCount, op).ok());
      ASSERT_TRUE(c.Synchronize().ok());
      const std::vector<float> mine = out.Download();
      for (size_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(mine[i], Reference(op, n, r * kCount + i)) << ReduceOpName(op) << " at " << i;
      }
    }

    // All-to-all: rank r's block k goes to rank k, whose block r it becomes (grouped sends and
    // receives, a rank's own block included).
    constexpr size_t kBlock = 5;
    std::vector<float> blocks(n * kBlock);
    for (size_t j = 0; j < blocks.size(); ++j) blocks[j] = Input(r, j);
    DeviceFloats a2a_in(blocks), a2a_out(n * kBlock);
    ASSERT_TRUE(c.AllToAll(a2a_in.get(), a2a_out.get(), kBlock).ok());
    ASSERT_TRUE(c.Synchronize().ok());
    const std::vector<float> swapped = a2a_out.Download();
    for (int k = 0; k < n; ++k) {
      for (size_t i = 0; i < kBlock; ++i) EXPECT_EQ(swapped[k * kBlock + i], Input(k, r * kBlock + i));
    }

    std::vector<float> own = {static_cast<float>(r), static_cast<float>(-r), 0.5f};
    DeviceFloats in(own), all(3 * n);
    ASSERT_TRUE(c.AllGather(in.get(), all.get(), 3).ok());
    DeviceFloats b(std::vector<float>{r == n - 1 ? 42.0f : 0.0f, r == n - 1 ? 7.0f : 0.0f});
    ASSERT_TRUE(c.Broadcast(b.get(), 2, n - 1).ok());
    ASSERT_TRUE(c.Barrier().ok());  // synchronizes
    const std::vector<float> gathered = all.Download();
    for (int k = 0; k < n; ++k) {
      EXPECT_EQ(gathered[3 * k], k);
      EXPECT_EQ(gathered[3 * k + 1], -k);
      EXPECT_EQ(gathered[3 * k + 2], 0.5f);
    }
    EXPECT_EQ(b.Download(), (std::vector<float>{42, 7}));
    EXPECT_EQ(c.Broadcast(b.get(), 2, n).code(), StatusCode::kInvalidArgument);
  }

};

TEST_F(NcclCommTest, GroupOfOneOnOneDevice) {
  NcclOptions options;
  options.timeout = Millis(30000);
  auto comm = MakeNcclCommunicator(*nodes_[0], "one", 0, 1, options);
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  EXPECT_NE((*comm)->stream(), nullptr);
  CheckCollectives(**comm, 0, 1);
  float x = 0;
  EXPECT_EQ((*comm)->Send(&x, 1, 0, 0).code(), StatusCode::kInvalidArgument);  // itself
  EXPECT_EQ((*comm)->Recv(&x, 1, 1, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*comm)->Synchronize().ok());
}

TEST_F(NcclCommTest, TwoRanksOnTwoDevices) {
  if (DeviceCount() < kRanks) GTEST_SKIP() << "needs " << kRanks << " CUDA devices (one per rank)";
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      NcclOptions options;
      options.device = r;
      options.timeout = Millis(60000);
      auto comm = MakeNcclCommunicator(*nodes_[r], "world", r, kRanks, options);
      ASSERT_TRUE(comm.ok()) << comm.status().ToString();
      Communicator& c = **comm;
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), kRanks);
      CheckCollectives(c, r, kRanks);

      // Ring exchange, even ranks sending first.
      const int next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
      std::vector<float> mine(300007);
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(r * 1000003 + i);
      DeviceFloats send(mine), recv(mine.size());
      if (r % 2 == 0) {
        ASSERT_TRUE(c.Send(send.get(), mine.size(), next, 1).ok());
        ASSERT_TRUE(c.Recv(recv.get(), mine.size(), prev, 1).ok());
      } else {
        ASSERT_TRUE(c.Recv(recv.get(), mine.size(), prev, 1).ok());
        ASSERT_TRUE(c.Send(send.get(), mine.size(), next, 1).ok());
      }
      ASSERT_TRUE(c.Synchronize().ok());
      const std::vector<float> got = recv.Download();
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], static_cast<float>(prev * 1000003 + i)) << i;

      float* x = send.get();
      for (int peer : {-1, r, kRanks}) {
        EXPECT_EQ(c.Send(x, 1, peer, 0).code(), StatusCode::kInvalidArgument) << peer;
        EXPECT_EQ(c.Recv(x, 1, peer, 0).code(), StatusCode::kInvalidArgument) << peer;
      }
      EXPECT_TRUE(c.Barrier().ok());
    });
  }
  for (auto& t : threads) t.join();
}

TEST_F(NcclCommTest, BadArgumentsAreErrors) {
  EXPECT_EQ(MakeNcclCommunicator(*nodes_[0], "x", 2, 2).status().code(),
            StatusCode::kInvalidArgument);
  NcclOptions options;
  options.device = DeviceCount();
  EXPECT_EQ(MakeNcclCommunicator(*nodes_[0], "x", 0, 1, options).status().code(),
            StatusCode::kInvalidArgument);
  // A peer that never comes: the unique-id rendezvous times out, it does not hang.
  options.device = 0;
  options.timeout = Millis(300);
  EXPECT_FALSE(MakeNcclCommunicator(*nodes_[1], "lonely", 1, 2, options).ok());
}

}  // namespace
}  // namespace strata
