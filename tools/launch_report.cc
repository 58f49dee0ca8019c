// launch_report.cc: ParseJobReport, JobReportJson, FormatReport.
#include "tools/launch_report.h"

#include <spdlog/fmt/fmt.h>

#include <nlohmann/json.hpp>

namespace strata {

std::string ExitText(int exit_code) {
  if (exit_code < 0) return "-";
  if (exit_code == 0) return "ok";
  if (exit_code >= 128) return "signal " + std::to_string(exit_code - 128);
  return "code " + std::to_string(exit_code);
}

std::optional<JobReport> ParseJobReport(const std::string& json) {
  auto j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("steps")) return std::nullopt;
  JobReport r;
  r.steps = j.value("steps", 0L);
  r.seconds = j.value("seconds", 0.0);
  r.samples_per_second = j.value("samples_per_s", 0.0);
  r.loss = j.value("loss", 0.0);
  r.eval_loss = j.value("eval_loss", 0.0);
  r.auc = j.value("auc", -1.0);
  r.oracle_auc = j.value("oracle_auc", -1.0);
  r.comm_name = j.value("comm", std::string());
  r.comm_seconds = j.value("comm_seconds", 0.0);
  r.comm_hidden_percent = j.value("comm_hidden_percent", 0.0);
  r.plot_path = j.value("plot", std::string());
  return r;
}

std::string JobReportJson(const JobReport& r) {
  nlohmann::json j = {{"steps", r.steps}, {"seconds", r.seconds}, {"samples_per_s", r.samples_per_second},
                      {"loss", r.loss}, {"eval_loss", r.eval_loss}};
  if (r.auc >= 0) j["auc"] = r.auc;
  if (r.oracle_auc >= 0) j["oracle_auc"] = r.oracle_auc;
  if (!r.comm_name.empty()) {
    j["comm"] = r.comm_name;
    j["comm_seconds"] = r.comm_seconds;
    j["comm_hidden_percent"] = r.comm_hidden_percent;
  }
  if (!r.plot_path.empty()) j["plot"] = r.plot_path;
  return j.dump();
}

std::vector<std::string> FormatReport(const std::vector<ProcessReport>& processes,
                                      const std::optional<JobReport>& job) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("  {:<10} {:>4}  {:<10} {:>8}  {:>9}", "role", "rank", "exit", "wall", "peak RSS"));
  for (const ProcessReport& p : processes) {
    const size_t space = p.name.find(' ');
    const std::string role = p.name.substr(0, space);
    const std::string rank = space == std::string::npos ? "-" : p.name.substr(space + 1);
    lines.push_back(fmt::format("  {:<10} {:>4}  {:<10} {:>7.1f}s  {:>5.0f} MiB", role, rank, ExitText(p.exit_code),
                                p.wall_seconds, p.peak_rss_kib / 1024.0));
  }
  if (!job) return lines;
  std::string figures = fmt::format("  job: {} steps in {:.1f}s, {:.0f} samples/s, loss {:.5f} (eval {:.5f})",
                                    job->steps, job->seconds, job->samples_per_second, job->loss, job->eval_loss);
  if (job->auc >= 0) {
    figures += fmt::format(", AUC {:.4f}", job->auc);
    if (job->oracle_auc >= 0) figures += fmt::format(" (oracle {:.4f})", job->oracle_auc);
  }
  lines.push_back(figures);
  if (!job->comm_name.empty()) {
    lines.push_back(fmt::format("  communication: {} {:.2f}s, {:.0f}% hidden behind compute", job->comm_name,
                                job->comm_seconds, job->comm_hidden_percent));
  }
  if (!job->plot_path.empty()) lines.push_back("  plot: " + job->plot_path);
  return lines;
}

}  // namespace strata
