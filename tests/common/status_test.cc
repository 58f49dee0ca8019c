// status_test.cc: Status and Result.
#include "common/status.h"
#include "common/check.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(Status, OkIsDefaultAndCheap) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(sizeof(Status), sizeof(void*));
}

TEST(Status, CarriesCodeAndMessage) {
  Status s = Status::NotFound("table \"emb\"");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.IsNotFound());
  EXPECT_EQ(s.message(), "table \"emb\"");
  EXPECT_EQ(s.ToString(), "NotFound: table \"emb\"");
}

TEST(Status, CopyAndContext) {
  Status a = Status::IOError("disk full");
  Status b = a;
  EXPECT_EQ(b.ToString(), a.ToString());
  EXPECT_EQ(a.WithContext("writing chunk 3").ToString(), "IOError: writing chunk 3: disk full");
  EXPECT_TRUE(Status().WithContext("x").ok());
}

TEST(Status, EveryCodeHasAName) {
  for (int c = 0; c < kStatusCodeCount; ++c) {
    EXPECT_NE(StatusCodeName(static_cast<StatusCode>(c)), "Unknown") << c;
  }
}

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Status UseHalf(int x, int* out) {
  STRATA_ASSIGN_OR_RETURN(int h, Half(x));
  *out = h;
  return Status::OK();
}

TEST(Result, ValueOrStatus) {
  auto r = Half(4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 2);
  auto e = Half(3);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  int out = 0;
  EXPECT_TRUE(UseHalf(8, &out).ok());
  EXPECT_EQ(out, 4);
  EXPECT_EQ(UseHalf(5, &out).code(), StatusCode::kInvalidArgument);
}

TEST(Result, OkStatusWithoutValueIsAnError) {
  Result<int> r{Status::OK()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(Check, AbortsWithOperands) {
  EXPECT_DEATH({ STRATA_CHECK_EQ(1 + 1, 3) << "arithmetic"; }, "1 \\+ 1 == 3.*2 vs 3.*arithmetic");
}

}  // namespace
}  // namespace strata
