// device_model.cc: a stated device's calibration and collective costs (device_model.h).
#include "trainer/auto/device_model.h"

#include "common/config.h"
#include "trainer/models/model.h"

namespace strata {

void Bind(config::Binder& b, LinkSpec& o) {
  b.Field("latency_us", o.latency_us, "one collective's or send's fixed cost, microseconds").Range(0.0, 1e6);
  b.Field("bus_gbps", o.bus_gbps, "all-reduce bus bandwidth (NCCL's busbw), GB/s").Range(1e-3, 1e6);
  b.Field("p2p_gbps", o.p2p_gbps, "one send to a peer, GB/s").Range(1e-3, 1e6);
}

void Bind(config::Binder& b, DeviceModel& o) {
  b.Field("name", o.name, "what the device is, printed with the plans");
  b.Field("peak_tflops", o.peak_tflops, "dense bf16 tensor-core peak, 1e12 FLOP/s").Range(1e-3, 1e6);
  b.Field("matmul_efficiency", o.matmul_efficiency, "share of the peak a transformer's matrix products reach")
      .Range(1e-3, 1.0);
  b.Field("hbm_gbps", o.hbm_gbps, "device memory bandwidth, GB/s").Range(1e-3, 1e7);
  b.Field("memory_gib", o.memory_gib, "device memory, GiB").Range(1e-3, 1e6);
  b.Field("reserved_gib", o.reserved_gib, "of which plans may not use (CUDA context, NCCL buffers), GiB")
      .Range(0.0, 1e6);
  b.Field("ranks_per_node", o.ranks_per_node, "devices a node holds, joined by intra_node").Range(1, 1 << 20);
  b.Section("intra_node", o.intra_node, "the link inside a node (NVLink)");
  b.Section("inter_node", o.inter_node, "the link between nodes, per device (InfiniBand)");
  b.Require(o.reserved_gib < o.memory_gib, "reserved_gib", "must be below memory_gib");
}

int64_t DeviceModel::usable_bytes() const {
  return static_cast<int64_t>((memory_gib - reserved_gib) * 1024.0 * 1024.0 * 1024.0);
}

Result<DeviceModel> LoadDeviceModel(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(YAML::Node root, config::LoadYamlFile(path));
  STRATA_ASSIGN_OR_RETURN(DeviceModel d, config::Parse<DeviceModel>(root, path));
  for (const char* field : {"peak_tflops", "hbm_gbps", "memory_gib", "intra_node", "inter_node"}) {
    if (!root[field]) return Status::InvalidArgument(path + ": " + field + " is required (no default for a device)");
  }
  return d;
}

Result<Calibration> StatedCalibration(const TrainJob& job, const DeviceModel& device,
                                      const std::vector<ProfileKey>& needed) {
  const ModelOptions& m = job.model;
  if (m.kind != ModelOptions::Kind::kGpt) {
    return Status::Unimplemented("a stated device's costs are written for gpt only (model.kind)");
  }
  STRATA_ASSIGN_OR_RETURN(std::vector<UnitSpec> units, ModelUnits(m));
  const double rate = device.peak_tflops * 1e12 * device.matmul_efficiency;  // FLOP/s
  const double hbm = device.hbm_gbps * 1e9;                                  // B/s
  const double s = static_cast<double>(m.context), h = static_cast<double>(m.width);
  const double a = static_cast<double>(m.heads), v = static_cast<double>(m.vocab);
  Calibration cal;
  cal.key = "stated " + device.name;
  cal.optimizer_s_per_param = 30.0 / hbm;  // fused Adam: read grad, master, m, v; write master, m, v, bf16 weight
  for (const ProfileKey& key : needed) {
    const double b = static_cast<double>(key.first);
    const ParallelOptions::Recompute rc = key.second;
    std::vector<UnitProfile> prof(units.size());
    for (size_t u = 0; u < units.size(); ++u) {
      UnitProfile& p = prof[u];
      const double hidden = 2 * b * s * h;  // one [b, s, h] activation in bf16
      if (u == 0) {  // token and position lookups: memory-bound
        p.f = 3 * hidden / hbm;
        p.w = p.b = 2 * p.f;  // the rows' gradients scattered back
        p.i = 0;
        p.output_bytes = p.saved_bytes = static_cast<int64_t>(hidden);
        p.peak_bytes = static_cast<int64_t>(hidden);
      } else if (u + 1 == units.size()) {  // final norm, head, cross-entropy
        const double head = 2 * b * s * h * v / rate;
        p.f = head;
        p.i = head;
        p.w = head;
        p.b = 2 * head;
        p.output_bytes = 4;
        p.saved_bytes = static_cast<int64_t>(4 * b * s * v + 2 * hidden);  // fp32 logits, the norm's input and output
        p.peak_bytes = static_cast<int64_t>(4 * b * s * v);                  // the logits' gradient
      } else {  // a transformer block
        const double linear = 24 * b * s * h * h / rate;
        const double attention = 4 * b * s * s * h / rate;
        p.f = linear + attention;
        p.w = linear;
        p.i = linear + 2 * attention;
        const double whole = b * s * h * (34 + 5 * a * s / h);  // bytes, Korthikanti et al. 2022
        double saved = whole;
        if (rc == ParallelOptions::Recompute::kFull) {
          p.i += p.f;
          saved = hidden;
        } else if (rc == ParallelOptions::Recompute::kSelective) {
          p.i += attention;
          saved = 34 * b * s * h;
        }
        p.b = p.i + p.w;
        p.output_bytes = static_cast<int64_t>(hidden);
        p.saved_bytes = static_cast<int64_t>(saved);
        // Above what it keeps: what recomputation brings back, and the MLP's [b, s, 4h] gradient.
        p.peak_bytes = static_cast<int64_t>(whole - saved + 4 * hidden);
      }
    }
    cal.units[key] = std::move(prof);
  }
  return cal;
}

CommCosts StatedCommCosts(const DeviceModel& device) {
  // One entry at n = 2 is exact for a ring: CommCosts scales the bandwidth term by 2(n-1)/n.
  auto ring = [](const LinkSpec& l) { return LinkFit{l.latency_us * 1e-6, 1.0 / (l.bus_gbps * 1e9)}; };
  auto send = [](const LinkSpec& l) { return LinkFit{l.latency_us * 1e-6, 1.0 / (l.p2p_gbps * 1e9)}; };
  CommCosts c;
  c.ranks_per_node = device.ranks_per_node;
  c.all_reduce[2] = ring(device.intra_node);
  c.p2p = send(device.intra_node);
  c.all_reduce_inter[2] = ring(device.inter_node);
  c.p2p_inter = send(device.inter_node);
  return c;
}

}  // namespace strata
