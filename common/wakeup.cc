// wakeup.cc: Wakeup.
#include "common/wakeup.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "common/check.h"

namespace strata {

Wakeup::Wakeup() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  STRATA_CHECK(fd_ >= 0) << "eventfd: " << std::strerror(errno);
}

Wakeup::~Wakeup() { ::close(fd_); }

void Wakeup::Signal() {
  const uint64_t one = 1;
  // EAGAIN: the counter is at its maximum, so the fd is readable already.
  while (::write(fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void Wakeup::Clear() {
  uint64_t count;
  while (::read(fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

}  // namespace strata
