// device_model.h: a device no machine here has, stated instead of measured, so the planner
// (planner.h) can rank plans for it: GPT-3 1.3B or 13B on 64 H100s, say. The job file's model
// gives the shapes; the device file gives the rates:
//
//   name: DGX H100               # any text, printed with the table
//   peak_tflops: 989             # dense bf16 tensor-core FLOP/s, in 1e12
//   matmul_efficiency: 0.5       # the share of it a transformer's matrix products achieve
//   hbm_gbps: 3350               # memory bandwidth (the optimizer step is bound by it)
//   memory_gib: 80               # per device
//   reserved_gib: 4              # of which the plan may not use (CUDA context, NCCL buffers)
//   ranks_per_node: 8
//   intra_node: {latency_us: 15, bus_gbps: 360, p2p_gbps: 300}   # NVLink
//   inter_node: {latency_us: 30, bus_gbps: 40, p2p_gbps: 45}     # InfiniBand, per GPU
//
// From these, StatedCalibration writes what Calibrate would have measured, per unit of gpt:
// forward = FLOPs / (peak x efficiency) with a block's forward 24 b s h^2 + 4 b s^2 h (the
// head's 2 b s h V), the backward split into input (24 b s h^2 + 8 b s^2 h) and weight
// (24 b s h^2) halves, recomputation adding the forward (full) or attention's core (selective);
// the bytes a block keeps from Korthikanti et al. 2022 (bf16 values): s b h (34 + 5 a s / h)
// without recomputation, 34 s b h with selective, 2 s b h (the input) with full. The optimizer
// is a fused Adam reading and writing 30 bytes a parameter at hbm_gbps. Collectives are rings:
// latency + bytes x 2(n-1)/n / bus bandwidth, over NVLink inside a node and InfiniBand across.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "trainer/auto/calibrate.h"
#include "trainer/auto/comm_costs.h"
#include "trainer/train_options.h"

namespace strata {
namespace config {
class Binder;
}  // namespace config

struct LinkSpec {
  double latency_us = 0;
  double bus_gbps = 0;  // all-reduce bus bandwidth, GB/s (NCCL's busbw)
  double p2p_gbps = 0;  // one send to a peer, GB/s
};

struct DeviceModel {
  std::string name;
  double peak_tflops = 0;
  double matmul_efficiency = 0.5;
  double hbm_gbps = 0;
  double memory_gib = 0;
  double reserved_gib = 0;
  int ranks_per_node = 1;
  LinkSpec intra_node, inter_node;

  int64_t usable_bytes() const;  // (memory_gib - reserved_gib) GiB
};

void Bind(config::Binder& b, LinkSpec& o);
void Bind(config::Binder& b, DeviceModel& o);

// Reads a device file; errors name the file, the line and the field.
Result<DeviceModel> LoadDeviceModel(const std::string& path);

// The profiles `needed` lists for `job`'s model on `device` (see the top of the file).
// Unimplemented for a model other than gpt (the mlp and ctr have no stated-cost form).
Result<Calibration> StatedCalibration(const TrainJob& job, const DeviceModel& device,
                                      const std::vector<ProfileKey>& needed);

// Ring collectives and sends over the device's two links.
CommCosts StatedCommCosts(const DeviceModel& device);

}  // namespace strata
