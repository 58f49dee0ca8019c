// row_file.h: files of (key, record) rows in the tiered store's export format (checksummed,
// versioned, written to a temporary name and renamed), for whoever keeps a table's rows outside
// a store: the servers' tables in a trainer checkpoint (ps/server_checkpoint.h). The format is
// offload's own (offload/internal/store_format.h); these are its public doors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace strata {
namespace offload_internal {
class ExportWriter;
class ExportReader;
}  // namespace offload_internal

// Streams rows of `width` floats to `path` (via path.tmp; Finish renames it). Errors name the path.
class RowFileWriter {
 public:
  static Result<std::unique_ptr<RowFileWriter>> Create(const std::string& path, int width);
  ~RowFileWriter();
  Status Add(uint64_t key, const float* record);
  Status Finish();

 private:
  explicit RowFileWriter(std::unique_ptr<offload_internal::ExportWriter> impl);
  std::unique_ptr<offload_internal::ExportWriter> impl_;
};

// A whole file read and checked (header, size, checksum) before any row is handed out.
// NotFound for a missing file; FailedPrecondition for another format version.
class RowFileReader {
 public:
  static Result<RowFileReader> Open(const std::string& path, int width);
  uint64_t count() const;
  uint64_t key(uint64_t i) const;
  const float* record(uint64_t i) const;

 private:
  explicit RowFileReader(std::shared_ptr<const offload_internal::ExportReader> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const offload_internal::ExportReader> impl_;
};

}  // namespace strata
