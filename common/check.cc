// check.cc: the abort path of STRATA_CHECK and foreign-error conversion.
#include "common/check.h"

#include <zmq.h>

#include <cstdio>
#include <cstdlib>

namespace strata::internal {

void CheckFailed(const char* file, int line, const char* expr, const std::string& detail) {
  std::fprintf(stderr, "%s:%d: STRATA_CHECK failed: %s %s\n", file, line, expr, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

Status ZmqError(const char* call, int err) {
  std::string m = call;
  m += ": ";
  m += zmq_strerror(err);
  if (err == ETERM) return Status::Cancelled(m);
  if (err == EAGAIN) return Status::DeadlineExceeded(m);
  return Status::IOError(m);
}

}  // namespace strata::internal
