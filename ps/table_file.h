// table_file.h: the file in which a server records the tables it holds, so that a restarted
// server can restore them: a magic line with the format version ("strata-tables 2\n"), then per
// table its byte count (u64) and its TableSpec as a flat Cap'n Proto message, then a Checksum64
// (common/checksum.h) of everything before it. Integers in host order (the file stays on the
// machine that wrote it).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ps/table.h"

namespace strata {

std::string EncodeTableSpecs(const std::vector<const TableSpec*>& specs);
// Corruption naming `path` for anything but a well-formed, checksummed file of valid specs;
// FailedPrecondition for a tables file of another format version (1: FNV-1a checksums).
Result<std::vector<TableSpec>> DecodeTableSpecs(std::string_view bytes, const std::string& path);

}  // namespace strata
