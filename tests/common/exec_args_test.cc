// exec_args_test.cc: ExecArgs builds the arrays execve takes, with the variables it sets in place
// of the environment's own values.
#include "common/exec_args.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace strata {
namespace {

std::vector<std::string> Strings(char* const* list) {
  std::vector<std::string> out;
  for (; *list; ++list) out.emplace_back(*list);
  return out;
}

TEST(ExecArgsTest, SetsTheVariablesOverTheEnvironmentsAndKeepsTheRest) {
  setenv("STRATA_EXEC_ARGS_TEST_A", "from-environment", 1);
  setenv("STRATA_EXEC_ARGS_TEST_AB", "kept", 1);
  ExecArgs exec({"/bin/true", "--flag"}, {"STRATA_EXEC_ARGS_TEST_A=1"});
  EXPECT_EQ(Strings(exec.argv()), (std::vector<std::string>{"/bin/true", "--flag"}));
  const std::vector<std::string> env = Strings(exec.envp());
  int a = 0, ab = 0;
  for (const std::string& e : env) {
    if (e.starts_with("STRATA_EXEC_ARGS_TEST_A=")) {
      ++a;
      EXPECT_EQ(e, "STRATA_EXEC_ARGS_TEST_A=1") << "the environment's value went in beside the one set";
    }
    ab += e == "STRATA_EXEC_ARGS_TEST_AB=kept" ? 1 : 0;
  }
  EXPECT_EQ(a, 1);
  EXPECT_EQ(ab, 1) << "a variable whose name only starts with a set one's was dropped";
  EXPECT_GT(env.size(), 2u) << "the rest of the environment is missing";
  unsetenv("STRATA_EXEC_ARGS_TEST_A");
  unsetenv("STRATA_EXEC_ARGS_TEST_AB");
}

}  // namespace
}  // namespace strata
