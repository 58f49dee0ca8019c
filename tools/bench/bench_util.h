// bench_util.h: what every strata-bench subcommand shares: timing, percentiles, byte sizes,
// and Report (tables printed for people and written as JSON for tools).
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace strata::bench {

using Clock = std::chrono::steady_clock;

// Measures elapsed wall time from construction (or the last Restart()).
class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void Restart() { start_ = Clock::now(); }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double Micros() const { return Seconds() * 1e6; }

 private:
  Clock::time_point start_;
};

// CPU seconds used so far by every thread of process `pid` (0: this process), user and system:
// its CPU-time clock (clock_getcpuclockid). IOError naming the pid when it cannot be read (the
// process is gone, or is not ours to look at).
Result<double> ProcessCpuSeconds(pid_t pid = 0);

// A bench's placement on the CPUs this process may use (--pin): the first for this process,
// the rest for the processes it starts.
struct CpuSplit {
  cpu_set_t mine;
  cpu_set_t others;
};
// InvalidArgument when this process may run on fewer than 2 CPUs.
Result<CpuSplit> SplitCpus();
// Keeps the calling thread, and the threads and processes it starts from now on, to `cpus`.
Status PinTo(const cpu_set_t& cpus);

// The p-th percentile (0 <= p <= 100) by nearest rank; 0 for no samples.
double Percentile(std::vector<double> samples, double p);
double Median(std::vector<double> samples);

// "64", "64B", "4K", "4KiB", "1M", "1MiB", "2G" (binary multiples, case-insensitive).
Result<uint64_t> ParseByteSize(std::string_view text);
// A comma-separated list of byte sizes.
Result<std::vector<uint64_t>> ParseByteSizes(std::string_view list);
// "64 B", "4 KiB", "1 MiB"; sizes that are not whole multiples keep the smaller unit.
std::string FormatBytes(uint64_t bytes);
// Splits on `sep`, dropping empty items.
std::vector<std::string> SplitList(std::string_view list, char sep = ',');

// "host: 2 cpus, 1-min load average at the end 1.93; whole run 12.3 s." (a report's note on
// how busy the machine was).
std::string HostLoadNote(unsigned cpus, double run_seconds);

// The last line of a file that is a JSON object (holding `key`, unless it is empty): what a
// peer script or a metrics file printed last. NotFound when there is none.
Result<nlohmann::json> LastJson(const std::string& path, const std::string& key);

// Rows of figures with named columns. A cell is a JSON value: numbers are printed with the
// column's format, and written to JSON unformatted under the column's key.
class Table {
 public:
  enum class Format { kText, kInteger, kFixed1, kFixed2, kFixed3, kBytes };
  struct Column {
    std::string header;  // printed ("our p50 us")
    std::string key;     // JSON key ("our_p50_us")
    Format format = Format::kText;
  };

  Table(std::string title, std::vector<Column> columns);
  // STRATA_CHECKs that there is one cell per column.
  void AddRow(std::vector<nlohmann::json> cells);

  void Print(std::ostream& os) const;
  // {"title": ..., "rows": [{key: value, ...}, ...]}
  nlohmann::json ToJson() const;

 private:
  std::string title_;
  std::vector<Column> columns_;
  std::vector<std::vector<nlohmann::json>> rows_;
};

// What a subcommand measured: its parameters, tables and notes (method, peer, caveats).
struct Report {
  std::string benchmark;                             // the subcommand's name
  nlohmann::json config = nlohmann::json::object();  // the parameters of the run
  std::vector<Table> tables;
  std::vector<std::string> notes;
  nlohmann::json details = nlohmann::json::object();  // JSON only: per-repetition figures

  void Print(std::ostream& os) const;
  nlohmann::json ToJson() const;
};

// Writes `doc` (indented) to `path`.
Status WriteJson(const std::string& path, const nlohmann::json& doc);

}  // namespace strata::bench
