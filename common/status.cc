// status.cc: Status implementation.
#include "common/status.h"

namespace strata {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kAlreadyExists: return "AlreadyExists";
    case StatusCode::kDeadlineExceeded: return "DeadlineExceeded";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kAborted: return "Aborted";
    case StatusCode::kCancelled: return "Cancelled";
    case StatusCode::kInternal: return "Internal";
    case StatusCode::kUnimplemented: return "Unimplemented";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string_view message) {
  if (code != StatusCode::kOk) state_ = std::make_unique<State>(State{code, std::string(message)});
}

Status::Status(const Status& other)
    : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
  return *this;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(state_->code));
  if (!state_->message.empty()) {
    s += ": ";
    s += state_->message;
  }
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return Status();
  std::string m(context);
  m += ": ";
  m += state_->message;
  return Status(state_->code, m);
}

}  // namespace strata
