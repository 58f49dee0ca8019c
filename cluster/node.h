// node.h: Node, what every strata process (server, trainer, tool) uses to join a cluster:
// bind its own receive endpoint, register with the scheduler, receive the cluster view,
// heartbeat, pass barriers, use the key-value store, hear about dead and rejoined nodes,
// and leave cleanly. When the scheduler restarts at the same address, the node re-registers with
// its id and rank, re-publishes the kv keys it wrote and re-sends the call it was waiting on
// (a barrier, a kv get) to the new scheduler. Layers above serve their own requests through SetRequestHandler() and
// call peers through rpc().
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/cluster.h"
#include "cluster/split_schedule.h"
#include "common/options.h"
#include "common/rpc.h"

namespace strata {

struct NodeOptions {
  ClusterOptions cluster;
  TransportOptions transport;
  Role role = Role::kTrainer;
  // Where this node listens. Port 0 picks a free port; the address actually bound is what
  // the node registers, so peers can reach it.
  std::string bind = "tcp://127.0.0.1:0";
  // The host peers dial to reach this node (a name or address); empty: the bound address, or
  // this machine's hostname when `bind` names every interface (tcp://*:0, tcp://0.0.0.0:0).
  std::string advertise_host;
  int requested_rank = -1;  // -1: let the scheduler assign one
  // Join a running elastic job (cluster.elastic) at the next rank of the role instead of
  // waiting for the job's first registrations (--join).
  bool join = false;
};

struct NodeEvent {
  // kJoined: a node joined the running job (elastic); kLeft: a node deregistered.
  enum class Kind { kDead, kRejoined, kShutdown, kJoined, kLeft };
  Kind kind;
  NodeInfo node;  // unset for kShutdown
  ClusterView view;
};

// Thread-safe. Event callbacks run on the transport's I/O thread and must not block.
class Node {
 public:
  using EventCallback = std::function<void(const NodeEvent&)>;

  explicit Node(NodeOptions options, InprocHub* hub = nullptr);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Handler for requests the node library does not serve itself. Call before Join(). It sees
  // no request before Join() has the view: a peer may learn of this node from the scheduler
  // before this node's own registration reply arrives, and its requests are held until then and
  // handed over in arrival order.
  void SetRequestHandler(RpcEndpoint::Handler handler);
  // Adds a callback run on every membership event. Call before Join().
  void OnEvent(EventCallback callback);
  // A node the scheduler declared dead while it ran (stalled past cluster.heartbeat_timeout_ms:
  // SIGSTOP, swapping, a starved host) hears so in its next heartbeat's answer. With these set,
  // the heartbeat thread calls `step_down` (give up whatever the job moved elsewhere meanwhile;
  // called again if registering fails and is tried again), registers again at its rank as a new
  // incarnation, as a restarted process would, and calls `rejoined`. Both run on the heartbeat
  // thread: they must not wait long. Without them SchedulerStatus() says so and the process
  // ends. Call before Join().
  void OnDeclaredDead(std::function<void()> step_down, std::function<void()> rejoined);

  // Binds, checks that the scheduler's host and port can be reached (retrying up to
  // cluster.connect_timeout_ms: Unavailable naming them if not), registers and waits for the
  // complete cluster (up to cluster.join_timeout_ms), then starts heartbeating.
  Status Join();
  // Waits at a named barrier until every live member of `scope` arrived. Aborted if a member
  // died; DeadlineExceeded after `timeout`. A scheduler restarting meanwhile is waited for and
  // the barrier entered again at the new one; Unavailable if it stays away past
  // cluster.scheduler_timeout_ms.
  Status Barrier(const std::string& name, wire::BarrierScope scope = wire::BarrierScope::ALL,
                 std::optional<Millis> timeout = std::nullopt);
  // The node keeps what it set, to publish it again to a restarted scheduler.
  Status KvSet(const std::string& key, std::string_view value);
  // Gets a key, waiting up to `wait` for another node to set it (0: NotFound at once).
  Result<std::string> KvGet(const std::string& key, Millis wait = Millis(0));
  // Asks the scheduler for the current view.
  Result<ClusterView> RefreshView();
  // Elastic jobs: fixes the data split of every step below `until` and returns the whole
  // schedule, after adding (join) or removing (leave) this trainer from the first step not fixed
  // yet (cluster/split_schedule.h).
  Result<SplitSchedule> LeaseSplit(int64_t until, wire::SplitChange change = wire::SplitChange::NONE);
  // Asks the scheduler to end the job: every node is told to shut down.
  Status RequestShutdown();
  // A server that joined a running job (--join) and holds every key it takes over: tells the
  // scheduler, which from then on treats its death as an ordinary server's. FailedPrecondition
  // if the scheduler rolled its join back (it was declared dead first): it must not serve.
  Status CommitJoin();
  // Deregisters and stops heartbeating, waiting up to `timeout` (default: the cluster's call
  // timeout) for the scheduler's answer. Idempotent.
  Status Leave(std::optional<Millis> timeout = std::nullopt);
  // Stops heartbeating without deregistering: the scheduler declares this node dead after
  // cluster.heartbeat_timeout_ms, and a new process may take its rank. An elastic server that
  // could not hand its keys over stops so (a clean leave would tell the others they moved).
  void StopWithoutLeaving();
  // Waits for the scheduler's shutdown notice. True if it came.
  bool WaitForShutdown(Millis timeout);
  // Unavailable naming the scheduler and for how long once no heartbeat had an answer for
  // cluster.scheduler_timeout_ms (0: never); OK before that, and before Join. FailedPrecondition
  // once the scheduler declared this node dead while it ran, unless OnDeclaredDead brings it
  // back (then only if that was refused); FailedPrecondition (kSuperseded) once a newer process
  // took this node's rank meanwhile: the process must end, and Leave() then does not deregister
  // (that would take the newer process out of the job).
  Status SchedulerStatus() const;
  // True while this node may have been declared dead without knowing it: its heartbeats stopped
  // for longer than cluster.heartbeat_timeout_ms (the process was stopped or starved; a scheduler
  // outage does not count, the beats go on failing), until the scheduler answers a beat sent
  // after that silence. A replicated server serves nothing meanwhile: its backup may serve the
  // shard already.
  bool Silent() const;

  uint32_t id() const { return id_; }
  int rank() const { return rank_; }
  Role role() const { return options_.role; }
  const NodeOptions& options() const { return options_; }
  const std::string& address() const { return address_; }
  ClusterView view() const;
  RpcEndpoint& rpc() { return rpc_; }
  // Our link to the scheduler.
  PeerId scheduler() const { return scheduler_; }

 private:
  void Handle(Request request);
  // This node's incarnation at its rank, from the view (kIncarnationNotSaid before Join).
  uint32_t IncarnationLocked() const;
  // Hands the requests held while joining to the application handler, then lets Handle() hand
  // them over directly.
  void DeliverHeldRequests();
  void Heartbeats();
  // Calls the scheduler until `timeout`: when it restarts meanwhile (its answer will never come)
  // or answers Unavailable (it restarted and does not know us), re-registers and calls again.
  Result<Message> CallScheduler(const std::function<Message()>& make, Millis timeout);
  // Registers again with a restarted scheduler (keeping id, rank and incarnation) and publishes
  // the kv keys this node set, unless that was done since `generation` (another thread did it).
  Status Rejoin(uint64_t generation, std::string_view why = "with the restarted scheduler");
  // Declared dead while running: steps down and registers again (OnDeclaredDead).
  void ComeBack(uint64_t generation);
  Millis Timeout() const { return Millis(options_.transport.request_timeout_ms); }

  const NodeOptions options_;
  RpcEndpoint rpc_;
  RpcEndpoint::Handler app_handler_;
  std::vector<EventCallback> on_event_;
  PeerId scheduler_ = kNoPeer;
  std::string address_;
  std::atomic<uint32_t> id_{kUnassignedNode};
  std::atomic<int> rank_{-1};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  ClusterView view_;
  bool shutdown_notice_ = false;
  bool joined_ = false;
  bool leaving_ = false;
  bool delivering_ = false;     // application requests go to app_handler_ (set once joined)
  std::vector<Request> held_;   // application requests that came before that
  std::map<std::string, std::string> kv_written_;  // what KvSet stored, for a restarted scheduler
  uint64_t generation_ = 0;     // re-registrations so far; calls in flight before one are re-sent
  bool rejoin_wanted_ = false;  // a heartbeat's answer said "re-register"; the heartbeat thread does it
  uint64_t rejoin_generation_ = 0;  // ... at this generation (stale once it moved on)
  std::mutex rejoin_mu_;        // one re-registration at a time
  bool come_back_wanted_ = false;  // declared dead, and OnDeclaredDead set: the heartbeat thread comes back
  std::function<void()> step_down_, rejoined_;  // OnDeclaredDead
  std::atomic<bool> declared_dead_{false};      // since the last heartbeat answer that said so
  mutable std::mutex dead_mu_;  // guards come_back_failed_, superseded_ (a leaf: taken under mu_ too)
  Status come_back_failed_;     // the scheduler refused to take this node back
  Status superseded_;           // a newer process holds this node's rank: it must end
  std::thread heartbeat_;
  // Steady-clock milliseconds of the scheduler's last heartbeat answer (0: not joined yet), and
  // heartbeats failed since (warnings are rate-limited: the first, then one per 10 s).
  std::atomic<int64_t> heard_ms_{0};
  // Steady-clock milliseconds of the last heartbeat sent (0: none yet), and of the first beat
  // sent after a silence longer than the heartbeat timeout, until an answer to it (0: none).
  std::atomic<int64_t> beat_sent_ms_{0}, silent_since_ms_{0};
  std::atomic<uint64_t> failed_beats_{0};
  std::atomic<int64_t> warned_ms_{0};
};

}  // namespace strata
