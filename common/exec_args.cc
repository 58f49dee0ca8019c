// exec_args.cc: ExecArgs.
#include "common/exec_args.h"

#include <unistd.h>

#include <string_view>

namespace strata {

ExecArgs::ExecArgs(std::vector<std::string> argv, std::vector<std::string> set)
    : argv_(std::move(argv)), env_(std::move(set)) {
  // "NAME=" of each variable set, which the environment's own value of NAME gives way to.
  std::vector<std::string> names;
  for (const std::string& s : env_) names.push_back(s.substr(0, s.find('=') + 1));
  for (char** e = environ; *e; ++e) {
    const std::string_view var(*e);
    bool replaced = false;
    for (const std::string& name : names) replaced = replaced || var.starts_with(name);
    if (!replaced) env_.emplace_back(*e);
  }
  for (std::string& a : argv_) argv_ptrs_.push_back(a.data());
  argv_ptrs_.push_back(nullptr);
  for (std::string& e : env_) env_ptrs_.push_back(e.data());
  env_ptrs_.push_back(nullptr);
}

}  // namespace strata
