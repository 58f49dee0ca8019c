// scheduler.h: Scheduler, the membership and rendezvous service of a strata cluster.
//  - Registration: servers and trainers register (role, address, optionally a rank). Once the
//    expected count of each role has joined, ranks are fixed (requested ranks kept, the rest
//    filled in address order, so they are deterministic) and every node gets the view.
//  - Named barriers over all nodes, the servers or the trainers.
//  - Heartbeats: a node silent past the timeout is declared dead and every live node is told
//    (a NodeEvent); barriers waiting on it fail with an error naming it. A dead node may
//    re-register with its rank and rejoins with a new incarnation.
//  - A key-value store (set / get / get-with-wait) that bootstraps collectives.
//  - Elastic membership (cluster.elastic, scheduler_elastic.cc): a node registering with `join`
//    takes the next rank of its role and a fresh node id while the job runs (every node is
//    told: NodeEvent joined), a node deregistering is announced (NodeEvent left), and the
//    trainers' data split is leased from a SplitSchedule (cluster/split_schedule.h).
//  - Clean shutdown: when every node has deregistered, or when someone asks for it.
//  - Restart (docs/architecture.md, "Restarting the scheduler"): a scheduler restarted at the
//    same address keeps no state of its own. It answers a heartbeat from a node it does not
//    know with "re-register"; the first node to do so brings the view it holds, from which the
//    membership (ids, ranks, addresses, incarnations) and the epoch are rebuilt, and every node
//    then re-registers with its own id and rank, re-publishes the kv keys it wrote and re-enters
//    the barrier it was waiting at. A node that does not come back within the heartbeat
//    timeout is declared dead as usual.
// Malformed or duplicate requests get an error reply naming what was wrong; the scheduler
// keeps serving.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster.h"
#include "cluster/split_schedule.h"
#include "common/metrics.h"
#include "common/options.h"
#include "common/rpc.h"

namespace strata {

struct SchedulerOptions {
  ClusterOptions cluster;
  size_t max_kv_key_bytes = 1024;
  size_t max_kv_value_bytes = 1 << 20;
  size_t max_kv_entries = 1 << 16;
  Millis max_kv_wait{600000};  // longest a kvGet may wait
};

// Thread-safe. Owns its RpcEndpoint; requests are handled on its I/O thread, timeouts on a
// monitor thread.
class Scheduler {
 public:
  Scheduler(SchedulerOptions options, std::unique_ptr<Transport> transport);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Binds and starts serving; returns the address nodes should use.
  Result<std::string> Start(const std::string& endpoint);
  // Blocks until the job is over (every node left, or shutdown was requested) or the timeout.
  // True if the job is over.
  bool WaitDone(Millis timeout);
  // Tells every live node to shut down, then stops serving.
  void Stop();
  // Stops serving without telling anyone, as a killed scheduler would (fault injection for
  // tests of a restart). Idempotent; Stop() after it does nothing.
  void Abandon();

  ClusterView view() const;
  // Seconds spent handling each request (a barrier or kv wait that parks it counts until it
  // parks): the scheduler's /metrics histogram.
  Histogram::Snapshot request_seconds() const { return request_seconds_.Read(); }

 private:
  enum class State { kPending, kAlive, kDead, kLeft };
  struct Member {
    NodeInfo info;
    State state = State::kPending;
    std::string hostname;
    uint32_t pid = 0;
    int requested_rank = -1;
    std::chrono::steady_clock::time_point last_seen;
    PeerId peer = kNoPeer;  // our link to the node, for notifications
    // Known from a peer's view after this scheduler restarted; not re-registered yet.
    bool awaiting_rejoin = false;
    // Adopted from a node's view (a restarted scheduler) as not alive: it left or died, the view
    // does not say which, so a new process may take its rank as if it had died.
    bool absent_when_adopted = false;
    // Dead, or absent from an adopted view: its rank may come back (the same process or a new one).
    bool MayComeBack() const { return state == State::kDead || (state == State::kLeft && absent_when_adopted); }
    // FailedPrecondition (kSuperseded) if `message` says an incarnation older than this
    // member's: a process replaced at its rank while it stalled. `what` names the request.
    Status CheckSender(const Message& message, std::string_view what) const;
  };
  struct Registration {
    Role role = Role::kServer;
    std::string address;
    std::string hostname;
    uint32_t pid = 0;
    int requested_rank = -1;
  };
  struct PendingRegistration {
    Request request;
    size_t member;  // index into members_ (members_ only grows)
  };
  struct Barrier {
    wire::BarrierScope scope;
    std::map<uint32_t, Request> waiting;  // by node id
  };
  struct KvWaiter {
    Request request;
    std::string key;
    std::chrono::steady_clock::time_point deadline;
  };

  void Handle(Request request);  // times Dispatch
  void Dispatch(Request request);
  void HandleRegister(Request request);
  // A first registration, or (once the view is complete) a node taking a dead or gone rank.
  void HandleRegisterLocked(Request& request, const Registration& reg);
  void HandleHeartbeat(Request request);
  void HandleBarrier(Request request);
  void HandleKvSet(Request request);
  void HandleKvGet(Request request);
  void HandleDeregister(Request request);
  void HandleShutdown(Request request);
  void HandleSplitLease(Request request);
  // A joined server holds its keys: from now on it serves them, and its death is an ordinary
  // server's (scheduler_elastic.cc).
  void HandleJoinCommit(Request request);

  // The helpers below expect mu_ held.
  ClusterView ViewLocked() const;
  // A node that had registered with this scheduler's previous run (or whose reply was lost)
  // registering again with its id, rank and incarnation.
  void HandleRejoinLocked(Request& request, const Registration& reg);
  // Rebuilds the membership of a running job from the view a re-registering node holds.
  Status AdoptViewLocked(const ClusterView& v, const Registration& reg);
  // Takes a node back at `target`'s rank after it was declared dead; tells the others.
  void RejoinDeadLocked(Request& request, Member& target, const Registration& reg);
  // True if `sender` must re-register before it is served: this scheduler restarted and does
  // not know it yet.
  bool NeedsRejoinLocked(uint32_t sender);
  uint32_t NodeIdFor(Role role, int rank) const;
  // Does node id `id` belong to `role` rank `rank`? The job's first ranks have fixed ids
  // (NodeIdFor); ranks that joined later have the id they were given.
  bool IdMatchesLocked(Role role, int rank, uint32_t id) const;
  // Ranks a role has now: the job's count, or more once nodes joined.
  int RanksLocked(Role role) const;
  // An elastic join: the next rank of the role and a fresh id; tells the others.
  void HandleJoinLocked(Request& request, const Registration& reg);
  // Tells every live node but `about` of a membership change.
  void NotifyEventLocked(wire::NodeEvent::Kind kind, const NodeInfo& about);
  void CompleteRegistrationLocked();
  void ReplyRegisteredLocked(Request& request, const Member& m);
  Member* FindMemberLocked(uint32_t id);
  std::vector<const Member*> BarrierMembersLocked(wire::BarrierScope scope) const;
  void MaybeReleaseBarrierLocked(const std::string& name);
  void FailBarriersWithLocked(const Member& lost, const std::string& why);
  // Sends a one-way message built by `make` to every live node except `except`.
  void NotifyAllLocked(const std::function<Message()>& make, uint32_t except = kSchedulerId);
  void DeclareDeadLocked(Member& m, const std::string& why);
  // A joined server that died before it committed its join: marked left (never dead), so every
  // node takes it out of the key layout and the older servers keep the keys they still hold.
  void RollBackJoinLocked(Member& m, const std::string& why);
  void MaybeFinishLocked();
  // Tells every live node to shut down and marks the job over.
  void EndJobLocked();

  void Monitor();

  const SchedulerOptions options_;
  RpcEndpoint rpc_;

  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  std::vector<Member> members_;
  std::vector<PendingRegistration> pending_registrations_;
  bool view_complete_ = false;
  uint64_t epoch_ = 0;
  std::map<std::string, Barrier> barriers_;
  std::map<std::string, std::string> kv_;
  std::vector<KvWaiter> kv_waiters_;
  SplitSchedule split_;  // cluster.elastic: the trainers' data split
  bool done_ = false;
  bool stopping_ = false;

  std::thread monitor_;
  Histogram request_seconds_;
};

}  // namespace strata
