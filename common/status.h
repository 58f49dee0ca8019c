// status.h: Status (a failure a caller can act on, leveldb style: OK costs one null pointer)
// and Result<T> (a value or a Status). Bugs are STRATA_CHECK aborts (check.h), not Statuses.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace strata {

// Stable numeric codes: they travel on the wire (wire.capnp StatusCode mirrors them).
enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument = 1,   // the caller asked for something malformed or out of range
  kNotFound = 2,          // a named thing (table, key, node, file) does not exist
  kAlreadyExists = 3,     // a unique thing (rank, table name) is taken
  kDeadlineExceeded = 4,  // a timeout expired before the operation completed
  kUnavailable = 5,       // a peer is dead, unreachable or shutting down; retry may help
  kCorruption = 6,        // bytes did not decode (wire message, checkpoint, file)
  kIOError = 7,           // the OS or a storage engine failed (disk full, read-only, ...)
  kFailedPrecondition = 8,  // the system is not in a state that allows the operation
  kResourceExhausted = 9,   // a budget or limit was hit
  kAborted = 10,            // the operation was abandoned (a barrier lost a member, ...)
  kCancelled = 11,          // the caller or a shutdown cancelled it
  kInternal = 12,           // an invariant of a peer was broken; report it
  kUnimplemented = 13,
};
inline constexpr int kStatusCodeCount = 14;

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() noexcept = default;  // OK
  Status(StatusCode code, std::string_view message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string_view m) { return {StatusCode::kInvalidArgument, m}; }
  static Status NotFound(std::string_view m) { return {StatusCode::kNotFound, m}; }
  static Status AlreadyExists(std::string_view m) { return {StatusCode::kAlreadyExists, m}; }
  static Status DeadlineExceeded(std::string_view m) { return {StatusCode::kDeadlineExceeded, m}; }
  static Status Unavailable(std::string_view m) { return {StatusCode::kUnavailable, m}; }
  static Status Corruption(std::string_view m) { return {StatusCode::kCorruption, m}; }
  static Status IOError(std::string_view m) { return {StatusCode::kIOError, m}; }
  static Status FailedPrecondition(std::string_view m) {
    return {StatusCode::kFailedPrecondition, m};
  }
  static Status ResourceExhausted(std::string_view m) {
    return {StatusCode::kResourceExhausted, m};
  }
  static Status Aborted(std::string_view m) { return {StatusCode::kAborted, m}; }
  static Status Cancelled(std::string_view m) { return {StatusCode::kCancelled, m}; }
  static Status Internal(std::string_view m) { return {StatusCode::kInternal, m}; }
  static Status Unimplemented(std::string_view m) { return {StatusCode::kUnimplemented, m}; }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // The message without the code name; empty for OK.
  const std::string& message() const;
  // "InvalidArgument: message", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (a breadcrumb, NCCL-style). OK stays OK.
  Status WithContext(std::string_view context) const;

  bool IsDeadlineExceeded() const { return code() == StatusCode::kDeadlineExceeded; }
  bool IsNotFound() const { return code() == StatusCode::kNotFound; }
  bool IsUnavailable() const { return code() == StatusCode::kUnavailable; }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<State> state_;
};

// A value of type T, or the Status saying why there is none. Never holds an OK status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) {
      v_ = Status::Internal("Result constructed from an OK Status without a value");
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace strata

#define STRATA_CONCAT_INNER_(a, b) a##b
#define STRATA_CONCAT_(a, b) STRATA_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define STRATA_RETURN_IF_ERROR(expr)                   \
  do {                                                 \
    ::strata::Status strata_status_ = (expr);          \
    if (!strata_status_.ok()) return strata_status_;   \
  } while (0)

// `lhs = value of expr`, or returns its Status. lhs may be a declaration (`auto x`).
#define STRATA_ASSIGN_OR_RETURN(lhs, expr) \
  STRATA_ASSIGN_OR_RETURN_IMPL_(STRATA_CONCAT_(strata_result_, __LINE__), lhs, expr)
#define STRATA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
