// bench_util.cc: timing helpers, byte sizes, Table and Report.
#include "tools/bench/bench_util.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "common/check.h"

namespace strata::bench {

double Percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  // Nearest rank: the smallest sample with at least p% of the samples at or below it.
  const double rank = std::ceil(p / 100.0 * static_cast<double>(samples.size()));
  const size_t index = rank < 1.0 ? 0 : static_cast<size_t>(rank) - 1;
  return samples[std::min(index, samples.size() - 1)];
}

double Median(std::vector<double> samples) { return Percentile(std::move(samples), 50.0); }

Result<uint64_t> ParseByteSize(std::string_view text) {
  const std::string original(text);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data()) {
    return Status::InvalidArgument("byte size \"" + original + "\": expected a number");
  }
  std::string unit(ptr, text.data() + text.size());
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  int shift = -1;
  if (unit.empty() || unit == "b") shift = 0;
  if (unit == "k" || unit == "kb" || unit == "kib") shift = 10;
  if (unit == "m" || unit == "mb" || unit == "mib") shift = 20;
  if (unit == "g" || unit == "gb" || unit == "gib") shift = 30;
  if (shift < 0) {
    return Status::InvalidArgument("byte size \"" + original + "\": unknown unit \"" + unit + "\"");
  }
  if (value > (UINT64_MAX >> shift)) {
    return Status::InvalidArgument("byte size \"" + original + "\" overflows");
  }
  return value << shift;
}

Result<std::vector<uint64_t>> ParseByteSizes(std::string_view list) {
  std::vector<uint64_t> sizes;
  for (const std::string& item : SplitList(list)) {
    STRATA_ASSIGN_OR_RETURN(uint64_t size, ParseByteSize(item));
    sizes.push_back(size);
  }
  if (sizes.empty()) return Status::InvalidArgument("no sizes given");
  return sizes;
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (unit < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + kUnits[unit];
}

std::vector<std::string> SplitList(std::string_view list, char sep) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(sep, start);
    if (end == std::string_view::npos) end = list.size();
    if (end > start) items.emplace_back(list.substr(start, end - start));
    start = end + 1;
  }
  return items;
}

// ---------------------------------------------------------------------------------------------
// Table

Table::Table(std::string title, std::vector<Column> columns)
    : title_(std::move(title)), columns_(std::move(columns)) {}

void Table::AddRow(std::vector<nlohmann::json> cells) {
  STRATA_CHECK_EQ(cells.size(), columns_.size()) << "row of table \"" << title_ << "\"";
  rows_.push_back(std::move(cells));
}

namespace {

std::string FormatCell(const nlohmann::json& cell, Table::Format format) {
  if (cell.is_null()) return "-";
  if (cell.is_string()) return cell.get<std::string>();
  if (!cell.is_number()) return cell.dump();
  const double v = cell.get<double>();
  char text[64];
  switch (format) {
    case Table::Format::kBytes:
      return FormatBytes(cell.get<uint64_t>());
    case Table::Format::kInteger:
      std::snprintf(text, sizeof(text), "%.0f", v);
      return text;
    case Table::Format::kFixed1:
      std::snprintf(text, sizeof(text), "%.1f", v);
      return text;
    case Table::Format::kFixed2:
      std::snprintf(text, sizeof(text), "%.2f", v);
      return text;
    case Table::Format::kFixed3:
      std::snprintf(text, sizeof(text), "%.3f", v);
      return text;
    case Table::Format::kText:
      return cell.dump();
  }
  return cell.dump();
}

}  // namespace

void Table::Print(std::ostream& os) const {
  std::vector<std::vector<std::string>> text;
  std::vector<size_t> width(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) width[c] = columns_[c].header.size();
  for (const auto& row : rows_) {
    auto& line = text.emplace_back();
    for (size_t c = 0; c < columns_.size(); ++c) {
      line.push_back(FormatCell(row[c], columns_[c].format));
      width[c] = std::max(width[c], line.back().size());
    }
  }
  auto print_line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) {
      // Text left-aligned, figures right-aligned.
      const bool left = columns_[c].format == Format::kText;
      os << (c ? "  " : "") << (left ? std::left : std::right)
         << std::setw(static_cast<int>(width[c])) << cells[c];
    }
    os << std::right << "\n";
  };
  if (!title_.empty()) os << title_ << "\n";
  std::vector<std::string> headers;
  size_t total = 0;
  for (size_t c = 0; c < columns_.size(); ++c) {
    headers.push_back(columns_[c].header);
    total += width[c] + (c ? 2 : 0);
  }
  print_line(headers);
  os << std::string(total, '-') << "\n";
  for (const auto& line : text) print_line(line);
}

nlohmann::json Table::ToJson() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : rows_) {
    nlohmann::json obj = nlohmann::json::object();
    for (size_t c = 0; c < columns_.size(); ++c) obj[columns_[c].key] = row[c];
    rows.push_back(std::move(obj));
  }
  return {{"title", title_}, {"rows", std::move(rows)}};
}

// ---------------------------------------------------------------------------------------------
// Report

void Report::Print(std::ostream& os) const {
  for (size_t i = 0; i < tables.size(); ++i) {
    if (i) os << "\n";
    tables[i].Print(os);
  }
  if (!notes.empty()) os << "\n";
  for (const std::string& note : notes) os << note << "\n";
}

nlohmann::json Report::ToJson() const {
  nlohmann::json doc = {{"benchmark", benchmark}, {"config", config}};
  nlohmann::json t = nlohmann::json::array();
  for (const Table& table : tables) t.push_back(table.ToJson());
  doc["tables"] = std::move(t);
  doc["notes"] = notes;
  doc["details"] = details;
  return doc;
}

Status WriteJson(const std::string& path, const nlohmann::json& doc) {
  std::ofstream out(path);
  if (!out) return Status::IOError("cannot open " + path + " for writing");
  out << doc.dump(2) << "\n";
  out.close();
  if (!out) return Status::IOError("writing " + path + " failed");
  return Status::OK();
}

Result<double> ProcessCpuSeconds(pid_t pid) {
  clockid_t clock = CLOCK_PROCESS_CPUTIME_ID;
  if (pid != 0) {
    if (const int e = clock_getcpuclockid(pid, &clock); e != 0) {
      return Status::IOError("no CPU clock for process " + std::to_string(pid) + ": " + std::strerror(e));
    }
  }
  timespec t{};
  if (clock_gettime(clock, &t) != 0) {
    return Status::IOError("cannot read the CPU clock of process " + std::to_string(pid == 0 ? getpid() : pid) +
                           ": " + std::strerror(errno));
  }
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

Result<CpuSplit> SplitCpus() {
  cpu_set_t all;
  CPU_ZERO(&all);
  if (sched_getaffinity(0, sizeof(all), &all) != 0) {
    return Status::IOError(std::string("sched_getaffinity: ") + std::strerror(errno));
  }
  if (CPU_COUNT(&all) < 2) {
    return Status::InvalidArgument("--pin needs at least 2 CPUs; this process may run on " +
                                   std::to_string(CPU_COUNT(&all)));
  }
  CpuSplit split;
  CPU_ZERO(&split.mine);
  split.others = all;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) {
      CPU_SET(c, &split.mine);
      CPU_CLR(c, &split.others);
      break;
    }
  }
  return split;
}

Status PinTo(const cpu_set_t& cpus) {
  if (sched_setaffinity(0, sizeof(cpus), &cpus) != 0) {
    return Status::IOError(std::string("sched_setaffinity: ") + std::strerror(errno));
  }
  return Status::OK();
}

std::string HostLoadNote(unsigned cpus, double run_seconds) {
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  char text[160];
  std::snprintf(text, sizeof(text), "host: %u cpus, 1-min load average at the end %.2f; whole run %.1f s.", cpus,
                load[0], run_seconds);
  return text;
}

Result<nlohmann::json> LastJson(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  nlohmann::json found;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && (key.empty() || j.contains(key))) found = j;
  }
  if (found.is_null()) return Status::NotFound(path + ": no " + (key.empty() ? "JSON" : key) + " record");
  return found;
}

}  // namespace strata::bench
