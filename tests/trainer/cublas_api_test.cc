// cublas_api_test.cc: CublasLibrary, cuBLAS opened at run time (CUDA builds; no GPU needed: the
// library loads and its entry points resolve without a device).
#include "trainer/ops/cublas_api.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace strata::ops {
namespace {

std::string Maps() {
  std::ifstream in("/proc/self/maps");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The point of loading it at run time: a process linked against the trainer library (as every
// strata binary is) has no cuBLAS in memory until a CudaExec opens it.
TEST(CublasLibraryTest, LoadedOnlyWhenOpened) {
  EXPECT_EQ(Maps().find("libcublas"), std::string::npos) << "cuBLAS is loaded at start: is it linked again?";
  auto lib = CublasLibrary::Open(CublasLibrary::DefaultPaths());
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_NE(Maps().find("libcublas"), std::string::npos);
  const CublasApi& api = (*lib)->api();
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.destroy, nullptr);
  EXPECT_NE(api.set_stream, nullptr);
  EXPECT_NE(api.sgemm_strided_batched, nullptr);
  EXPECT_NE(api.gemm_strided_batched_ex, nullptr);  // train.matmul_precision tf32, bf16
  EXPECT_EQ((*lib)->path(), CublasLibrary::DefaultPaths()[0]);
}

TEST(CublasLibraryTest, TheFirstPathThatLoadsIsTaken) {
  const std::vector<std::string> defaults = CublasLibrary::DefaultPaths();
  ASSERT_EQ(defaults.size(), 2u);
  EXPECT_EQ(defaults[0], "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  auto lib = CublasLibrary::Open({"/nonexistent/libcublas.so.0", defaults[1]});
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_EQ((*lib)->path(), defaults[1]);
}

TEST(CublasLibraryTest, NothingToLoadNamesEveryPathTried) {
  auto lib = CublasLibrary::Open({"/nonexistent/a/libcublas.so.13", "libnot-cublas.so.7"});
  ASSERT_FALSE(lib.ok());
  EXPECT_TRUE(lib.status().IsNotFound()) << lib.status().ToString();
  const std::string m = lib.status().message();
  EXPECT_NE(m.find("cuBLAS could not be loaded"), std::string::npos) << m;
  EXPECT_NE(m.find("/nonexistent/a/libcublas.so.13: "), std::string::npos) << m;
  EXPECT_NE(m.find("libnot-cublas.so.7: "), std::string::npos) << m;
}

TEST(CublasLibraryTest, ALibraryThatIsNotCublasNamesTheMissingEntryPoint) {
  auto lib = CublasLibrary::Open({"libm.so.6"});
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.status().message().find("libm.so.6 has no cublasCreate_v2"), std::string::npos)
      << lib.status().ToString();
}

}  // namespace
}  // namespace strata::ops
