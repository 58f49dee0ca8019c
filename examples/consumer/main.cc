// main.cc: a program outside strata's tree that joins a running cluster as a trainer through
// the installed client library (strata::ps), creates a sparse table, pushes one SGD gradient
// and checks the pulled rows moved by lr x gradient. Run it as strata-launch's trainer:
//   strata-launch -s 1 -t 1 --trainer-command strata-consumer job.yaml
// (strata-launch passes --set cluster.scheduler=ADDRESS and --rank R among its arguments).
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cluster/node.h"
#include "ps/client.h"

int main(int argc, char** argv) {
  using namespace strata;
  NodeOptions options;
  options.role = Role::kTrainer;
  options.cluster.trainers = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--rank") options.requested_rank = std::stoi(value);
    if (arg != "--set") continue;
    if (value.rfind("cluster.scheduler=", 0) == 0) options.cluster.scheduler = value.substr(18);
    if (value.rfind("cluster.servers=", 0) == 0) options.cluster.servers = std::stoi(value.substr(16));
    if (value.rfind("cluster.trainers=", 0) == 0) options.cluster.trainers = std::stoi(value.substr(17));
  }
  Node node(options);
  if (Status s = node.Join(); !s.ok()) {
    std::fprintf(stderr, "consumer: joining %s: %s\n", options.cluster.scheduler.c_str(), s.ToString().c_str());
    return 1;
  }
  PsClient client(node);
  TableSpec spec;
  spec.id = 7;
  spec.name = "consumer.rows";
  spec.kind = TableKind::kSparse;
  spec.dim = 4;
  spec.optimizer.kind = OptimizerKind::kSgd;
  spec.optimizer.lr = 0.5f;
  spec.init = InitSpec::Of(InitKind::kConstant, 1.0f, 0.0f, 0);
  int code = 0;
  auto fail = [&](const char* what, const Status& s) {
    std::fprintf(stderr, "consumer: %s: %s\n", what, s.ToString().c_str());
    code = 1;
  };
  const std::vector<uint64_t> keys = {3, 1000003};
  std::vector<float> grads(keys.size() * spec.dim, 1.0f), rows(keys.size() * spec.dim, 0.0f);
  if (Status s = client.CreateTable(spec); !s.ok()) {
    fail("creating the table", s);
  } else {
    PsTicket push = client.Push(spec.id, keys, grads.data());
    if (Status s = client.Wait(push); !s.ok()) fail("pushing", s);
    PsTicket pull = client.Pull(spec.id, keys, rows.data());
    if (Status s = client.Wait(pull); !s.ok()) fail("pulling", s);
    for (float v : rows) {
      if (code == 0 && std::fabs(v - 0.5f) > 1e-6f) {  // 1 - lr x 1
        std::fprintf(stderr, "consumer: pulled %g, expected 0.5\n", v);
        code = 1;
      }
    }
  }
  if (code == 0) std::printf("consumer: pushed and pulled %zu rows through strata::ps: ok\n", keys.size());
  if (Status s = node.RequestShutdown(); !s.ok()) std::fprintf(stderr, "consumer: ending the job: %s\n", s.ToString().c_str());
  node.WaitForShutdown(Millis(10000));
  if (Status s = node.Leave(); !s.ok()) std::fprintf(stderr, "consumer: leaving: %s\n", s.ToString().c_str());
  return code;
}
