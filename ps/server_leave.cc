// server_leave.cc: PsServer leaving an elastic job (cluster.elastic): HandOver sends every sparse
// row this server holds to the server the layout without it gives the row to, and HandleHandOver
// is the receiving side. See PsServer::HandOver.
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

// One receiver's rows of one table.
struct Rows {
  std::shared_ptr<std::vector<uint64_t>> keys = std::make_shared<std::vector<uint64_t>>();
  std::shared_ptr<std::vector<float>> records = std::make_shared<std::vector<float>>();
};

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
  // Per receiver rank, per table: the rows the layout without this server gives it.
  std::map<uint32_t, std::map<uint32_t, Rows>> out;
  std::vector<const TableSpec*> specs;
  uint64_t rows = 0;
  {
    std::shared_lock tables_lock(tables_mu_);
    for (const auto& [id, t] : tables_) {
      if (t->spec.kind != TableKind::kSparse) continue;
      specs.push_back(&t->spec);
      for (const NodeInfo* r : receivers) out[static_cast<uint32_t>(r->rank)][id];  // every table, even empty
      Status s = t->store->Scan([&](uint64_t key, std::span<const float> record) {
        if (before.SparseOwner(key) != me) return Status::OK();  // given away before, not erased yet
        Rows& to = out[after.SparseOwner(key)][id];
        to.keys->push_back(key);
        to.records->insert(to.records->end(), record.begin(), record.end());
        ++rows;
        return Status::OK();
      });
      if (!s.ok()) return undo(s.WithContext(who + ": reading table \"" + t->spec.name + "\""));
    }
  }
  auto ids = std::make_shared<std::vector<int64_t>>();
  for (const auto& [sender, id] : push_ids_.Snapshot()) {
    ids->push_back(sender);
    ids->push_back(static_cast<int64_t>(id));
  }
  std::vector<std::pair<uint32_t, int64_t>> clocks;
  {
    std::lock_guard lock(clock_mu_);
    clocks.assign(trainer_clock_.begin(), trainer_clock_.end());
  }
  auto build = [&](uint32_t rank) {
    Message m;
    auto body = m.builder().getBody().initMigrateRows();
    body.setServers(after.servers);
    SetRanks(body.initLeft(static_cast<unsigned>(after.left.size())), after.left);
    auto list = body.initTables(static_cast<unsigned>(specs.size()));
    for (unsigned i = 0; i < specs.size(); ++i) {
      ToWire(*specs[i], list[i]);
      const Rows& r = out[rank][specs[i]->id];
      const int64_t n = static_cast<int64_t>(r.keys->size());
      m.AddPayload(DType::kI64, {n}, Buffer(r.keys->data(), r.keys->size() * sizeof(uint64_t), r.keys));
      m.AddPayload(DType::kF32, {n, specs[i]->RecordWidth()},
                   Buffer(r.records->data(), r.records->size() * sizeof(float), r.records));
    }
    m.AddPayload(DType::kI64, {static_cast<int64_t>(ids->size() / 2), 2},
                 Buffer(ids->data(), ids->size() * sizeof(int64_t), ids));
    auto c = body.initTrainerClocks(static_cast<unsigned>(clocks.size()));
    for (unsigned i = 0; i < clocks.size(); ++i) {
      c[i].setNode(clocks[i].first);
      c[i].setClock(clocks[i].second);
    }
    return m;
  };
  const Millis call_timeout(node_.options().transport.request_timeout_ms);
  Status lost;  // the first receiver that did not take its rows, once another had
  int taken = 0;
  for (const NodeInfo* r : receivers) {
    const uint32_t rank = static_cast<uint32_t>(r->rank);
    uint64_t n = 0;
    for (const auto& [id, rr] : out[rank]) n += rr.keys->size();
    const auto deadline = SteadyClock::now() + timeout;
    Status s;
    while (true) {
      auto peer = node_.rpc().Connect(r->address);
      auto reply = peer.ok() ? node_.rpc().CallAndWait(*peer, build(rank), std::min(call_timeout, timeout))
                             : Result<Message>(peer.status());
      s = reply.status();
      const bool retry = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
      if (s.ok() || !retry || SteadyClock::now() > deadline) break;
      std::this_thread::sleep_for(Millis(100));
    }
    if (s.ok()) {
      ++taken;
      rows_moved_out_ += n;
      spdlog::info("server: {} took {} rows", r->Describe(), n);
      continue;
    }
    s = s.WithContext(who + ": handing " + std::to_string(n) + " rows to " + r->Describe());
    if (taken == 0) return undo(s);  // nobody switched: this server keeps serving every key
    spdlog::error("{} (those rows are lost: they start again from the initializer there)", s.ToString());
    if (lost.ok()) lost = s;
  }
  if (while_frozen) while_frozen();
  // Deregistering while still frozen: the view shows this server left before any request here is
  // refused as moved, so a client refused finds the new owners in its refreshed view.
  Status left = node_.Leave();
  handed_over_ = true;
  freeze.unlock();
  spdlog::info("server: handed {} rows of {} sparse tables to {} servers; layout of {} servers, {} left the job", rows,
               specs.size(), receivers.size(), after.servers, after.left.size());
  if (Status s = EraseRowsNotOwned(); !s.ok()) spdlog::warn("server: {}", s.ToString());
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
  std::unique_lock freeze(migrate_mu_);
  PsLayout expect = KeyLayout();
  if (expect.Left(leaver)) return request.Reply(request.MakeReply());  // a repeat: taken already
  expect.Leave(leaver);
  if (theirs.servers != expect.servers || theirs.left != expect.left) {
    // A join or another leave is under way: the leaving server asks again.
    return fail(Status::Unavailable("migrateRows from " + from->Describe() + ": its layout (" +
                                    std::to_string(theirs.servers) + " servers, " + std::to_string(theirs.left.size()) +
                                    " left) is not this one's after its leave (" + std::to_string(expect.servers) +
                                    " servers, " + std::to_string(expect.left.size()) + " left)"));
  }
  if (Status s = ImportRows(msg, leaver, &expect); !s.ok()) return fail(s);
  SetLayoutLeft(expect.left);
  spdlog::info("server: {} left the layout; {} servers serve its keys now", from->Describe(),
               expect.servers - expect.left.size());
  request.Reply(request.MakeReply());
}

}  // namespace strata
