// row_file.cc: RowFileWriter and RowFileReader over the export format (row_file.h).
#include "offload/row_file.h"

#include "offload/internal/store_format.h"

namespace strata {

RowFileWriter::RowFileWriter(std::unique_ptr<offload_internal::ExportWriter> impl) : impl_(std::move(impl)) {}
RowFileWriter::~RowFileWriter() = default;

Result<std::unique_ptr<RowFileWriter>> RowFileWriter::Create(const std::string& path, int width) {
  STRATA_ASSIGN_OR_RETURN(auto impl, offload_internal::ExportWriter::Create(path, width));
  return std::unique_ptr<RowFileWriter>(new RowFileWriter(std::move(impl)));
}

Status RowFileWriter::Add(uint64_t key, const float* record) { return impl_->Add(key, record); }
Status RowFileWriter::Finish() { return impl_->Finish(); }

Result<RowFileReader> RowFileReader::Open(const std::string& path, int width) {
  STRATA_ASSIGN_OR_RETURN(offload_internal::ExportReader r, offload_internal::ExportReader::Open(path, width));
  return RowFileReader(std::make_shared<const offload_internal::ExportReader>(std::move(r)));
}

uint64_t RowFileReader::count() const { return impl_->count(); }
uint64_t RowFileReader::key(uint64_t i) const { return impl_->key(i); }
const float* RowFileReader::record(uint64_t i) const { return impl_->record(i); }

}  // namespace strata
