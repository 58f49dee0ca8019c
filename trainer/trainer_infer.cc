// trainer_infer.cc: the trainer's inference mode (the job's `infer` section): the checkpoint's
// parameters loaded into this trainer's own plan (ps and hybrid: those the servers hold are
// served by them from the checkpoint's tables, pulled and never pushed), then the held-out set
// evaluated, or text generated from prompts with a KV cache through the same model,
// tensor-parallel layers and pipeline stages that train.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cluster/node.h"
#include "common/logging.h"
#include "ps/client.h"
#include "trainer/checkpoint.h"
#include "trainer/ops/ops.h"
#include "trainer/ops/rng.h"
#include "trainer/pipeline/schedules.h"
#include "trainer/progress.h"
#include "trainer/sampling.h"
#include "trainer/trainer.h"

namespace strata {

Status Trainer::LoadParameters(const std::string& where) {
  auto resolved = ResolveCheckpoint(where);
  if (!resolved.ok()) return resolved.status().WithContext("infer.checkpoint");
  const std::string path = *resolved;
  STRATA_ASSIGN_OR_RETURN(const CheckpointReader reader, CheckpointReader::Open(path));
  // ps and hybrid: the parameters that live on the servers come from them (they serve the
  // checkpoint's tables); the trainer's file holds the rest (hybrid's dense ones).
  if (ServersServeCheckpoint(job_)) STRATA_RETURN_IF_ERROR(CheckServersServe(path));
  std::vector<ShardTensor> params;
  for (auto& p : model_->params().params()) {
    if (!p->remote) params.push_back({p->name, p->shard, p->value});
  }
  STRATA_RETURN_IF_ERROR(LoadShards(reader, params).WithContext("loading the parameters of " + path));
  step_ = reader.manifest().step;
  if (rank_ == 0) {
    spdlog::info("inference from {} (written by {}); this run: {}", path, reader.manifest().PlanString(),
                 plan_.ToString());
  }
  return Status::OK();
}

Status Trainer::CheckServersServe(const std::string& path) {
  const int servers = static_cast<int>(node_->view().Count(Role::kServer));
  for (int s = 0; s < servers; ++s) {
    STRATA_ASSIGN_OR_RETURN(const std::string text, client_->ServerStats(static_cast<uint32_t>(s)));
    const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    const std::string serving = j.is_object() ? j.value("serving", std::string()) : std::string();
    std::error_code ec;
    if (serving.empty() || !(serving == path || std::filesystem::equivalent(serving, path, ec))) {
      return Status::FailedPrecondition("server " + std::to_string(s) + " serves " +
                                        (serving.empty() ? std::string("no checkpoint (its tables take pushes)") : serving) +
                                        ", not " + path);
    }
  }
  return Status::OK();
}

Result<TrainSummary> Trainer::RunInference() {
  const InferOptions& o = job_.infer;
  STRATA_RETURN_IF_ERROR(LoadParameters(o.checkpoint));
  TrainSummary summary;
  summary.first_step = step_;
  if (o.mode == InferOptions::Mode::kEval) {
    STRATA_ASSIGN_OR_RETURN(summary.eval, Evaluate());
    if (rank_ == 0 && !o.output_path.empty()) {
      std::ofstream out(ForRank(o.output_path, rank_));
      out << nlohmann::json{{"step", step_}, {"eval_loss", summary.eval.loss}, {"eval_samples", summary.eval.samples},
                            {"auc", summary.eval.auc}}
                 .dump()
          << "\n";
      if (!out) return Status::IOError("cannot write " + ForRank(o.output_path, rank_));
    }
  } else {
    STRATA_RETURN_IF_ERROR(Generate());
  }
  progress_->Done();
  return summary;
}

namespace {

// One forward of this pipeline rank's stage over `ids` [B, n] (the first stage) or the previous
// stage's activation, for generation. Returns the stage's output (the last stage: logits
// [B, n, V/tp]).
struct StageWalk {
  Model& model;
  UnitRange units;
  Communicator* pp;  // null: one stage
  int pp_rank = 0, pp_size = 1;
};

Result<Tensor> ForwardStage(const StageWalk& s, const Tensor& ids, nn::DecodeState& decode, uint32_t tag) {
  nn::Context ctx(s.model.exec(), /*training=*/false, 0);
  ctx.set_decode(&decode);
  Batch b;
  b.ids = ids;
  b.samples = ids.size(0);
  Tensor x;
  const int64_t rows = ids.size(0), n = ids.size(1);
  if (s.pp_rank > 0) {
    x = ops::NewTensor(s.model.exec(), {rows, n, s.model.units()[static_cast<size_t>(s.units.first - 1)].out_width});
    STRATA_RETURN_IF_ERROR(s.pp->Recv(x.data_as<float>(), static_cast<size_t>(x.numel()), s.pp_rank - 1, tag)
                               .WithContext("generation: the previous stage's activation"));
  }
  Tensor out = s.model.ForwardUnits(s.units, b, x, ctx);
  if (s.pp_rank + 1 < s.pp_size) {
    STRATA_RETURN_IF_ERROR(s.pp->Send(out.data_as<float>(), static_cast<size_t>(out.numel()), s.pp_rank + 1, tag)
                               .WithContext("generation: the activation to the next stage"));
  }
  return out;
}

}  // namespace

Status Trainer::Generate() {
  const InferOptions& o = job_.infer;
  const ModelOptions& m = job_.model;
  if (m.kind != ModelOptions::Kind::kGpt) return Status::InvalidArgument("infer.mode generate: model gpt only");
  if (plan_.vpp != 1) return Status::InvalidArgument("infer.mode generate: one stage per pipeline rank (parallel.vpp 1)");
  if (job_.parallel.sequence_parallel) {
    return Status::InvalidArgument("infer.mode generate: parallel.sequence_parallel splits a sequence; generation "
                                   "extends it a token at a time (set it false)");
  }
  // This replica's prompts: every dp-th, from its rank.
  std::vector<size_t> mine;
  for (size_t i = static_cast<size_t>(groups_.dp_rank); i < o.prompts.size(); i += static_cast<size_t>(plan_.dp)) {
    mine.push_back(i);
  }
  const auto rows = static_cast<int64_t>(mine.size());
  if (rows == 0) return Status::OK();
  std::vector<std::vector<int64_t>> tokens(mine.size());
  int64_t longest = 0;
  for (size_t r = 0; r < mine.size(); ++r) {
    const std::string& text = o.prompts[mine[r]];
    if (text.empty()) return Status::InvalidArgument("infer.prompts[" + std::to_string(mine[r]) + "] is empty");
    if (static_cast<int64_t>(text.size()) >= m.context) {
      return Status::InvalidArgument("infer.prompts[" + std::to_string(mine[r]) + "] has " + std::to_string(text.size()) +
                                     " tokens: no room left in model.context " + std::to_string(m.context));
    }
    for (unsigned char c : text) tokens[r].push_back(c);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(text.size()));
  }
  std::vector<size_t> prompt_len;
  for (const auto& t : tokens) prompt_len.push_back(t.size());
  const std::vector<int> stages = pipeline::StagesOfRank(plan_.schedule, plan_.shape(), groups_.pp_rank);
  const StageWalk walk{*model_, plan_.stages.at(static_cast<size_t>(stages.at(0))), groups_.pp.get(),
                       groups_.pp_rank, plan_.pp};
  const bool last_stage = groups_.pp_rank + 1 == plan_.pp;
  const int64_t vocab = m.vocab, local_vocab = m.vocab / plan_.tp;
  nn::DecodeState decode;
  decode.capacity = m.context;
  decode.starts.assign(static_cast<size_t>(rows), 0);
  std::vector<bool> done(mine.size(), false);
  std::vector<std::vector<std::vector<float>>> saved(mine.size());  // logits per step
  // Prefill: the prompts right-padded to the longest (a row's padding sits past its own tokens,
  // which attend only backwards, and its cache slots are overwritten by its generated tokens).
  Tensor ids = ops::NewZeros(ops::Exec::Cpu(), {rows, longest}, DType::kI32);
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < tokens[static_cast<size_t>(r)].size(); ++j) {
      ids.data_as<int32_t>()[r * longest + static_cast<int64_t>(j)] = static_cast<int32_t>(tokens[static_cast<size_t>(r)][j]);
    }
  }
  std::vector<float> full(static_cast<size_t>(rows * vocab)), next(static_cast<size_t>(rows));
  const auto start = std::chrono::steady_clock::now();
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  double prefill_ms = 0;
  int64_t steps = 0;
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    ++steps;
    const auto tag = static_cast<uint32_t>(step);
    STRATA_ASSIGN_OR_RETURN(Tensor out, ForwardStage(walk, ToDevice(ids, model_->exec()), decode, tag));
    if (last_stage) {
      // Each row's last position's logits, the vocabulary gathered over tp: [B, V].
      Tensor host = ToHost(out);
      const int64_t n = host.size(1);
      std::vector<float> part(static_cast<size_t>(rows * local_vocab));
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t pos = step == 0 ? static_cast<int64_t>(prompt_len[static_cast<size_t>(r)]) - 1 : n - 1;
        std::copy_n(host.data_as<float>() + (r * n + pos) * local_vocab, local_vocab, part.data() + r * local_vocab);
      }
      if (groups_.tp) {
        std::vector<float> all(static_cast<size_t>(rows * vocab));
        STRATA_RETURN_IF_ERROR(groups_.tp->AllGather(part.data(), all.data(), part.size()).WithContext("gathering the logits"));
        for (int t = 0; t < plan_.tp; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            std::copy_n(all.data() + (t * rows + r) * local_vocab, local_vocab, full.data() + r * vocab + t * local_vocab);
          }
        }
      } else {
        full.assign(part.begin(), part.end());
      }
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = full.data() + r * vocab;
        const double draw = static_cast<double>(rng::Hash(o.seed, mine[static_cast<size_t>(r)] * 1000003 + step) >> 11) * 0x1.0p-53;
        next[static_cast<size_t>(r)] = static_cast<float>(PickToken(row, vocab, o, draw));
        if (o.save_logits && !done[static_cast<size_t>(r)]) saved[static_cast<size_t>(r)].emplace_back(row, row + vocab);
      }
    }
    // Every stage learns the tokens (the first feeds them; all advance their positions).
    if (groups_.pp) {
      STRATA_RETURN_IF_ERROR(groups_.pp->BroadcastHost(next.data(), next.size(), plan_.pp - 1).WithContext("sharing the tokens"));
    }
    bool all_done = true;
    for (int64_t r = 0; r < rows; ++r) {
      auto& t = tokens[static_cast<size_t>(r)];
      if (!done[static_cast<size_t>(r)]) {
        const auto token = static_cast<int64_t>(next[static_cast<size_t>(r)]);
        t.push_back(token);
        if (token == o.stop || static_cast<int64_t>(t.size()) >= m.context) done[static_cast<size_t>(r)] = true;
      }
      all_done = all_done && done[static_cast<size_t>(r)];
      // The next forward: each row's newest token at its position (a finished row repeats its
      // last one in place; its output is not used).
      decode.starts[static_cast<size_t>(r)] = std::min<int64_t>(static_cast<int64_t>(t.size()) - 1, m.context - 1);
    }
    if (step == 0) prefill_ms = since(start);
    if (all_done) break;
    ids = ops::NewTensor(ops::Exec::Cpu(), {rows, 1}, DType::kI32);
    for (int64_t r = 0; r < rows; ++r) {
      const auto& t = tokens[static_cast<size_t>(r)];
      ids.data_as<int32_t>()[r] = static_cast<int32_t>(t[static_cast<size_t>(decode.starts[static_cast<size_t>(r)])]);
    }
  }
  // Timing: the prefill (and the first token), then each decode step (a token for every row).
  const double total_ms = since(start);
  progress_->Metrics(nlohmann::json{{"generate", {{"rank", rank_}, {"rows", rows}, {"steps", steps},
                                                  {"prefill_ms", prefill_ms}, {"total_ms", total_ms},
                                                  {"decode_ms_per_step", steps > 1 ? (total_ms - prefill_ms) / static_cast<double>(steps - 1) : 0.0},
                                                  {"tokens_per_s", 1e3 * static_cast<double>(rows * steps) / total_ms}}}}
                         .dump());
  if (!last_stage || groups_.tp_rank != 0 || o.output_path.empty()) return Status::OK();
  const std::string path = ForRank(o.output_path, rank_);
  std::ofstream out(path);
  for (size_t r = 0; r < mine.size(); ++r) {
    const std::vector<int64_t> gen(tokens[r].begin() + static_cast<std::ptrdiff_t>(prompt_len[r]), tokens[r].end());
    std::string text;
    for (int64_t t : gen) text += static_cast<char>(t);
    nlohmann::json j = {{"prompt_index", mine[r]}, {"prompt", o.prompts[mine[r]]}, {"tokens", gen}, {"text", text}};
    if (o.save_logits) j["logits"] = saved[r];
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  if (!out) return Status::IOError("cannot write " + path);
  spdlog::info("generated for {} prompts into {}", mine.size(), path);
  return Status::OK();
}

}  // namespace strata
