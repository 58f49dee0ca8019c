// file.h: whole-file helpers that report failures as a Status naming the path: read a file,
// replace one durably (temp + fsync + rename + directory fsync), and the errno conversion.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace strata {

// Reads a whole file: NotFound if it does not exist, IOError otherwise.
Result<std::string> ReadWholeFile(const std::string& path);
// Writes `bytes` to path.tmp, fsyncs, renames over `path` and fsyncs the directory, so that after
// a crash `path` holds either the old bytes or the new ones.
Status WriteFileDurably(const std::string& path, std::string_view bytes);
// An IOError "what path: strerror(err)".
Status ErrnoStatus(std::string_view what, const std::string& path, int err);

}  // namespace strata
