// ops_bench.cc: strata-bench ops: CPU GEMM GFLOP/s through ops::Matmul beside OpenBLAS's
// cblas_sgemm called directly in the same run (the peer), and the time per op for one GPT
// block's shapes (forward and backward), on the CPU or a CUDA device. On CUDA the GEMMs run at
// each matmul precision (fp32, tf32, bf16: exec.h), beside cuBLAS's own bf16 GEMM on bf16 tensors
// (what bf16 storage would reach) as the peer.
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <functional>
#include <memory>

#include "tools/bench/bench.h"
#include "trainer/nn/layers.h"
#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"
#if STRATA_HAVE_CUDA
#include <cublas_v2.h>

#include "trainer/ops/cublas_api.h"
#include "trainer/ops/cuda_exec.h"
#endif

namespace strata::bench {
namespace {

struct OpsBenchFlags {
  std::string gemm_sizes = "256,512,1024,2048";
  int reps = 5;
  std::string device = "cpu";
  std::string matmul_precision = "fp32";  // the block ops' matmuls (CUDA)
  int64_t batch = 4, context = 256, width = 768, heads = 12, vocab = 256;
};

Tensor RandomOn(const ops::Exec& ex, Shape shape, uint64_t seed) {
  Tensor host = ops::NewTensor(ops::Exec::Cpu(), shape);
  rng::Stream s(seed);
  for (int64_t i = 0; i < host.numel(); ++i) host.data_as<float>()[i] = 0.5f * static_cast<float>(s.Normal());
  if (!ex.is_cuda()) return host;
  Tensor d = ops::NewTensor(ex, shape);
  STRATA_CHECK_OK(d.CopyFrom(host));
  return d;
}

#if STRATA_HAVE_CUDA
// C = A B on n x n bf16 tensors through cuBLAS directly, fp32 accumulation: the peer of the
// matmul precisions, which keep fp32 tensors.
void NativeBf16Gemm(const ops::Exec& ex, const Tensor& a, const Tensor& b, const Tensor& c) {
  const int n = static_cast<int>(a.size(0));
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t s = ex.cublas_api->gemm_strided_batched_ex(
      static_cast<cublasHandle_t>(ex.cublas), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b.data(), CUDA_R_16BF, n,
      int64_t{n} * n, a.data(), CUDA_R_16BF, n, int64_t{n} * n, &zero, c.data(), CUDA_R_16BF, n, int64_t{n} * n, 1,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  STRATA_CHECK(s == CUBLAS_STATUS_SUCCESS) << "cublasGemmStridedBatchedEx (bf16): status " << s;
}
#endif

Result<Report> RunOpsBench(const OpsBenchFlags& f) {
  STRATA_ASSIGN_OR_RETURN(Device device, ParseDevice(f.device));
  ops::Exec ex = ops::Exec::Cpu();
#if STRATA_HAVE_CUDA
  std::unique_ptr<ops::CudaExec> cuda;
  if (device.is_cuda()) {
    STRATA_ASSIGN_OR_RETURN(cuda, ops::CudaExec::Create(device.index));
    ex = cuda->exec();
  }
#else
  if (device.is_cuda()) return Status::Unimplemented("built without CUDA");
#endif
  auto sync = [&] {
#if STRATA_HAVE_CUDA
    if (cuda) STRATA_CHECK_OK(cuda->Synchronize());
#endif
  };
  // Median seconds of `reps` timed runs after one warm-up.
  auto time = [&](const std::function<void()>& fn) {
    fn();
    sync();
    std::vector<double> samples;
    for (int r = 0; r < f.reps; ++r) {
      Stopwatch w;
      fn();
      sync();
      samples.push_back(w.Seconds());
    }
    return Median(samples);
  };

  Report report;
  report.benchmark = "ops";
  report.config = {{"device", f.device}, {"reps", f.reps}, {"batch", f.batch}, {"context", f.context},
                   {"width", f.width}, {"heads", f.heads}, {"matmul_precision", f.matmul_precision}};
  STRATA_ASSIGN_OR_RETURN(const ops::MatmulPrecision block_precision,
                          ops::ParseMatmulPrecision(f.matmul_precision));
  if (block_precision != ops::MatmulPrecision::kFp32 && !ex.is_cuda()) {
    return Status::InvalidArgument("--matmul-precision " + f.matmul_precision + " needs --device cuda");
  }

  Table gemm("GEMM (f32, square, C = A B)",
             {{"n", "n", Table::Format::kInteger},
              {"ops::Matmul GFLOP/s", "ours_gflops", Table::Format::kFixed1},
              {"cblas_sgemm GFLOP/s", "openblas_gflops", Table::Format::kFixed1},
              {"ours / peer", "ratio", Table::Format::kFixed2}});
  for (const std::string& s : SplitList(f.gemm_sizes)) {
    const int64_t n = std::stoll(s);
    const double flops = 2.0 * n * n * n;
    Tensor a = RandomOn(ex, {n, n}, 1), b = RandomOn(ex, {n, n}, 2), c = RandomOn(ex, {n, n}, 3);
    const double ours = time([&] { ops::Matmul(ex, a, b, c, false, false); });
    double peer = 0;
    if (!ex.is_cuda()) {
      peer = time([&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data_as<float>(), n,
                    b.data_as<float>(), n, 0.0f, c.data_as<float>(), n);
      });
    }
    gemm.AddRow({n, flops / ours / 1e9,
                 peer > 0 ? nlohmann::json(flops / peer / 1e9) : nlohmann::json(nullptr),
                 peer > 0 ? nlohmann::json(peer / ours) : nlohmann::json(nullptr)});
  }
  report.tables.push_back(std::move(gemm));
#if STRATA_HAVE_CUDA
  if (ex.is_cuda()) {
    Table tc("GEMM on the tensor cores (square, C = A B; fp32 tensors at each matmul precision, beside cuBLAS bf16 on bf16 tensors)",
             {{"n", "n", Table::Format::kInteger},
              {"fp32 GFLOP/s", "fp32_gflops", Table::Format::kFixed1},
              {"tf32 GFLOP/s", "tf32_gflops", Table::Format::kFixed1},
              {"bf16 GFLOP/s", "bf16_gflops", Table::Format::kFixed1},
              {"cuBLAS bf16-storage GFLOP/s", "peer_bf16_gflops", Table::Format::kFixed1},
              {"bf16 / peer", "ratio", Table::Format::kFixed2}});
    for (const std::string& s : SplitList(f.gemm_sizes + ",4096,8192")) {
      const int64_t n = std::stoll(s);
      const double flops = 2.0 * n * n * n;
      Tensor a = RandomOn(ex, {n, n}, 1), b = RandomOn(ex, {n, n}, 2), c = RandomOn(ex, {n, n}, 3);
      double at[3];
      for (int p = 0; p < 3; ++p) {
        ops::Exec px = ex;
        px.matmul = static_cast<ops::MatmulPrecision>(p);
        at[p] = time([&] { ops::Matmul(px, a, b, c, false, false); });
      }
      Tensor a16 = ops::NewTensor(ex, {n, n}, DType::kBF16), b16 = ops::NewTensor(ex, {n, n}, DType::kBF16),
             c16 = ops::NewTensor(ex, {n, n}, DType::kBF16);
      ops::Cast(ex, a, a16);
      ops::Cast(ex, b, b16);
      const double peer = time([&] { NativeBf16Gemm(ex, a16, b16, c16); });
      tc.AddRow({n, flops / at[0] / 1e9, flops / at[1] / 1e9, flops / at[2] / 1e9, flops / peer / 1e9, peer / at[2]});
    }
    report.tables.push_back(std::move(tc));
  }
#endif
  ex.matmul = block_precision;

  // One GPT block's ops at [batch * context, width].
  const int64_t b = f.batch, t = f.context, c = f.width, h = f.heads, hd = c / h, rows = b * t;
  Table per_op("GPT block ops (B=" + std::to_string(b) + ", T=" + std::to_string(t) + ", C=" +
                   std::to_string(c) + ", H=" + std::to_string(h) + ")",
               {{"op", "op"}, {"shape", "shape"}, {"time us", "us", Table::Format::kFixed1},
                {"GFLOP/s or GB/s", "rate", Table::Format::kFixed1}, {"unit", "unit"}});
  auto add = [&](const std::string& op, const std::string& shape, double seconds, double work,
                 const char* unit) {
    per_op.AddRow({op, shape, seconds * 1e6, work / seconds / 1e9, unit});
  };
  Tensor x = RandomOn(ex, {rows, c}, 4), w_qkv = RandomOn(ex, {c, 3 * c}, 5), qkv = RandomOn(ex, {rows, 3 * c}, 6);
  add("matmul qkv fwd", "[BT,C]x[C,3C]", time([&] { ops::Matmul(ex, x, w_qkv, qkv, false, false); }), 2.0 * rows * c * 3 * c, "GFLOP/s");
  Tensor w1 = RandomOn(ex, {c, 4 * c}, 7), hbuf = RandomOn(ex, {rows, 4 * c}, 8);
  add("matmul fc1 fwd", "[BT,C]x[C,4C]", time([&] { ops::Matmul(ex, x, w1, hbuf, false, false); }), 2.0 * rows * c * 4 * c, "GFLOP/s");
  Tensor dw1 = RandomOn(ex, {c, 4 * c}, 9);
  add("matmul fc1 dW", "[BT,C]^T x[BT,4C]", time([&] { ops::Matmul(ex, x, hbuf, dw1, true, false, 1.0f, 1.0f); }), 2.0 * rows * c * 4 * c, "GFLOP/s");
  Tensor hout = RandomOn(ex, {rows, 4 * c}, 10);
  const double hbytes = 2.0 * rows * 4 * c * 4;
  add("gelu fwd", "[BT,4C]", time([&] { ops::Gelu(ex, hbuf, hout); }), hbytes, "GB/s");
  add("gelu bwd", "[BT,4C]", time([&] { ops::GeluBackward(ex, hbuf, hout, hout); }), 1.5 * hbytes, "GB/s");
  Tensor g = RandomOn(ex, {c}, 11), beta = RandomOn(ex, {c}, 12), y = RandomOn(ex, {rows, c}, 13);
  Tensor mean = RandomOn(ex, {rows}, 14), rstd = RandomOn(ex, {rows}, 15), dg = RandomOn(ex, {c}, 16), db = RandomOn(ex, {c}, 17);
  const double xbytes = 2.0 * rows * c * 4;
  add("layernorm fwd", "[BT,C]", time([&] { ops::LayerNorm(ex, x, g, beta, 1e-5f, y, mean, rstd); }), xbytes, "GB/s");
  add("layernorm bwd", "[BT,C]", time([&] { ops::LayerNormBackward(ex, y, x, g, mean, rstd, y, dg, db); }), 1.5 * xbytes, "GB/s");
  const Shape hs{b, h, t, hd};
  Tensor q = RandomOn(ex, hs, 18), k = RandomOn(ex, hs, 19), v = RandomOn(ex, hs, 20), att = RandomOn(ex, {b, h, t, t}, 21), out = RandomOn(ex, hs, 22);
  const double attn_flops = 2.0 * 2.0 * b * h * t * t * hd / 2;  // causal: half the scores
  add("split heads", "[BT,3C]", time([&] { ops::SplitHeads(ex, qkv, b, h, q, k, v); }), 2.0 * rows * 3 * c * 4, "GB/s");
  add("attention fwd", "[B,H,T,hd]", time([&] { ops::CausalAttention(ex, q, k, v, att, out); }), attn_flops, "GFLOP/s");
  Tensor dq = RandomOn(ex, hs, 23), dk = RandomOn(ex, hs, 24), dv = RandomOn(ex, hs, 25);
  add("attention bwd", "[B,H,T,hd]", time([&] { ops::CausalAttentionBackward(ex, q, k, v, att, out, dq, dk, dv); }), 2 * attn_flops, "GFLOP/s");
  Tensor logits = RandomOn(ex, {rows, f.vocab}, 26), dlogits = RandomOn(ex, {rows, f.vocab}, 27);
  Tensor targets_host = ops::NewTensor(ops::Exec::Cpu(), {rows}, DType::kI32);
  for (int64_t i = 0; i < rows; ++i) targets_host.data_as<int32_t>()[i] = static_cast<int32_t>(i % f.vocab);
  Tensor targets = targets_host;
  if (ex.is_cuda()) {
    targets = ops::NewTensor(ex, {rows}, DType::kI32);
    STRATA_CHECK_OK(targets.CopyFrom(targets_host));
  }
  add("cross-entropy", "[BT,V]", time([&] { ops::CrossEntropy(ex, logits, targets, dlogits); }), 2.0 * rows * f.vocab * 4, "GB/s");
  Tensor m1 = RandomOn(ex, {c, 4 * c}, 28), m2 = RandomOn(ex, {c, 4 * c}, 29);
  add("adamw update", "[C,4C]", time([&] { ops::AdamWUpdate(ex, w1, dw1, m1, m2, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 10); }), 7.0 * c * 4 * c * 4, "GB/s");

  nn::ParameterRegistry reg(ex, 1);
  nn::TransformerBlock block(reg, "block", c, h, 1);
  Tensor x3 = RandomOn(ex, {b, t, c}, 30), dy3 = RandomOn(ex, {b, t, c}, 31);
  const double block_flops = 3.0 * (2.0 * rows * c * 12 * c + 2 * attn_flops);
  add("block fwd+bwd", "[B,T,C]", time([&] {
        nn::Context ctx(ex, true, 1);
        block.Forward(x3, ctx);
        block.Backward(dy3, ctx);
      }), block_flops, "GFLOP/s");
  report.tables.push_back(std::move(per_op));
  report.notes.push_back("median of --reps timed runs after one warm-up; CUDA timings synchronise the stream after each run");
  report.notes.push_back("GB/s counts the bytes an op must move at least (reads + writes of its f32 tensors)");
  report.notes.push_back("peer: cblas_sgemm from the same OpenBLAS, called directly on the same buffers (CPU only)");
  return report;
}

}  // namespace

BenchFn SetupOpsBench(CLI::App& app) {
  auto flags = std::make_shared<OpsBenchFlags>();
  app.add_option("--gemm-sizes", flags->gemm_sizes, "square GEMM sizes (comma-separated)");
  app.add_option("--reps", flags->reps, "timed repetitions per measurement (median reported)");
  app.add_option("--device", flags->device, "cpu or cuda[:N]");
  app.add_option("--matmul-precision", flags->matmul_precision,
                 "the block ops' matmuls: fp32, tf32 or bf16 (cuda; train.matmul_precision)");
  app.add_option("--batch", flags->batch, "GPT block: sequences");
  app.add_option("--context", flags->context, "GPT block: sequence length");
  app.add_option("--width", flags->width, "GPT block: model width");
  app.add_option("--heads", flags->heads, "GPT block: attention heads");
  app.add_option("--vocab", flags->vocab, "GPT head: vocabulary for the cross-entropy row");
  return [flags] { return RunOpsBench(*flags); };
}

}  // namespace strata::bench
