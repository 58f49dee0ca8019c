// trace.cc: Trace.
#include "trainer/trace.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace strata {

void Trace::Add(Event e) {
  if (!enabled_) return;
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
}

std::vector<Trace::Event> Trace::Events() const {
  std::lock_guard lock(mu_);
  return events_;
}

Status Trace::Write(const std::string& path, int rank) const {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank},
                    {"args", {{"name", "trainer " + std::to_string(rank)}}}});
  for (int tid : {0, 1}) {
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", tid},
                      {"args", {{"name", tid == 0 ? "training" : "communication"}}}});
  }
  for (const Event& e : Events()) {
    nlohmann::json j = {{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"pid", rank},
                        {"tid", e.tid},   {"ts", e.start_us},  {"dur", e.dur_us}};
    if (e.step >= 0) j["args"] = {{"step", e.step}};
    events.push_back(std::move(j));
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return Status::IOError("cannot write trace " + tmp);
    // The origin on the host's steady clock (CLOCK_MONOTONIC on Linux, shared by its processes):
    // add it to every ts to line up the ranks of one host.
    const double origin_us = std::chrono::duration<double, std::micro>(origin_.time_since_epoch()).count();
    out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"},
                          {"otherData", {{"steady_clock_origin_us", origin_us}}}}
               .dump()
        << "\n";
    if (!out) return Status::IOError("writing trace " + tmp + " failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::IOError("cannot rename " + tmp);
  return Status::OK();
}

}  // namespace strata
