// client.h: PsClient, a trainer's handle on the parameter servers (in the spirit of ps-lite's
// KVWorker, with Status and timeouts). Push and pull are asynchronous: each returns a PsTicket,
// and Wait() completes it. Sparse keys are sliced per server (one request per server per call,
// many calls in flight); duplicate keys in one push are merged (gradients summed) before
// sending. A dense tensor travels as one request per chunk, so transfer and apply overlap.
// Dense pushes are zero-copy: the gradient buffer is handed to the transport as is, so it
// must stay valid and unchanged until Wait() returns. Pull outputs are written at Wait().
//
// Server outages: a call that fails with DeadlineExceeded or Unavailable (a server
// killed, or restarted and rejoined at a new address) is sent again, the same request to that
// server rank's current address, for up to `timeout` more (see Wait). Every push carries an id
// that its retries repeat, and a server applies an id once (it remembers each sender's recent
// ids): a push whose reply was lost is not applied again by the retry. A tiered store records
// the id with the update (in the same synced WAL write with durability wal; in each checkpoint
// with durability checkpoint), so a server restarted from it still knows the ids of the
// updates it kept. A memory store keeps nothing across a restart, ids included; a BSP push
// accumulated for a clock not yet applied is lost by a crash and its retry is applied.
// Pulls, clocks and createTable are idempotent.
//
// With the servers' replication (server.replication: backup; ps/replication.h) shard r lives on
// servers r and r + 1, one serving it. Requests go to the one last used; when it is down, or
// answers that it does not serve the shard, they go to the other (NextHolder), as a retry with
// the same push id: a push the dead server forwarded before dying is a duplicate there.
// Route() is the one place that maps a shard to a server.
//
// Elastic jobs: a server may join (cluster.elastic). The client places keys with its PsLayout
// (ps/layout.h) and takes the new server in as soon as its view shows it (before every call and
// clock); a server answers a sparse key another server holds now with kLayoutMoved, and the
// client sends those keys of the request, with the same push id, where they live now.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cluster/node.h"
#include "ps/layout.h"
#include "ps/replication.h"
#include "ps/table.h"

namespace strata {

// A push or pull in flight: one call per server it touched.
class PsTicket {
 private:
  friend class PsClient;
  // A sparse request's contents, to send its keys elsewhere if they moved (elastic servers).
  struct Sparse {
    uint32_t table = 0;
    int64_t clock = 0;
    bool push = false, return_values = false;
    uint64_t push_id = 0;
    float lr = -1.0f;
    size_t dim = 0;
    std::shared_ptr<std::vector<uint64_t>> keys;
    std::shared_ptr<std::vector<float>> grads;  // push: keys.size() * dim
    // The rows on the wire in bf16: a push's gradients, a pull's values (a push-pull's values
    // come back in fp32).
    bool bf16 = false;
  };
  struct Part {
    Part(uint32_t server_rank, std::function<Status(const Message& reply)> scatter, std::function<Message()> build)
        : server(server_rank), on_reply(std::move(scatter)), make(std::move(build)) {}
    std::shared_ptr<const Sparse> sparse;  // set for sparse pushes and pulls
    Ticket ticket;
    uint32_t server;
    std::function<Status(const Message& reply)> on_reply;  // scatters values, if any
    std::function<Message()> make;  // builds the request again, for a retry
    std::string sent_to;             // the server address of the last send
  };
  std::vector<Part> parts_;
  Status early_;  // an error found before anything was sent
  std::chrono::steady_clock::time_point completed_{};  // Wait: the last part's reply
};

// Not thread-safe: one trainer thread uses it (the Node underneath is).
class PsClient {
 public:
  // `replication`: the servers' server.replication (where a dead primary's shard is served).
  explicit PsClient(Node& node, Millis timeout = Millis(30000), Replication replication = Replication::kNone);

  // Creates a table on every server (or checks that the same spec exists). Blocking.
  Status CreateTable(const TableSpec& spec);
  // How many servers hold dense chunks (the job's first cluster.servers; PlaceDense's loads).
  Result<uint32_t> DenseServers();

  // Sparse tables. `out` holds keys.size() * dim floats; `grads` likewise. `bf16`: the rows
  // travel rounded to bf16 (half their bytes; the keys stay 8 bytes each): the servers widen the
  // gradients and keep fp32 rows, and the pulled values are widened into `out`.
  PsTicket Pull(uint32_t table, std::span<const uint64_t> keys, float* out, bool bf16 = false);
  PsTicket Push(uint32_t table, std::span<const uint64_t> keys, const float* grads, bool bf16 = false);
  // Push, then return the updated rows in one round trip (ASP and SSP tables).
  PsTicket PushPull(uint32_t table, std::span<const uint64_t> keys, const float* grads, float* out);

  // Dense tables, the whole tensor (numel floats).
  // `bf16`: the servers send the values rounded to bf16 (half the bytes), widened into `out`.
  // `next_clock`: the values of the clock after this trainer's current one, asked before its
  // Clock: a BSP table answers once it applied the current clock (what a pull after Clock
  // gets), so the pull can go while the trainer still pushes.
  PsTicket PullDense(uint32_t table, float* out, bool bf16 = false, bool next_clock = false);
  // The values rounded to bf16, kept so in `out` (numel of them).
  PsTicket PullDenseBf16(uint32_t table, uint16_t* out, bool next_clock = false);
  // Zero-copy: the frames point into `grads`, which must outlive the call and its retries. With
  // `owner` the frames also hold it, so the bytes stay alive as long as ZeroMQ may still send
  // them (a frame queued for a server that died and is retried elsewhere); without, the caller
  // keeps them alive until Wait returned and no frame can be queued.
  PsTicket PushDense(uint32_t table, const float* grads, std::shared_ptr<const void> owner = nullptr);
  // The same gradients rounded to bf16 (half the bytes); the servers widen them to fp32.
  PsTicket PushDenseBf16(uint32_t table, const uint16_t* grads, std::shared_ptr<const void> owner = nullptr);

  // Waits for every server's part. The first error names the server. A part that failed with
  // DeadlineExceeded/Unavailable is retried (after `timeout`, default the client's
  // timeout + 1 s) for up to the client's timeout, so an outage may take about twice that.
  Status Wait(PsTicket& ticket, std::optional<Millis> timeout = std::nullopt);

  // After Wait: when the last of the ticket's parts got its reply (nullopt before, or if none did).
  static std::optional<std::chrono::steady_clock::time_point> CompletedAt(const PsTicket& ticket);
  // Whether every server's reply (or error) to `ticket` is in, so that Wait returns without
  // waiting (unless a part failed and is sent again). Never blocks.
  static bool Arrived(const PsTicket& ticket);

  // This trainer finished its current clock: tells every server (after the pushes sent before
  // it, which ZeroMQ keeps in order), then advances. Pushes and pulls carry the current clock.
  // `grad_scale`: the factor the clipped tables apply this clock's gradients with (global
  // clipping; every trainer must send the same).
  Status Clock(float grad_scale = 1.0f);
  // Global clipping, after this clock's pushes were acknowledged: the sum of the squares of the
  // clipped tables' combined gradients of the current clock, the servers' partial sums added in
  // server order (every trainer gets the same double). Each server answers once every pusher's
  // pushes of its chunks arrived; bounded by the client's timeout.
  Result<double> GradSumSquares();
  int64_t clock() const { return clock_; }
  // A trainer that joined a running job starts at the others' clock, not at 0.
  void set_clock(int64_t clock) { clock_ = clock; }
  // Elastic BSP: the trainers (ranks, ascending) that split the current clock's step, sent with
  // its clock messages (wire ClockRequest.memberRanks); empty (the default): a fixed membership.
  void set_members(std::vector<uint32_t> ranks) { members_ = std::move(ranks); }
  // The learning rate of this step (optimizer.schedule, warmup_steps): the pushes sent after
  // this call are applied with it instead of each table's lr (negative: the table's).
  void set_lr(float lr) { lr_ = lr; }

  // Every server writes its shard of every table under checkpoint directory `checkpoint`
  // (ps/server_checkpoint.h). Blocking; the caller keeps pushes away until it returns.
  Status SaveTables(const std::string& checkpoint);

  // Server rank `server`'s statistics (JSON), whichever shards it serves.
  Result<std::string> ServerStats(uint32_t server);

  // Requests sent again after a retryable failure (see above), since construction.
  uint64_t retries() const { return retries_; }
  // Parts sent again to other servers because their keys moved (elastic servers).
  uint64_t resplits() const { return resplits_; }

 private:
  // The spec of a table this client created, which must be of `kind`.
  Result<const TableSpec*> Spec(uint32_t table, TableKind kind) const;
  Status Connect();
  PsTicket PushDenseAs(uint32_t table, const void* grads, DType dtype, std::shared_ptr<const void> owner);
  // The values sent as `wire` (f32, or bf16) and written into `out` as `into` (f32; bf16 with a
  // bf16 wire only).
  PsTicket PullDenseAs(uint32_t table, void* out, DType wire, DType into, bool next_clock);
  PsTicket Sparse(uint32_t table, std::span<const uint64_t> keys, const float* grads, float* out,
                  bool push, bool bf16);
  // Sends part.make() to server part.server and stores its ticket.
  void Send(PsTicket::Part& part, Millis timeout);
  // Waits for a part's reply; Unavailable as soon as its server is seen down or replaced.
  Result<Message> Await(PsTicket::Part& part, Millis timeout);
  // Re-sends a failed part until it succeeds, fails otherwise, or the retry budget runs out.
  Result<Message> Retry(PsTicket::Part& part, Result<Message> failed);
  // Points servers_[shard] at the server to send shard `shard`'s requests to now: the one used
  // so far, or its other holder when that one is down or `refused` them (NextHolder); at its
  // address in the current view (reconnecting if it moved). Unavailable while it is down.
  Status Route(uint32_t shard, bool refused);
  static bool Retryable(const Status& s);
  // Elastic: takes in the servers that joined since (the view has more), growing the layout.
  Status GrowLayout();
  // A sparse part whose server answered kLayoutMoved: sends its keys to where they live now (the
  // same push id), waits, and answers as the part's server would have (client_layout.cc).
  Result<Message> Resplit(PsTicket::Part& part, int depth = 0);
  // Waits for a part, retrying an outage and following moved keys.
  Result<Message> Finish(PsTicket::Part& part, Millis timeout);
  // A sparse request's part to `server` (built again on a retry).
  PsTicket::Part SparsePart(uint32_t server, std::shared_ptr<const PsTicket::Sparse> q);

  Node& node_;
  const Millis timeout_;
  const Replication replication_;
  PsLayout layout_;  // where keys and chunks live (elastic servers: grows)
  std::vector<PeerId> servers_;  // by shard (server rank), the server its requests go to
  std::vector<uint32_t> holders_;  // by shard: that server's rank (replication: it may be the next one)
  std::vector<std::string> addresses_;  // what servers_ are connected to
  uint64_t retries_ = 0;
  uint64_t resplits_ = 0;
  // Push ids: this node's id in the high bits, a counter below (unique per client, repeated
  // only by a retry of the same request).
  uint64_t NextPushId() { return (static_cast<uint64_t>(node_.id()) << 40) | ++pushes_sent_; }
  uint64_t pushes_sent_;  // starts at a random point (client.cc)
  std::map<uint32_t, TableSpec> tables_;
  int64_t clock_ = 0;
  std::vector<uint32_t> members_;
  float lr_ = -1.0f;
};

}  // namespace strata
