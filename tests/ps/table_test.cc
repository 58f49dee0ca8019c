// table_test.cc: TableSpec's pushers field: only dense BSP tables take it, and it travels on
// the wire (and into the tables file) unchanged. Differences names what two specs differ in.
#include "ps/table.h"

#include <gtest/gtest.h>

#include <capnp/message.h>

namespace strata {
namespace {

TableSpec DenseBsp() {
  TableSpec t;
  t.id = 3;
  t.name = "w";
  t.kind = TableKind::kDense;
  t.numel = 100;
  t.consistency = Consistency::kBsp;
  t.pushers = 4;
  return t;
}

TEST(TableSpecPushers, OnlyDenseBspTablesTakeIt) {
  EXPECT_TRUE(DenseBsp().Validate().ok());
  TableSpec asp = DenseBsp();
  asp.consistency = Consistency::kAsp;
  Status s = asp.Validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("pushers"), std::string::npos) << s.ToString();
  TableSpec sparse = DenseBsp();
  sparse.kind = TableKind::kSparse;
  sparse.dim = 8;
  EXPECT_EQ(sparse.Validate().code(), StatusCode::kInvalidArgument);
}

TEST(TableSpecDifferences, NamesEachFieldThatDiffers) {
  EXPECT_EQ(DenseBsp().Differences(DenseBsp()), "");
  TableSpec other = DenseBsp();
  other.pushers = 2;
  other.numel = 101;
  other.optimizer.lr = 0.5f;
  EXPECT_EQ(DenseBsp().Differences(other), "numel 100 vs 101, optimizer.lr 0.01 vs 0.5, pushers 4 vs 2");
}

TEST(TableSpecPushers, TravelsOnTheWire) {
  capnp::MallocMessageBuilder m;
  ToWire(DenseBsp(), m.initRoot<wire::TableSpec>());
  const TableSpec back = FromWire(m.getRoot<wire::TableSpec>().asReader());
  EXPECT_EQ(back.pushers, 4u);
  EXPECT_EQ(back, DenseBsp());
}

}  // namespace
}  // namespace strata
