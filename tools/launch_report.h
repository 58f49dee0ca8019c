// launch_report.h: what strata-launch shows at the end of a job: a table of its processes (role,
// rank, exit, wall time, peak memory) and the job's figures from trainer 0's @summary line
// (steps, samples/s, loss, AUC beside the oracle's, communication hidden). Plain values and
// pure functions, so the layout is tested without a cluster.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace strata {

struct ProcessReport {
  std::string name;          // "scheduler", "server 1", "trainer 0"
  int exit_code = -1;        // exit status, 128 + signal; -1: never reaped
  double wall_seconds = 0;   // from fork to exit
  long peak_rss_kib = 0;     // getrusage's ru_maxrss of the child (wait4)
};

// Trainer 0's figures, as its "@summary {json}" line under strata-launch carries them.
struct JobReport {
  long steps = 0;
  double seconds = 0, samples_per_second = 0;
  double loss = 0, eval_loss = 0;
  double auc = -1, oracle_auc = -1;   // -1: the model has no AUC (not ctr)
  std::string comm_name;              // "all-reduce", "reduce-scatter"; empty: none
  double comm_seconds = 0, comm_hidden_percent = 0;
  std::string plot_path;              // train.plot_path when a plot was written
};

// Parses the JSON after "@summary "; nullopt when it is not a summary object.
std::optional<JobReport> ParseJobReport(const std::string& json);
// The JSON trainer 0 prints (inverse of ParseJobReport).
std::string JobReportJson(const JobReport& r);

// The table's lines (no trailing newlines): a header, one row per process, then the job's
// lines when `job` is given.
std::vector<std::string> FormatReport(const std::vector<ProcessReport>& processes,
                                      const std::optional<JobReport>& job);

// "code 1", "signal 9"; "ok" for 0; "-" for never reaped.
std::string ExitText(int exit_code);

}  // namespace strata
