// comm_report.h: CommAccounting, which sums what each of a trainer's groups moves during its
// training steps, and CommReport, that sum beside the analytical model (comm_model.h), as the
// run summary's table and as a metrics JSON object.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/comm/comm_stats.h"
#include "trainer/parallel/comm_model.h"
#include "trainer/parallel/groups.h"

namespace strata {

// One group of a trainer: what its communicator counted over the steps, and what the model
// expects over the same steps.
struct GroupCommReport {
  std::string dim;    // "pp", "dp", "tp"
  std::string group;  // the communicator's name, "trainers/dp/0"
  int size = 0;       // ranks in the group
  CommStats measured;
  GroupTraffic model;
};

struct CommReport {
  int64_t steps = 0;                    // training steps the sums cover
  std::vector<GroupCommReport> groups;  // pp, dp, tp: those this trainer has

  // Whether every op's measured bytes equal the model's.
  bool matches_model() const;
};

// Used by the training thread. Holds the groups' communicators without owning them: they must
// outlive it.
class CommAccounting {
 public:
  CommAccounting() = default;
  explicit CommAccounting(const ParallelGroups& groups);

  // Counting runs from Resume to Pause: training, not evaluation or checkpoints. Call both
  // while no collective is in flight (the stats are read then): a step's collectives may run
  // past its end (ZeRO-1/2's parameter all-gathers overlap the next forward), so counting
  // pauses only where the communication thread has drained. CountStep adds one training step.
  void Resume();
  void Pause();
  void CountStep() { ++steps_; }

  CommReport Report(const CommModel& model) const;

 private:
  struct Group {
    std::string dim;
    const Communicator* comm = nullptr;
    CommStats total, before;
  };
  std::vector<Group> groups_;
  int64_t steps_ = 0;
};

// Payload bytes per step beside the model's and the ring's wire bytes per rank, one row per
// (group, op) that moved or was expected to, and a last line saying whether they all agree:
//   group  op  calls/step  bytes/step  model (bytes/step)  ring wire/rank (bytes/step)
std::vector<std::string> FormatCommReport(const CommReport& report);
// {"steps": S, "groups": [{"dim", "group", "size", "ops": {op: {"calls", "bytes",
// "model_bytes", "wire_bytes"}}}]}: totals over the steps.
nlohmann::json CommReportJson(const CommReport& report);

}  // namespace strata
