// safetensors_test.cc: the name mapping both ways, and hostile safetensors files refused naming
// the file and what is wrong (a short file, a header past the end, a dtype other than F32, a
// byte range that does not hold the shape) with nothing written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/test_util.h"
#include "trainer/safetensors.h"

namespace strata {
namespace {

TEST(Safetensors, NamesMapBothWays) {
  bool t = false;
  EXPECT_EQ(ExportName("gpt.block12.attn.qkv.weight", &t), "transformer.h.12.attn.c_attn.weight");
  EXPECT_FALSE(t);
  EXPECT_EQ(ExportName("gpt.head.weight", &t), "lm_head.weight");
  EXPECT_TRUE(t);
  EXPECT_EQ(ExportName("mlp.fc1.weight", &t), "mlp.fc1.weight");  // not gpt: kept
  for (const char* name : {"gpt.tok.weight", "gpt.pos.weight", "gpt.block3.ln2.bias", "gpt.block0.mlp.fc2.weight",
                           "gpt.ln_f.weight", "gpt.head.weight", "ctr.wide.weight"}) {
    bool a = false, b = false;
    auto back = ImportName(ExportName(name, &a), &b);
    ASSERT_TRUE(back.ok()) << name;
    EXPECT_EQ(*back, name);
    EXPECT_EQ(a, b) << name;
  }
  EXPECT_FALSE(ImportName("transformer.h.x.ln_1.weight", &t).ok());
  EXPECT_FALSE(ImportName("transformer.h.0.attn.bias", &t).ok());  // GPT-2's mask buffer: no parameter
}

void WriteFile(const std::string& path, const std::string& header, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
  out << header << data;
}

TEST(Safetensors, HostileFilesAreRefusedNamingTheFile) {
  testing::TempDir dir;
  const std::string path = dir.File("bad.safetensors");
  struct Case {
    std::string header, data, says;
  };
  const std::string four(16, '\0');
  for (const Case& c : {Case{"", "", "not a JSON object"},
                        Case{"{\"a\": {\"dtype\": \"F16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", four, "F32 only"},
                        Case{"{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", four, "do not hold"},
                        Case{"{\"a\": {\"dtype\": \"F32\", \"shape\": [8], \"data_offsets\": [0, 32]}}", four, "do not hold"},
                        Case{"{\"a\": {\"dtype\": \"F32\", \"shape\": [2]}}", four, "data_offsets"}}) {
    WriteFile(path, c.header, c.data);
    auto r = ImportSafetensors(path, dir.File("out"));
    ASSERT_FALSE(r.ok()) << c.header;
    EXPECT_NE(r.status().ToString().find(path), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().ToString().find(c.says), std::string::npos) << r.status().ToString();
    EXPECT_FALSE(std::filesystem::exists(dir.File("out"))) << "nothing written for " << c.header;
  }
  {
    std::ofstream out(path, std::ios::binary);
    out << "abc";
  }
  EXPECT_FALSE(ImportSafetensors(path, dir.File("out")).ok());
  {  // a header length past the file's end
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(i == 0 ? 200 : 0));
    out << "{}";
  }
  auto r = ImportSafetensors(path, dir.File("out"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("header of 200 bytes"), std::string::npos) << r.status().ToString();
}

}  // namespace
}  // namespace strata
