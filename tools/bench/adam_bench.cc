// adam_bench.cc: strata-bench adam: the fused CPU Adam kernel (common/optim/kernels.h) in
// parameters/s for each size and thread count, beside the memory-bandwidth bound measured in
// the same run (a STREAM-style pass moving the kernel's bytes: read g, w, m, v, write w, m, v,
// 28 B a parameter), each instruction-set path, and a plain unvectorised loop.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <thread>

#include "common/check.h"
#include "common/optim/kernels.h"
#include "common/thread_pool.h"
#include "tools/bench/bench.h"

namespace strata::bench {
namespace {

constexpr double kBytesPerParam = 28;  // fp32 g, w, m, v read; w, m, v written

struct Options {
  std::string sizes = "1M,4M,16M,64M,256M";  // parameters (binary multiples)
  std::string threads;                       // empty: 1, 2, 4, ... up to the cores
  int reps = 3;
};

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Array = std::unique_ptr<float[], FreeDeleter>;

Array NewArray(int64_t n, float value) {
  const size_t bytes = (static_cast<size_t>(n) * sizeof(float) + 63) / 64 * 64;
  Array a(static_cast<float*>(std::aligned_alloc(64, bytes)));
  STRATA_CHECK(a != nullptr) << "adam bench: no memory for " << n << " floats";
  for (int64_t i = 0; i < n; ++i) a[i] = value;
  return a;
}

// The four arrays of an Adam step on n parameters.
struct Arrays {
  int64_t n;
  Array g, w, m, v;
  explicit Arrays(int64_t count)
      : n(count), g(NewArray(n, 0)), w(NewArray(n, 1)), m(NewArray(n, 0)), v(NewArray(n, 1e-4f)) {
    for (int64_t i = 0; i < n; ++i) {
      g[i] = static_cast<float>((static_cast<uint32_t>(i) * 2654435761u) >> 8) * 0x1p-24f - 0.5f;
    }
  }
};

// The bandwidth bound: the same streams as Adam with the least arithmetic on them, compiled for
// the widest vectors this CPU has (so that it is never the slower for lack of them).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void StreamRange(float* __restrict w, float* __restrict m, float* __restrict v,
                 const float* __restrict g, int64_t n) {
  const float s = 1e-7f;
  for (int64_t i = 0; i < n; ++i) {
    w[i] = w[i] + s * g[i];
    m[i] = m[i] + s * v[i];
    v[i] = v[i] + s * g[i];
  }
}

void StreamPass(Arrays& a, ThreadPool& pool) {
  float *g = a.g.get(), *w = a.w.get(), *m = a.m.get(), *v = a.v.get();
  pool.ParallelFor(a.n, 1 << 16, [=](int64_t lo, int64_t hi) {
    StreamRange(w + lo, m + lo, v + lo, g + lo, hi - lo);
  });
}

// The textbook loop, kept scalar: what the kernel is worth over not vectorising at all.
__attribute__((optimize("no-tree-vectorize"))) void PlainRange(const optim::AdamHyper& h, float c1,
                                                               float c2, float* w, float* m,
                                                               float* v, const float* g,
                                                               int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * g[i] * g[i];
    w[i] -= h.lr * ((m[i] * c1) / (std::sqrt(v[i] * c2) + h.eps) + h.decoupled * w[i]);
  }
}

void PlainPass(Arrays& a, ThreadPool& pool, const optim::AdamHyper& h) {
  const float c1 = optim::BiasCorrection(h.beta1, h.step),
              c2 = optim::BiasCorrection(h.beta2, h.step);
  float *g = a.g.get(), *w = a.w.get(), *m = a.m.get(), *v = a.v.get();
  pool.ParallelFor(a.n, 1 << 16, [&](int64_t lo, int64_t hi) {
    PlainRange(h, c1, c2, w + lo, m + lo, v + lo, g + lo, hi - lo);
  });
}

// Times each pass `reps` times after one warm-up each, interleaved (rep 1 of every pass, then
// rep 2, ...) so that a busy neighbour slows them alike; returns each pass's seconds per rep.
std::vector<std::vector<double>> TimeInterleaved(
    int reps, const std::vector<std::function<void(int64_t step)>>& passes) {
  std::vector<std::vector<double>> seconds(passes.size());
  for (const auto& pass : passes) pass(1);
  for (int r = 0; r < reps; ++r) {
    for (size_t p = 0; p < passes.size(); ++p) {
      Stopwatch sw;
      passes[p](r + 2);
      seconds[p].push_back(sw.Seconds());
    }
  }
  return seconds;
}

Result<std::vector<int>> ThreadCounts(const std::string& list, int cores) {
  std::vector<int> out;
  if (list.empty()) {
    for (int t = 1; t < cores; t *= 2) out.push_back(t);
    out.push_back(cores);
    return out;
  }
  for (const std::string& s : SplitList(list)) {
    const int t = std::atoi(s.c_str());
    if (t < 1 || t > 1024) return Status::InvalidArgument("--threads: bad count \"" + s + "\"");
    out.push_back(t);
  }
  return out;
}

Result<Report> RunAdamBench(const Options& o) {
  Stopwatch total;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, ParseByteSizes(o.sizes));
  STRATA_ASSIGN_OR_RETURN(std::vector<int> threads, ThreadCounts(o.threads, cores));
  if (o.reps < 1) return Status::InvalidArgument("--reps must be at least 1");
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  const optim::Isa best = optim::BestIsa();

  Report report;
  report.config = {{"sizes", o.sizes},
                   {"threads", threads},
                   {"reps", o.reps},
                   {"best_isa", std::string(optim::IsaName(best))},
                   {"bytes_per_param", kBytesPerParam},
                   {"cores", cores}};
  Table table("Adam step (fp32 g, w, m, v; AdamW, bias correction), parameters/s",
              {{"params", "params", Table::Format::kInteger},
               {"threads", "threads", Table::Format::kInteger},
               {"bound Mp/s", "bound_mparams", Table::Format::kFixed1},
               {"bound GB/s", "bound_gbps", Table::Format::kFixed2},
               {"fused Mp/s", "fused_mparams", Table::Format::kFixed1},
               {"% of bound", "fused_pct_of_bound", Table::Format::kFixed1},
               {"avx512 Mp/s", "avx512_mparams", Table::Format::kFixed1},
               {"avx2 Mp/s", "avx2_mparams", Table::Format::kFixed1},
               {"scalar path Mp/s", "scalar_mparams", Table::Format::kFixed1},
               {"plain loop Mp/s", "plain_mparams", Table::Format::kFixed1},
               {"fused / plain", "fused_over_plain", Table::Format::kFixed2}});
  for (uint64_t size : sizes) {
    const int64_t n = static_cast<int64_t>(size);
    if (4.0 * sizeof(float) * static_cast<double>(n) > 0.6 * memory) {
      report.notes.push_back("skipped " + std::to_string(n) + " parameters: its four arrays (" +
                             FormatBytes(16 * size) + ") exceed 60% of this host's memory");
      continue;
    }
    Arrays a(n);
    for (int t : threads) {
      ThreadPool pool(t);
      optim::AdamHyper h{.lr = 1e-3f, .decoupled = 0.01f};
      // Passes: the bound, then each supported path (best first), then the plain loop.
      std::vector<std::function<void(int64_t)>> passes = {[&](int64_t) { StreamPass(a, pool); }};
      std::vector<optim::Isa> isas;
      for (optim::Isa isa : {best, optim::Isa::kAvx512, optim::Isa::kAvx2, optim::Isa::kScalar}) {
        if (!optim::IsaSupported(isa)) continue;
        if (std::find(isas.begin(), isas.end(), isa) != isas.end()) continue;
        isas.push_back(isa);
        passes.push_back([&, isa](int64_t step) {
          h.step = step;
          optim::AdamStep(h, {a.w.get(), a.m.get(), a.v.get(), a.g.get(), nullptr, n},
                          {.isa = isa, .pool = &pool});
        });
      }
      passes.push_back([&](int64_t step) {
        h.step = step;
        PlainPass(a, pool, h);
      });
      const std::vector<std::vector<double>> s = TimeInterleaved(o.reps, passes);
      auto rate = [&](size_t p) { return static_cast<double>(n) / Median(s[p]) / 1e6; };
      std::vector<double> ratios;  // the fused pass against the bound measured beside it
      for (int r = 0; r < o.reps; ++r) ratios.push_back(s[0][r] / s[1][r]);
      auto isa_rate = [&](optim::Isa isa) -> nlohmann::json {
        for (size_t i = 0; i < isas.size(); ++i) {
          if (isas[i] == isa) return rate(i + 1);
        }
        return nullptr;
      };
      const double bound = rate(0), fused = rate(1), plain = rate(passes.size() - 1);
      table.AddRow({n, t, bound, bound * kBytesPerParam / 1e3, fused, 100 * Median(ratios),
                    isa_rate(optim::Isa::kAvx512), isa_rate(optim::Isa::kAvx2),
                    isa_rate(optim::Isa::kScalar), plain, fused / plain});
    }
  }
  report.tables.push_back(std::move(table));
  report.notes.push_back(
      "fused: optim::AdamStep on the best path this CPU has (" + std::string(optim::IsaName(best)) +
      "), chunks of 64Ki parameters on a ThreadPool of `threads`; every figure is the median of "
      "--reps passes after a warm-up, in millions of parameters per second; the passes of a row "
      "run interleaved (one of each, --reps times) so a busy neighbour slows them alike, and "
      "% of bound is the median over reps of bound time / fused time.");
  report.notes.push_back(
      "bound: a STREAM-style pass over the same arrays on the same pool (w += s g; m += s v; "
      "v += s g: reads g, w, m, v and writes w, m, v, 28 B a parameter), measured beside each "
      "row; bound GB/s = bound Mp/s x 28 B.");
  report.notes.push_back(
      "scalar path: the kernel's fallback (a plain loop the compiler may vectorise for SSE2); "
      "plain loop: the same formula compiled with no vectorisation at all.");
  report.notes.push_back(HostLoadNote(static_cast<unsigned>(cores), total.Seconds()));
  return report;
}

}  // namespace

BenchFn SetupAdamBench(CLI::App& app) {
  auto o = std::make_shared<Options>();
  app.add_option("--sizes", o->sizes, "parameter counts, comma-separated (1M = 2^20)")
      ->capture_default_str();
  app.add_option("--threads", o->threads,
                 "thread counts, comma-separated (default 1, 2, 4.. cores)");
  app.add_option("--reps", o->reps, "timed passes per figure (the median is reported)")
      ->capture_default_str();
  return [o] { return RunAdamBench(*o); };
}

}  // namespace strata::bench
