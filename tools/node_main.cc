// node_main.cc: strata-node, a cluster member that joins as a server or trainer and runs the
// membership smoke protocol: barrier, publish its address in the kv store, read every other
// node's, barrier again; then leaves, or stays until the scheduler ends the job. It is what
// the local smoke cluster runs until the real server and trainer binaries replace it.
// `strata-node keygen DIR` writes the CURVE key files of a job (cluster.auth: curve).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <iostream>

#include <unistd.h>  // environ

#include "cluster/node.h"
#include "common/curve.h"
#include "common/logging.h"
#include "tools/job_config.h"
#include "tools/placement_env.h"
#include "tools/signals.h"

namespace strata {
namespace {

Status RunSmoke(Node& node) {
  STRATA_RETURN_IF_ERROR(node.Barrier("smoke/start").WithContext("barrier smoke/start"));
  STRATA_RETURN_IF_ERROR(node.KvSet("smoke/address/" + std::to_string(node.id()), node.address()));
  const ClusterView view = node.view();
  for (const NodeInfo& peer : view.nodes) {
    auto got = node.KvGet("smoke/address/" + std::to_string(peer.id), Millis(30000));
    if (!got.ok()) return got.status().WithContext("reading the address of " + peer.Describe());
    if (*got != peer.address) {
      return Status::Internal("kv store says " + peer.Describe() + " is at " + *got);
    }
  }
  STRATA_RETURN_IF_ERROR(node.Barrier("smoke/end").WithContext("barrier smoke/end"));
  spdlog::info("smoke ok: {} nodes met at two barriers and exchanged addresses", view.nodes.size());
  return Status::OK();
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  using namespace strata;
  CLI::App app{"strata-node: joins a strata cluster as a server or trainer and runs the "
               "membership smoke protocol (barriers, kv store, heartbeats, clean leave)"};
  JobFlags flags;
  AddJobFlags(app, flags);
  std::string role_name = "trainer";
  NodeFlags node_flags;
  bool stay = false;
  app.add_option("--role", role_name, "server or trainer")->check(CLI::IsMember({"server", "trainer"}));
  AddNodeFlags(app, node_flags);
  app.add_flag("--stay", stay, "after the protocol, stay (heartbeating) until the scheduler ends the job");
  std::string key_dir;
  std::vector<std::string> client_names = {"client"};
  CLI::App* keygen = app.add_subcommand(
      "keygen", "write a job's CURVE keys into DIR (cluster.auth: curve; docs/security.md): server.key, "
                "<name>.key per client, authorized_keys; never overwrites");
  keygen->add_option("DIR", key_dir, "directory for the key files (created if missing)")->required();
  keygen->add_option("--clients", client_names,
                     "names of the client keypairs to make, all authorized (default: client)")
      ->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  if (keygen->parsed()) {
    if (Status s = GenerateCurveKeys(key_dir, client_names); !s.ok()) {
      std::cerr << "strata-node keygen: " << s.ToString() << "\n";
      return 1;
    }
    std::cout << "wrote " << key_dir << "/server.key, " << client_names.size()
              << " client key file(s) and " << key_dir << "/authorized_keys\n";
    return 0;
  }

  JobConfig job_config;
  JobPlacement placement;
  if (auto code = LoadPlacedJobOrExit(flags, CaptureEnvironment(environ), "strata-node",
                                      &job_config, &placement)) {
    return *code;
  }
  const JobConfig* job = &job_config;
  NodeOptions options;
  if (Status s = PlaceNode(node_flags, placement, *ParseRole(role_name), &options); !s.ok()) {
    std::cerr << "strata-node: " << s.ToString() << "\n";
    return 2;
  }
  options.cluster = job->cluster;
  options.transport = job->transport;
  LogOptions log = job->log;
  log.role = role_name;
  InitLogging(log);
  InstallStopSignals();

  Node node(options);
  node.OnEvent([](const NodeEvent& e) {
    if (e.kind == NodeEvent::Kind::kDead) spdlog::warn("event: dead {}", e.node.Describe());
    if (e.kind == NodeEvent::Kind::kRejoined) spdlog::info("event: rejoined {}", e.node.Describe());
  });
  if (Status s = node.Join(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  SetLogIdentity(role_name, node.rank());
  if (Status s = RunSmoke(node); !s.ok()) {
    spdlog::error("smoke failed: {}", s.ToString());
    return 1;
  }
  if (stay) {
    while (!node.WaitForShutdown(Millis(100))) {
      if (StopRequested()) break;
    }
  }
  if (Status s = node.Leave(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  return 0;
}
