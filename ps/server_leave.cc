// server_leave.cc: PsServer leaving an elastic job (cluster.elastic): HandOver offers every sparse
// row this server holds to the server the layout without it gives the row to, and HandleHandOver
// is the receiving side, which asks for the rows chunk by chunk (ps/migration.h). See
// PsServer::HandOver.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "ps/server.h"
#include "ps/server_table.h"

namespace strata {
namespace {

using SteadyClock = std::chrono::steady_clock;

void SetRanks(capnp::List<uint32_t>::Builder out, const std::vector<uint32_t>& ranks) {
  for (unsigned i = 0; i < ranks.size(); ++i) out.set(i, ranks[i]);
}

}  // namespace

Status PsServer::HandOver(Millis timeout, const std::function<void()>& while_frozen) {
  const uint32_t me = static_cast<uint32_t>(node_.rank());
  const std::string who = "server " + std::to_string(me) + " leaving the job";
  if (me == 0) {
    return Status::FailedPrecondition(
        who + ": server 0 cannot leave (keys fall back to the first servers, and server 0 is the one "
              "that always stays); stop the job instead");
  }
  if (!serving_.empty()) return Status::FailedPrecondition(who + ": it serves checkpoint " + serving_ + " read-only");
  if (taking_over_) return Status::FailedPrecondition(who + ": it has not finished joining yet");
  STRATA_RETURN_IF_ERROR(RingSettled().WithContext(who));
  const ClusterView view = node_.view();
  const PsLayout layout = KeyLayout();
  std::vector<const NodeInfo*> receivers;  // every other live server of the layout, by rank
  for (const NodeInfo& n : view.nodes) {
    if (n.role != Role::kServer || n.rank == static_cast<int>(me) || n.left) continue;
    if (static_cast<uint32_t>(n.rank) >= layout.servers) {
      return Status::FailedPrecondition(who + ": " + n.Describe() +
                                        " is joining and has not taken its keys from this one yet; leave after it did");
    }
    if (!n.alive) {
      return Status::FailedPrecondition(who + ": " + n.Describe() + " is down; its keys would have no holder to hand to");
    }
    receivers.push_back(&n);
  }
  if (receivers.empty()) return Status::FailedPrecondition(who + ": it is the last server; stop the job instead");
  std::sort(receivers.begin(), receivers.end(), [](const NodeInfo* a, const NodeInfo* b) { return a->rank < b->rank; });
  {
    std::shared_lock tables_lock(tables_mu_);
    for (const auto& [id, t] : tables_) {
      if (t->spec.kind == TableKind::kDense && me < layout.base && ChunksOn(t->spec, me, layout.base) > 0) {
        return Status::FailedPrecondition(who + ": it holds chunks of dense table \"" + t->spec.name +
                                          "\", and dense tables stay on the job's first servers (cluster.servers); "
                                          "only a server that joined later, or a job without dense tables, lets one leave");
      }
    }
  }
  if (leaving_.exchange(true)) return Status::FailedPrecondition(who + ": it is leaving already");

  // Freeze: from the switch on, every push and pull of a sparse key here is refused as moved.
  std::unique_lock freeze(migrate_mu_);
  PsLayout after = KeyLayout();
  const PsLayout before = after;
  after.Leave(me);
  SetLayoutLeft(after.left);
  auto undo = [&](const Status& s) {
    SetLayoutLeft(before.left);
    leaving_ = false;
    return s;
  };
  // Per receiver, the rows the layout without this server gives it: each receiver asks for them
  // chunk by chunk (HandleMigrate, on the worker pushes waiting for this freeze do not hold).
  std::map<uint32_t, uint32_t> to;  // rank -> node id
  for (const NodeInfo* r : receivers) to[static_cast<uint32_t>(r->rank)] = r->id;
  std::unique_lock clocks(clock_mu_);  // BSP accumulations leave the tables with the plans
  auto planned = PlanMovesLocked(before, after, to, nullptr);
  clocks.unlock();
  if (!planned.ok()) return undo(planned.status().WithContext(who));
  std::map<uint32_t, std::shared_ptr<const MigrationPlan>> plans;  // by rank
  uint64_t rows = 0;
  for (auto& [rank, p] : *planned) {
    rows += p.rows();
    plans[rank] = std::make_shared<const MigrationPlan>(std::move(p));
    SetOutgoing(to[rank], plans[rank]);
  }
  const size_t tables = plans.empty() ? 0 : plans.begin()->second->tables.size();
  auto drop_plans = [&] {
    for (const auto& [rank, node] : to) SetOutgoing(node, nullptr);
  };
  // Nobody took anything: the BSP accumulations go back into the tables.
  auto put_back = [&] {
    std::lock_guard lock(clock_mu_);
    for (const auto& [rank, plan] : plans) InstallBspMovesLocked(plan->bsp, "this server's leave, undone");
  };
  Status lost;  // the first receiver that did not take its rows, once another had
  int taken = 0;
  for (const NodeInfo* r : receivers) {
    const uint32_t rank = static_cast<uint32_t>(r->rank);
    const uint64_t n = plans[rank]->rows();
    const auto deadline = SteadyClock::now() + timeout;
    Status s;
    while (true) {
      // The receiver answers once it took every chunk: the call may take up to `timeout`.
      Message offer;
      auto body = offer.builder().getBody().initMigrateRows();
      body.setServers(after.servers);
      SetRanks(body.initLeft(static_cast<unsigned>(after.left.size())), after.left);
      body.setRows(n);
      auto peer = node_.rpc().Connect(r->address);
      auto reply = peer.ok() ? node_.rpc().CallAndWait(*peer, std::move(offer), timeout) : Result<Message>(peer.status());
      s = reply.status();
      const bool retry = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
      if (s.ok() || !retry || SteadyClock::now() > deadline) break;
      std::this_thread::sleep_for(Millis(100));
    }
    if (s.ok()) {
      ++taken;
      rows_moved_out_ += n;
      bsp_moved_out_ += plans[rank]->bsp.entries();
      spdlog::info("server: {} took {} rows", r->Describe(), n);
      continue;
    }
    s = s.WithContext(who + ": handing " + std::to_string(n) + " rows to " + r->Describe());
    if (taken == 0) {
      drop_plans();
      put_back();
      return undo(s);  // nobody switched: this server keeps serving every key
    }
    spdlog::error("{} (those rows are lost: they start again from the initializer there)", s.ToString());
    if (lost.ok()) lost = s;
  }
  drop_plans();
  if (while_frozen) while_frozen();
  // Deregistering while still frozen: the view shows this server left before any request here is
  // refused as moved, so a client refused finds the new owners in its refreshed view.
  Status left = node_.Leave();
  handed_over_ = true;
  freeze.unlock();
  spdlog::info("server: handed {} rows of {} sparse tables to {} servers; layout of {} servers, {} left the job", rows,
               tables, receivers.size(), after.servers, after.left.size());
  std::vector<const MigrationPlan*> moved;
  for (const auto& [rank, plan] : plans) moved.push_back(plan.get());
  EraseMoved(moved);
  if (!left.ok()) return left.WithContext(who);
  return lost;
}

void PsServer::HandleHandOver(Request& request) {
  const Message& msg = request.message();
  auto fail = [&](const Status& s) {
    ++errors_;
    spdlog::warn("server: refused the rows of node {}: {}", msg.sender(), s.ToString());
    request.ReplyError(s);
  };
  const ClusterView view = node_.view();
  const NodeInfo* from = view.Find(msg.sender());
  if (!from || from->role != Role::kServer || from->rank <= 0) {
    return fail(Status::InvalidArgument("migrateRows from node " + std::to_string(msg.sender()) +
                                        ": only a server other than server 0 leaving the job hands rows over"));
  }
  const uint32_t leaver = static_cast<uint32_t>(from->rank);
  auto rows = msg.reader().getBody().getMigrateRows();
  PsLayout theirs;
  theirs.servers = rows.getServers();
  for (uint32_t r : rows.getLeft()) theirs.Leave(r);
  if (!theirs.Left(leaver) || theirs.Left(0)) {
    return fail(Status::InvalidArgument("migrateRows from " + from->Describe() +
                                        ": its layout must count it, and not server 0, as left"));
  }
  if (!serving_.empty()) return fail(Status::FailedPrecondition("migrateRows: this server serves a checkpoint read-only"));
  if (leaving_) return fail(Status::FailedPrecondition("migrateRows: this server is leaving the job too"));
  if (taking_over_) return fail(Status::Unavailable("migrateRows: this server is still joining"));
  if (Status s = RingSettled(); !s.ok()) return fail(s.WithContext("migrateRows"));
  PsLayout expect = KeyLayout();
  if (expect.Left(leaver)) return request.Reply(request.MakeReply());  // a repeat: taken already
  expect.Leave(leaver);
  auto unavailable = [&](const PsLayout& mine) {
    // A join or another leave is under way: the leaving server asks again.
    return Status::Unavailable("migrateRows from " + from->Describe() + ": its layout (" +
                               std::to_string(theirs.servers) + " servers, " + std::to_string(theirs.left.size()) +
                               " left) is not this one's after its leave (" + std::to_string(mine.servers) +
                               " servers, " + std::to_string(mine.left.size()) + " left)");
  };
  if (theirs.servers != expect.servers || theirs.left != expect.left) return fail(unavailable(expect));
  // The rows are taken outside this server's freeze: its pushes and pulls of them are refused as
  // not its own until the switch below, and the leaving server keeps them frozen meanwhile.
  MigrationPuller puller(expect.servers, expect.left);
  const auto deadline = SteadyClock::now() + Millis(node_.options().transport.request_timeout_ms);
  BspMoves bsp;
  if (Status s = PullRows(puller, *from, expect, deadline, &bsp); !s.ok()) return fail(s);
  std::unique_lock freeze(migrate_mu_);
  PsLayout now = KeyLayout();
  if (now.Left(leaver)) return request.Reply(request.MakeReply());
  now.Leave(leaver);
  if (!(now == expect)) return fail(unavailable(now));  // it changed while the rows came
  {
    // The BSP accumulations join this server's clocks with the switch (once: a repeat after a
    // refused switch pulls them again and installs them then).
    std::lock_guard clocks(clock_mu_);
    InstallBspMovesLocked(bsp, from->Describe());
  }
  SetLayoutLeft(expect.left);
  rows_moved_in_ += puller.rows();
  spdlog::info("server: {} left the layout; {} servers serve its keys now ({} rows taken in {} chunks)",
               from->Describe(), expect.servers - expect.left.size(), puller.rows(), puller.chunks());
  freeze.unlock();
  request.Reply(request.MakeReply());  // before the copy below: the leaving server waits on it
  // Replication: the ring without the leaving server, and a fresh copy for this shard's backup,
  // which holds none of the rows that came in.
  FollowRing(/*gained=*/puller.rows() > 0 || bsp.entries() > 0);
}

}  // namespace strata
