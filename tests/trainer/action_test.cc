// action_test.cc: the text form of pipeline actions round trips, and bad text is refused with
// a message naming it.
#include "trainer/pipeline/action.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata::pipeline {
namespace {

using ::testing::HasSubstr;

TEST(ActionTest, EveryKindRoundTrips) {
  for (int k = 0; k <= static_cast<int>(ActionKind::kRecvB); ++k) {
    const Action a{static_cast<ActionKind>(k), 12, 345};
    auto back = ParseAction(ToString(a));
    ASSERT_TRUE(back.ok()) << ToString(a) << ": " << back.status().ToString();
    EXPECT_EQ(*back, a) << ToString(a);
  }
}

TEST(ActionTest, PyTorchStyleText) {
  EXPECT_EQ(ToString(Action{ActionKind::kForward, 2, 3}), "2F3");
  EXPECT_EQ(ToString(Action{ActionKind::kBackwardWeight, 0, 10}), "0W10");
  EXPECT_EQ(ToString(Action{ActionKind::kSendF, 1, 3}), "1SEND_F3");
  EXPECT_EQ(ToString(Action{ActionKind::kRecvB, 7, 0}), "7RECV_B0");
  EXPECT_EQ(ActionKindName(ActionKind::kBackwardInput), "I");
  EXPECT_EQ(
      ToString(std::vector<Action>{{ActionKind::kForward, 0, 0}, {ActionKind::kBackward, 0, 0}}),
      "0F0 0B0");
  EXPECT_EQ(ToString(std::vector<Action>{}), "");
}

TEST(ActionTest, ListsRoundTrip) {
  const std::string text = "0F0 0SEND_F0 1RECV_F0 1F0 1I0 1SEND_B0 1W0";
  auto actions = ParseActions(text);
  ASSERT_TRUE(actions.ok()) << actions.status().ToString();
  ASSERT_EQ(actions->size(), 7u);
  EXPECT_EQ((*actions)[4], (Action{ActionKind::kBackwardInput, 1, 0}));
  EXPECT_EQ(ToString(*actions), text);
  auto spaced = ParseActions("  0F0   0B0 ");
  ASSERT_TRUE(spaced.ok());
  EXPECT_EQ(spaced->size(), 2u);
  auto empty = ParseActions("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(ActionTest, BadTextNamesTheProblem) {
  const struct {
    const char* text;
    const char* why;
  } cases[] = {
      {"", "no stage number"},           {"F3", "no stage number"},
      {"-1F3", "no stage number"},       {"99999999999F3", "no stage number"},
      {"2X3", "unknown kind"},           {"2f3", "unknown kind"},
      {"2SEND3", "unknown kind"},        {"2F", "no micro-batch number"},
      {"2F-3", "no micro-batch number"}, {"2F3x", "trailing characters 'x'"},
      {"2F3 ", "trailing characters"},
  };
  for (const auto& c : cases) {
    auto a = ParseAction(c.text);
    ASSERT_FALSE(a.ok()) << "'" << c.text << "' parsed";
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(a.status().message(), HasSubstr(c.why)) << c.text;
    EXPECT_THAT(a.status().message(), HasSubstr("'" + std::string(c.text) + "'"));
  }
  auto list = ParseActions("0F0 0Q1 0B0");
  ASSERT_FALSE(list.ok());
  EXPECT_THAT(list.status().message(), HasSubstr("'0Q1'"));
}

}  // namespace
}  // namespace strata::pipeline
