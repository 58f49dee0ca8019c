// curve_test.cc: CURVE key files: generated keys read back, every malformed file is an error
// naming the file (and line), keygen never overwrites, and config validation asks for the files.
#include "common/curve.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include "test_util.h"

namespace strata {
namespace {

using testing::TempDir;
using testing::WriteFile;

TEST(Curve, GeneratedKeysReadBack) {
  ASSERT_TRUE(CurveSupported());
  TempDir dir;
  ASSERT_TRUE(GenerateCurveKeys(dir.path(), {"a", "b"}).ok());
  CurveFiles files{dir.File("server.key"), dir.File("a.key"), dir.File("authorized_keys")};
  auto keys = LoadCurveKeys(files);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_TRUE(keys->enabled());
  EXPECT_EQ(keys->server.public_key.size(), 40u);
  auto b = ReadCurveKeypair(dir.File("b.key"));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(keys->authorized, (std::vector<std::string>{keys->client.public_key, b->public_key}));
  EXPECT_NE(keys->client.secret_key, b->secret_key);
  struct stat st;
  ASSERT_EQ(::stat(dir.File("a.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // secrets are private to their owner
  Status again = GenerateCurveKeys(dir.path(), {"c"});
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists) << again.ToString();
  EXPECT_NE(again.message().find("server.key"), std::string::npos) << again.ToString();
}

TEST(Curve, BadKeyFilesNameTheFileAndLine) {
  TempDir dir;
  auto pair = NewCurveKeypair();
  auto other = NewCurveKeypair();
  ASSERT_TRUE(pair.ok() && other.ok());
  struct Case {
    const char* name;
    std::string text;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"short.key", "public abc\nsecret " + pair->secret_key + "\n", "short.key:1: the public key must be 40"},
      {"word.key", "# c\nprivate " + pair->secret_key + "\n", "word.key:2: expected \"public <key>\""},
      {"half.key", "public " + pair->public_key + "\n", "half.key: a key file needs a public and a secret"},
      {"mixed.key", "public " + other->public_key + "\nsecret " + pair->secret_key + "\n",
       "mixed.key: the public key is not the secret key's"},
      {"twice.key", "public " + pair->public_key + "\npublic " + pair->public_key + "\n",
       "twice.key:2: a second public key"},
  };
  for (const Case& c : cases) {
    WriteFile(dir.File(c.name), c.text);
    auto r = ReadCurveKeypair(dir.File(c.name));
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.status().message().find(c.expected), std::string::npos) << r.status().ToString();
  }
  auto missing = ReadCurveKeypair(dir.File("none.key"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("none.key"), std::string::npos);

  WriteFile(dir.File("authorized_keys"), pair->public_key + " ok\n\nnot-a-key\n");
  auto bad = ReadAuthorizedKeys(dir.File("authorized_keys"));
  EXPECT_NE(bad.status().message().find("authorized_keys:3: expected a public key"), std::string::npos)
      << bad.status().ToString();
  WriteFile(dir.File("empty"), "# nobody\n");
  EXPECT_NE(ReadAuthorizedKeys(dir.File("empty")).status().message().find("no authorized keys"),
            std::string::npos);

  // LoadCurveKeys says which job field named the bad file.
  WriteFile(dir.File("good.key"), FormatCurveKeypair(*pair, "test"));
  auto loaded = LoadCurveKeys({dir.File("good.key"), dir.File("mixed.key"), dir.File("authorized_keys")});
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("cluster.curve.client_key"), std::string::npos)
      << loaded.status().ToString();
}

}  // namespace
}  // namespace strata
