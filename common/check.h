// check.h: STRATA_CHECK (our own invariants, always on, prints operands, aborts) and the
// checks that convert a foreign call's failure (CUDA, NCCL, ZeroMQ) at its boundary.
#pragma once

#include <sstream>
#include <string>

#include "common/status.h"

namespace strata::internal {

[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const std::string& detail);

template <typename A, typename B>
std::string FormatOperands(const A& a, const B& b) {
  std::ostringstream os;
  os << "(" << a << " vs " << b << ")";
  return os.str();
}

}  // namespace strata::internal

// Aborts with file:line and the expression if `cond` is false. Extra `<<` context may follow:
//   STRATA_CHECK(n > 0) << "n=" << n;
#define STRATA_CHECK(cond)                                                              \
  if (cond) {                                                                           \
  } else                                                                                \
    ::strata::internal::CheckFailer(__FILE__, __LINE__, #cond).stream()

#define STRATA_CHECK_OP_(a, b, op)                                                         \
  if ((a)op(b)) {                                                                          \
  } else                                                                                   \
    ::strata::internal::CheckFailer(__FILE__, __LINE__, #a " " #op " " #b,                 \
                                    ::strata::internal::FormatOperands((a), (b)))          \
        .stream()
#define STRATA_CHECK_EQ(a, b) STRATA_CHECK_OP_(a, b, ==)
#define STRATA_CHECK_NE(a, b) STRATA_CHECK_OP_(a, b, !=)
#define STRATA_CHECK_LT(a, b) STRATA_CHECK_OP_(a, b, <)
#define STRATA_CHECK_LE(a, b) STRATA_CHECK_OP_(a, b, <=)
#define STRATA_CHECK_GT(a, b) STRATA_CHECK_OP_(a, b, >)
#define STRATA_CHECK_GE(a, b) STRATA_CHECK_OP_(a, b, >=)

// Aborts if a Status is not OK (for calls that cannot fail unless we have a bug).
#define STRATA_CHECK_OK(expr)                                          \
  do {                                                                 \
    ::strata::Status strata_check_status_ = (expr);                    \
    STRATA_CHECK(strata_check_status_.ok()) << strata_check_status_.ToString(); \
  } while (0)

namespace strata::internal {

// Collects the streamed context and aborts in its destructor.
class CheckFailer {
 public:
  CheckFailer(const char* file, int line, const char* expr, std::string operands = {})
      : file_(file), line_(line), expr_(expr) {
    os_ << operands;
  }
  ~CheckFailer() { CheckFailed(file_, line_, expr_, os_.str()); }
  std::ostream& stream() { return os_; }

 private:
  const char* file_;
  int line_;
  const char* expr_;
  std::ostringstream os_;
};

// Converts an errno-style ZeroMQ failure into a Status naming the call.
Status ZmqError(const char* call, int err);

}  // namespace strata::internal

// Evaluates a libzmq C call returning -1 on error; on failure returns an IOError Status from
// the enclosing function, naming the call and zmq_strerror.
#define ZMQ_CHECK(call)                                                  \
  do {                                                                   \
    if ((call) == -1) return ::strata::internal::ZmqError(#call, zmq_errno()); \
  } while (0)
