// Tests for checkpoints in any layout (trainer/checkpoint*.h): the resharding copy against its
// element-by-element reference; tensor-parallel shards written under tp 2 read back exactly
// under tp 1, tp 4 and qkv's 3 blocks; the full-model round trip; damaged, truncated, missing
// and mismatched input refused with errors naming what and where, the targets untouched.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/checkpoint_reshard.h"
#include "trainer/nn/module.h"
#include "trainer/ops/exec.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

// The value of element g of the unsplit tensor called `name` (exact in f32).
float ValueAt(const std::string& name, int64_t g) {
  return static_cast<float>(g % 4096) + 0.25f * static_cast<float>(name.size() % 8);
}

// A model's tensors under tensor-parallel rank `index` of `parts`: a qkv weight (3 blocks along
// columns), its bias, a row-split projection, a replicated norm, and AdamW state of the qkv
// weight (split as it). Built through ParameterRegistry::CreateShard, then given ValueAt.
struct Model {
  explicit Model(int index, int parts) : reg(ops::Exec::Cpu(), 7) {
    auto split = [&](Shape g, int axis, int blocks) { return ShardSpec{std::move(g), axis, blocks, index, parts}; };
    reg.CreateShard("attn.qkv.weight", split({8, 24}, 1, 3), InitSpec::Normal(0.02f));
    reg.CreateShard("attn.qkv.bias", split({24}, 0, 3), InitSpec::Zeros());
    reg.CreateShard("attn.proj.weight", split({8, 8}, 0, 1), InitSpec::Normal(0.02f));
    reg.Create("ln.weight", {8}, InitSpec::Constant(1.0f));
    for (auto& p : reg.params()) tensors.push_back({p->name, p->shard, p->value});
    const nn::Parameter* qkv = reg.Find("attn.qkv.weight");
    tensors.push_back({"adamw.m/attn.qkv.weight", qkv->shard, ops::NewTensor(ops::Exec::Cpu(), qkv->value.shape())});
    for (ShardTensor& t : tensors) {
      float* v = t.value.data_as<float>();
      for (int64_t i = 0; i < t.value.numel(); ++i) v[i] = ValueAt(t.name, t.spec.GlobalIndex(i));
    }
  }
  void Fill(float x) {
    for (ShardTensor& t : tensors) {
      for (int64_t i = 0; i < t.value.numel(); ++i) t.value.data_as<float>()[i] = x;
    }
  }
  nn::ParameterRegistry reg;
  std::vector<ShardTensor> tensors;
};

// Writes a checkpoint of step 5 as a tp-way run's trainers would: every shard file (whole
// tensors only from tp rank 0), then the manifest.
std::string WriteTp(const std::string& dir, int tp) {
  CheckpointManifest m;
  m.step = 5;
  m.optimizer_step = 5;
  m.data_batches = 10;
  m.batch_size = 8;
  m.micro_batches = 2;
  m.tp = tp;
  for (int r = 0; r < tp; ++r) {
    Model model(r, tp);
    std::vector<ShardTensor> mine;
    for (const ShardTensor& t : model.tensors) {
      if (!t.spec.whole() || r == 0) mine.push_back(t);
    }
    fs::create_directories(CheckpointStepDir(dir, 5));
    const std::string name = ShardFileName(0, r);
    auto digest = WriteShardFile(CheckpointStepDir(dir, 5) + "/" + name, "{}", mine);
    EXPECT_TRUE(digest.ok()) << digest.status().ToString();
    m.files.push_back({name, *digest});
  }
  EXPECT_TRUE(PublishCheckpoint(dir, m).ok());
  return CheckpointStepDir(dir, 5);
}

// Every tensor of `model` holds ValueAt of its global elements.
void ExpectExact(const Model& model, const std::string& what) {
  for (const ShardTensor& t : model.tensors) {
    for (int64_t i = 0; i < t.value.numel(); ++i) {
      ASSERT_EQ(t.value.data_as<float>()[i], ValueAt(t.name, t.spec.GlobalIndex(i)))
          << what << ": " << t.name << " (" << t.spec.ToString() << ")[" << i << "]";
    }
  }
}

// Every tensor of `model` still holds `x`.
void ExpectUntouched(const Model& model, float x) {
  for (const ShardTensor& t : model.tensors) {
    for (int64_t i = 0; i < t.value.numel(); ++i) ASSERT_EQ(t.value.data_as<float>()[i], x) << t.name;
  }
}

TEST(CheckpointReshardTest, CopyMatchesTheElementwiseReference) {
  const Shape g = {6, 12, 4};
  std::vector<ShardSpec> specs = {ShardSpec::Whole(g)};
  for (int axis : {0, 1, 2}) {
    for (int blocks : {1, 2, 3}) {
      for (int parts : {2, 3, 4}) {
        for (int index = 0; index < parts; ++index) {
          ShardSpec s{g, axis, blocks, index, parts};
          if (s.Validate("t").ok()) specs.push_back(s);
        }
      }
    }
  }
  for (const ShardSpec& src : specs) {
    const int64_t n_src = ShapeNumel(src.LocalShape()).value();
    std::vector<float> from(n_src);
    for (int64_t i = 0; i < n_src; ++i) from[i] = static_cast<float>(src.GlobalIndex(i));
    for (const ShardSpec& dst : specs) {
      const int64_t n_dst = ShapeNumel(dst.LocalShape()).value();
      std::vector<float> fast(n_dst, -1), ref(n_dst, -1);
      const int64_t copied = CopyShardOverlap(src, from.data(), dst, fast.data());
      ASSERT_EQ(copied, CopyShardOverlapReference(src, from.data(), dst, ref.data()))
          << src.ToString() << " -> " << dst.ToString();
      ASSERT_EQ(fast, ref) << src.ToString() << " -> " << dst.ToString();
      EXPECT_EQ(copied > 0, ShardsOverlap(src, dst)) << src.ToString() << " -> " << dst.ToString();
    }
  }
}

TEST(CheckpointTest, Tp2ShardsLoadExactlyUnderTp1Tp2AndTp4) {
  testing::TempDir dir;
  const std::string step = WriteTp(dir.path(), 2);
  auto reader = CheckpointReader::Open(dir.path());  // follows latest
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  EXPECT_EQ(reader->path(), step);
  EXPECT_EQ(reader->manifest().tp, 2);
  EXPECT_EQ(reader->tensors().at("attn.qkv.weight").sources.size(), 2u);
  EXPECT_EQ(reader->tensors().at("ln.weight").sources.size(), 1u);  // written once
  for (int parts : {1, 2, 4}) {
    for (int index = 0; index < parts; ++index) {
      Model target(index, parts);
      target.Fill(-7);
      ASSERT_TRUE(LoadShards(*reader, target.tensors).ok());
      ExpectExact(target, "tp " + std::to_string(parts) + " rank " + std::to_string(index));
    }
  }
}

TEST(CheckpointTest, FullModelRoundTripLoadsUnderAnyLayout) {
  testing::TempDir dir;
  WriteTp(dir.path() + "/tp2", 2);
  auto reader = CheckpointReader::Open(dir.path() + "/tp2");
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(ToFullModel(*reader, dir.path() + "/full.bin").ok());
  auto full = CheckpointReader::Open(dir.path() + "/full.bin");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->manifest().step, 5);
  for (const auto& [name, info] : full->tensors()) {
    ASSERT_EQ(info.sources.size(), 1u);
    EXPECT_TRUE(full->files()[0].entries()[info.sources[0].entry].spec.whole()) << name;
  }
  auto step = FromFullModel(dir.path() + "/full.bin", dir.path() + "/back");
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_EQ(*step, dir.path() + "/back/step-5");
  auto back = CheckpointReader::Open(dir.path() + "/back");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->manifest().data_batches, 10);
  EXPECT_EQ(back->manifest().tp, 1);
  for (int parts : {1, 4}) {
    Model target(parts - 1, parts);
    target.Fill(-7);
    ASSERT_TRUE(LoadShards(*back, target.tensors).ok());
    ExpectExact(target, "from-full into tp " + std::to_string(parts));
  }
}

// Flips one byte of `path` at `offset` from its end.
void FlipByteFromEnd(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-offset, std::ios::end);
  const char c = static_cast<char>(f.get());
  f.seekp(-offset, std::ios::end);
  f.put(static_cast<char>(c ^ 0x5a));
}

TEST(CheckpointTest, DamagedValuesAreRefusedNamingFileAndTensorTargetsUntouched) {
  testing::TempDir dir;
  const std::string step = WriteTp(dir.path(), 2);
  // The last tensor of tp rank 1's file: the optimizer state (whole tensors live in tp 0's).
  FlipByteFromEnd(step + "/shard-pp0-tp1.bin", 70);
  auto reader = CheckpointReader::Open(step);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();  // the index is intact
  Model target(0, 1);
  target.Fill(-7);
  const Status s = LoadShards(*reader, target.tensors);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("shard-pp0-tp1.bin"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("adamw.m/attn.qkv.weight"), std::string::npos) << s.ToString();
  ExpectUntouched(target, -7);
  // tp rank 0 of a tp-2 run reads only tp 0's shards: the damage is not its concern.
  Model rank0(0, 2);
  EXPECT_TRUE(LoadShards(*reader, rank0.tensors).ok());
}

TEST(CheckpointTest, TruncatedAndMissingShardFilesAreRefusedNamingThem) {
  testing::TempDir dir;
  const std::string step = WriteTp(dir.path(), 2);
  const std::string file = step + "/shard-pp0-tp1.bin";
  fs::resize_file(file, fs::file_size(file) / 2);
  auto truncated = CheckpointReader::Open(step);
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kCorruption) << truncated.status().ToString();
  EXPECT_NE(truncated.status().message().find("shard-pp0-tp1.bin"), std::string::npos);
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos) << truncated.status().ToString();
  // Truncated inside its index, the file is damaged whatever the manifest says.
  fs::resize_file(file, 40);
  auto index = ShardFile::Open(file);
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kCorruption) << index.status().ToString();

  fs::remove(file);
  auto missing = CheckpointReader::Open(step);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("shard file shard-pp0-tp1.bin"), std::string::npos)
      << missing.status().ToString();
}

TEST(CheckpointTest, AShardTheManifestDoesNotListLeavesATensorUncovered) {
  testing::TempDir dir;
  const std::string step = WriteTp(dir.path(), 2);
  auto text = testing::ReadFile(step + "/manifest.json");
  auto m = CheckpointManifest::FromJson(text, "manifest");
  ASSERT_TRUE(m.ok());
  m->files.pop_back();  // tp rank 1's file
  ASSERT_TRUE(PublishCheckpoint(dir.path(), *m).ok());
  auto reader = CheckpointReader::Open(step);
  ASSERT_TRUE(reader.ok());
  Model target(0, 1);
  target.Fill(-7);
  const Status s = LoadShards(*reader, target.tensors);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("attn.qkv.weight"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("cover"), std::string::npos) << s.ToString();
  ExpectUntouched(target, -7);
  // tp rank 0 of a tp-2 run needs nothing from it.
  Model rank0(0, 2);
  EXPECT_TRUE(LoadShards(*reader, rank0.tensors).ok());
  ExpectExact(rank0, "tp 2 rank 0");
}

TEST(CheckpointTest, AGlobalShapeThatDisagreesWithTheModelIsRefusedTargetsUntouched) {
  testing::TempDir dir;
  auto reader = CheckpointReader::Open(WriteTp(dir.path(), 2));
  ASSERT_TRUE(reader.ok());
  Model target(0, 1);
  target.Fill(-7);
  // A wider model's projection: loaded after other tensors were staged.
  nn::ParameterRegistry wide(ops::Exec::Cpu(), 7);
  const nn::Parameter& p = wide.Create("attn.proj.weight", {8, 16}, InitSpec::Constant(-7.0f));
  for (ShardTensor& t : target.tensors) {
    if (t.name == p.name) t = {p.name, p.shard, p.value};
  }
  const Status s = LoadShards(*reader, target.tensors);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("attn.proj.weight has global shape [8, 8]"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("the model's is [8, 16]"), std::string::npos) << s.ToString();
  ExpectUntouched(target, -7);
}

TEST(CheckpointTest, OlderPerRankFilesAreRefusedNamingTheirFormat) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("ckpt-3.bin"), std::string("STRATACK\x02\0\0\0", 12) + std::string(64, '\0'));
  testing::WriteFile(dir.File("latest"), "ckpt-3.bin\n");
  auto reader = CheckpointReader::Open(dir.path());
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), StatusCode::kFailedPrecondition) << reader.status().ToString();
  EXPECT_NE(reader.status().message().find("format 1 or 2"), std::string::npos) << reader.status().ToString();
}

}  // namespace
}  // namespace strata
