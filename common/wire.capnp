# wire.capnp: the bodies of strata's messages. A message on the wire is one envelope frame
# followed by one raw frame per payload (tensor bytes, sent zero-copy). The envelope frame is a
# fixed binary header (op, request id, sender, status, ...) and the payloads' descriptors, laid
# out in common/envelope.h, then, only for ops that carry one, the op's body: an Envelope below
# as a Cap'n Proto message. Big tensors never go through Cap'n Proto builders. Decoding
# validates every field (common/message_decode.cc); handlers may trust a decoded Message.
@0xb6a1d3c2e4f50718;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("strata::wire");

# Mirrors strata::StatusCode (common/status.h); the numbers are the same.
enum StatusCode {
  ok @0; invalidArgument @1; notFound @2; alreadyExists @3; deadlineExceeded @4;
  unavailable @5; corruption @6; ioError @7; failedPrecondition @8; resourceExhausted @9;
  aborted @10; cancelled @11; internal @12; unimplemented @13;
}

# Mirrors strata::DType (common/dtype.h).
enum DType { f32 @0; f16 @1; bf16 @2; i32 @3; i64 @4; u8 @5; }

enum Role { scheduler @0; server @1; trainer @2; client @3; }

# Described one payload frame in the Cap'n Proto envelope (Envelope.obsoletePayloads); payload
# descriptors are binary now (common/envelope.h). Kept for the ordinals of Envelope.
struct PayloadDesc {
  dtype @0 :DType;
  shape @1 :List(UInt64);   # [] is a scalar (one element)
  byteSize @2 :UInt64;
}

struct NodeInfo {
  id @0 :UInt32;            # cluster-wide id: 0 scheduler, then servers by rank, then trainers
  role @1 :Role;
  rank @2 :Int32;           # rank within the role
  address @3 :Text;         # where the node's ROUTER socket listens
  alive @4 :Bool;
  incarnation @5 :UInt32;   # bumped each time the node re-registers after being declared dead
  left @6 :Bool;            # elastic jobs: deregistered (a server: after handing its keys over)
  # Elastic jobs: a server that joined the running job and does not serve yet (its keys are
  # still moving to it). If it dies so, the scheduler marks it left: its join is rolled back.
  joining @7 :Bool;
}

struct ClusterView {
  epoch @0 :UInt64;         # bumped on every membership change
  nodes @1 :List(NodeInfo);
}

struct RegisterRequest {
  role @0 :Role;
  address @1 :Text;
  requestedRank @2 :Int32 = -1;   # -1: the scheduler assigns one (by sorted address)
  hostname @3 :Text;
  pid @4 :UInt32;
  # Re-registration with a scheduler that restarted: the node keeps the id, rank (requestedRank)
  # and incarnation it had, and sends the view it holds, from which a restarted scheduler
  # rebuilds the membership of the running job.
  rejoin @5 :Bool;
  nodeId @6 :UInt32;
  incarnation @7 :UInt32;
  view @8 :ClusterView;
  # Elastic membership (cluster.elastic): join a running job at the next free rank of the role.
  join @9 :Bool;
}

struct RegisterReply {
  nodeId @0 :UInt32;
  rank @1 :Int32;
  view @2 :ClusterView;
  heartbeatIntervalMs @3 :UInt32;
  heartbeatTimeoutMs @4 :UInt32;
}

enum BarrierScope { all @0; servers @1; trainers @2; }

struct BarrierRequest {
  name @0 :Text;
  scope @1 :BarrierScope;
}

struct HeartbeatReply {
  viewEpoch @0 :UInt64;
  reregister @1 :Bool;      # the scheduler does not know the sender (it restarted): register
                            # again with rejoin set
}

struct KvSet {
  key @0 :Text;
  value @1 :Data;
}

struct KvGet {
  key @0 :Text;
  waitMs @1 :UInt32;        # 0: answer at once (NotFound if absent); else wait up to this long
}

struct NodeEvent {
  enum Kind { dead @0; rejoined @1; joined @2; left @3; }   # joined: an elastic join; left: deregistered
  kind @0 :Kind;
  node @1 :NodeInfo;
  view @2 :ClusterView;
}

# ---- parameter server ------------------------------------------------------------------------

enum TableKind { dense @0; sparse @1; }
enum OptimizerKind { sgd @0; adagrad @1; adam @2; adamw @3; }
enum InitKind { zeros @0; constant @1; uniform @2; normal @3; }
enum ConsistencyMode { bsp @0; asp @1; ssp @2; }
enum Aggregate { sum @0; mean @1; }

struct OptimizerSpec {
  kind @0 :OptimizerKind;
  lr @1 :Float32 = 0.01;
  momentum @2 :Float32;          # sgd
  beta1 @3 :Float32 = 0.9;       # adam, adamw
  beta2 @4 :Float32 = 0.999;
  eps @5 :Float32 = 1e-8;
  weightDecay @6 :Float32;
  clipNorm @7 :Float32;          # per-row gradient clipping; 0 = off
  initialAccumulator @8 :Float32 = 0.1;  # adagrad
}

struct InitSpec {
  kind @0 :InitKind;
  a @1 :Float32;                 # constant value; uniform low; normal mean
  b @2 :Float32;                 # uniform high; normal stddev
  seed @3 :UInt64;
  # A tensor-parallel shard's slice of the unsplit tensor (ShardSpec, common/shard.h); a whole
  # tensor has shardParts 1 (or 0, from an older writer) and no shardGlobal.
  shardGlobal @4 :List(Int64);
  shardAxis @5 :Int32;
  shardBlocks @6 :Int32;
  shardIndex @7 :Int32;
  shardParts @8 :Int32;
  rowDim @9 :UInt32;             # nonzero: values keyed by rows of this many floats
}

struct TableSpec {
  id @0 :UInt32;
  name @1 :Text;
  kind @2 :TableKind;
  dim @3 :UInt32;                # sparse: floats per row
  numel @4 :UInt64;              # dense: floats in the tensor
  chunkFloats @5 :UInt32;        # dense: floats per chunk
  optimizer @6 :OptimizerSpec;
  init @7 :InitSpec;
  consistency @8 :ConsistencyMode;
  staleness @9 :UInt32;          # ssp
  aggregate @10 :Aggregate;      # bsp: how the trainers' gradients of one clock combine
  pushers @11 :UInt32;           # dense bsp: pushes of each chunk per clock that complete it
                                 # (applied then, before the clock messages); 0: at the clock
  # dense bsp with pushers (optimizer.clip_norm): the chunks are not applied as they complete but
  # at the clock messages, scaled by the clock's gradScale; gradNorm requests cover the table.
  clipped @12 :Bool;
  # dense: chunk c lives on server (c + placement) % servers; the default (all ones) means the
  # table id, what every table written before this field used.
  placement @13 :UInt32 = 0xffffffff;
}

# Sparse: payload 0 is the keys (i64, [n]); a push adds payload 1, the gradients (f32, [n, dim]).
# Dense: payload 0 is the chunk indices (i64, [n]); a push adds payload 1, those chunks'
# gradients concatenated (f32). A pull's reply carries the values the same way (payload 0).
struct PushRequest {
  table @0 :UInt32;
  clock @1 :Int64;
  returnValues @2 :Bool;         # push-pull: the reply carries the updated values
  pushId @3 :UInt64;             # nonzero: the same on a retry; a server applies an id once
  # The learning rate of the pushing step (the job's schedule, computed by the trainer exactly as
  # its local optimizer would): the update uses it instead of the table's; negative: the table's.
  # NaN and infinity are refused. A BSP clock's pushes of one key or chunk must all carry the same.
  lr @4 :Float32 = -1.0;
}

struct PullRequest {
  table @0 :UInt32;
  clock @1 :Int64;               # wait until the table is consistent for this clock
  bf16 @2 :Bool;                 # dense: the reply's values rounded to bf16 (half the bytes)
}

# ---- elastic membership (docs/reliability.md, "Elastic membership") ---------------------------

enum SplitChange { none @0; join @1; leave @2; }

# The trainers that split the global batches of steps fromStep.. (until the next entry's).
struct SplitEntry {
  fromStep @0 :Int64;
  trainers @1 :List(Int32);      # trainer ranks, ascending: rank r reads slot index(r)
}

# trainer -> scheduler: fix the membership of every step below `until` (a lease), after adding
# or removing the sender (join / leave) from the first step not fixed yet.
struct SplitLease {
  until @0 :Int64;
  change @1 :SplitChange;
}

# reply to splitLease: every entry, and the first step whose membership is not fixed yet.
struct SplitSchedule {
  entries @0 :List(SplitEntry);
  horizon @1 :Int64;
}

# A position in the rows one server hands another in an elastic join or leave (ps/migration.h):
# the moving rows of its sparse tables in id order, then the push ids it remembers.
struct MigrateCursor {
  table @0 :UInt32;         # the table (its id) whose moving rows come next, from number `row`...
  row @1 :UInt64;
  pushIds @2 :Bool;         # ...or, every row sent, the push ids from number `row`
}

# joining server -> every older server: switch to a layout of `servers` sparse servers and send
# the rows (with optimizer state) that it gives to the joining server. Reply: migrateRows, one
# chunk of them (server.migrate_chunk_mb). Also sent by a server taking the rows of one leaving
# the job, to the leaving one. The receiver asks for chunk after chunk (`cursor`) until a reply
# has no `next`; asking for one again returns the same rows.
struct MigrateRequest {
  servers @0 :UInt32;
  left @1 :List(UInt32);    # the server ranks that left the job, as the joining server knows them
  done @2 :Bool;            # the joining server took every older server's rows: erase those it took
  cursor @3 :MigrateCursor; # the chunk asked for (the `next` of the previous one); absent: the first
}

# Payloads: per table, its keys (i64 [n]) then its records (f32 [n, width]); then push ids the
# sender has seen (i64 [m, 2]: sender node, id). As the reply to migrate: one chunk, a slice of
# the rows of each table it lists and a slice of the push ids. Also sent, without payloads or
# tables, as a request by a server leaving an elastic job to every other live server, with the
# layout after its leave in `servers` and `left`: the receiver then asks the leaving server for
# its rows (migrate) and answers (empty) once it holds them all.
struct MigrateRows {
  tables @0 :List(TableSpec);
  trainerClocks @1 :List(TrainerClock);
  servers @2 :UInt32;       # a leave's hand-over: the layout's server ranks...
  left @3 :List(UInt32);    # ...and those that left it, the sender included
  next @4 :MigrateCursor;   # a chunk: where the next one starts; absent: it was the last
  rows @5 :UInt64;          # a chunk: the rows the whole migration moves (every chunk's)
  # A stateTransfer chunk: the copy it belongs to (the sender's incarnation << 32 | its count of
  # copies sent, so a restarted sender's copies still count up). A newer copy starts over; the
  # chunks of an older one are refused.
  copy @6 :UInt64;
  # A stateTransfer's last chunk: the shard's BSP tables as they stand between clocks (each
  # table's applied clock and its accumulations not applied yet); a migration's last chunk: the
  # same for the moving rows only (their accumulations leave the sender with them). Payloads
  # after the rows' and push ids': one f32 per BspState, its entries' sums one after another.
  bsp @7 :List(BspState);
  # Elastic BSP, a joining server's last chunk from each older server: that server's record of
  # the clocks it has not applied (who split each step, who clocked it) and the trainer ranks it
  # counts as dead, so the joining server completes the clocks whose messages reached only the
  # older server (ps/clock_members.h). A stateTransfer's last chunk: the same of the copied
  # server, which the copy's holder takes as its own. The same fields in a leave's hand-over are
  # ignored.
  clockMembers @8 :List(ClockMembersRecord);
  deadRanks @9 :List(UInt32);
  # A stateTransfer's last chunk: the global clipping factors (ClockRequest.gradScale) of the
  # clocks not applied yet.
  gradScales @10 :List(GradScaleOfClock);
}

struct GradScaleOfClock {
  clock @0 :Int64;
  scale @1 :Float32;
}

struct ClockMembersRecord {
  clock @0 :Int64;
  members @1 :List(UInt32);   # trainer ranks that split the step, ascending
  clocked @2 :List(UInt32);   # those whose clock message arrived, in arrival order
}

# One BSP table's state on a server: the clocks applied, and per accumulation of a later clock
# (the i-th of each list) its clock, key (dense: chunk), pushes summed and their lr (negative:
# the table's).
struct BspState {
  table @0 :UInt32;
  appliedClock @1 :Int64;
  clocks @2 :List(Int64);
  keys @3 :List(UInt64);
  pushes @4 :List(UInt32);
  lrs @5 :List(Float32);
  # Elastic BSP (cluster.elastic): per entry, 0 for an accumulation of the clock's sums, or the
  # node id + 1 of the trainer whose push it is, not yet folded in by that trainer's clock
  # message (PsServer::Table::staged). Empty: every entry is a sum.
  stagedBy @6 :List(UInt32);
  # Tables with pushers (a dense chunk applied once its pushers all pushed it): the chunks
  # applied ahead of appliedClock, and for each the clock it applies next (the i-th of each).
  chunkKeys @7 :List(UInt64);
  chunkNext @8 :List(Int64);
}

struct TrainerClock {
  node @0 :UInt32;
  clock @1 :Int64;
}

struct ClockRequest {
  clock @0 :Int64;               # the sender finished this clock
  # Global gradient clipping: clipped tables apply this clock's gradients times this factor
  # (min(1, clip_norm / norm), the same on every trainer; NaN, infinity and negatives refused).
  gradScale @1 :Float32 = 1.0;
  # Elastic BSP (cluster.elastic, sync.consistency bsp): how many trainers split this clock's
  # step (the scheduler's split schedule), the same in every clock message of the clock: the
  # number of memberRanks. 0: a fixed membership (every live trainer).
  members @2 :UInt32;
  # Elastic BSP: the trainers that split this clock's step, by trainer rank, ascending (members
  # of them). The server completes the clock once each of them clocked it or was declared dead:
  # a trainer that dies mid-step is left out of the clocks it did not finish.
  memberRanks @3 :List(UInt32);
  # Elastic servers: how many server ranks the sender's layout counts (0: not stated). A server
  # whose layout counts more refuses the message as moved (kLayoutMoved) before counting it: the
  # trainer has not seen a joining server yet, and sends the clock again to every server of its
  # refreshed layout, the joining one included.
  servers @4 :UInt32;
}

# trainer -> every server, after its pushes of clock `clock` were acknowledged: the sum of the
# squares of the clipped tables' gradients of that clock on this server, each chunk combined
# (summed, then mean-scaled) exactly as it will be applied. Answered once every pusher's pushes
# of the server's chunks of those tables arrived. Reply: gradNorm with sumSquares and chunks.
struct GradNorm {
  clock @0 :Int64;
  sumSquares @1 :Float64;        # reply
  chunks @2 :UInt64;             # reply: the chunks summed
}

# The body of a message whose op carries one (the header's op names the union's member, and
# Decode requires the two to agree). The fields before the union are no longer written: the
# header carries them since the envelope left Cap'n Proto (common/envelope.h). They keep their
# numbers so that the union's ordinals, and the recorded fuzz inputs, stay valid.
struct Envelope {
  obsoleteRequestId @0 :UInt64;
  obsoleteIsReply @1 :Bool;
  obsoleteSender @2 :UInt32 = 0xffffffff;
  obsoleteStatus @3 :StatusCode;
  obsoleteErrorMessage @4 :Text;
  obsoletePayloads @5 :List(PayloadDesc);
  obsoleteShard @33 :Int32 = -1;
  obsoleteOrigin @34 :UInt32 = 0xffffffff;
  obsoleteIncarnation @39 :UInt32 = 0xffffffff;

  # The operation. Add new members at the end; never renumber.
  body :union {
    empty @6 :Void;                 # a plain reply (ack or error)
    register @7 :RegisterRequest;
    registerReply @8 :RegisterReply;
    getView @9 :Void;
    view @10 :ClusterView;          # reply to getView
    barrier @11 :BarrierRequest;    # reply: empty, once every member arrived (or an error)
    heartbeat @12 :Void;
    heartbeatReply @13 :HeartbeatReply;
    kvSet @14 :KvSet;
    kvGet @15 :KvGet;
    kvValue @16 :Data;              # reply to kvGet
    nodeEvent @17 :NodeEvent;       # scheduler -> node, one-way
    deregister @18 :Void;           # a node leaving cleanly
    shutdown @19 :Void;             # scheduler -> node, one-way: the job is over
    echo @20 :Void;                 # reply with the same payloads (tests, benchmarks)
    createTable @21 :TableSpec;     # trainer -> every server
    push @22 :PushRequest;          # reply: empty, or values (payload 0) when returnValues
    pull @23 :PullRequest;          # reply: values (payload 0)
    values @24 :Void;               # reply to pull / push-pull
    clock @25 :ClockRequest;        # trainer -> every server, after its pushes of that clock
    getStats @26 :Void;
    stats @27 :Text;                # reply to getStats: JSON
    saveTables @28 :Text;           # trainer -> every server: write its shard of every table
                                    # under this checkpoint directory (ps/server_checkpoint.h)
    splitLease @29 :SplitLease;     # trainer -> scheduler (elastic data split)
    splitSchedule @30 :SplitSchedule;  # reply to splitLease
    migrate @31 :MigrateRequest;    # joining server -> older server
    migrateRows @32 :MigrateRows;   # reply to migrate
    # Replication (ps/replication.h). A restarted server asks the server serving `shard` for a
    # copy of it; that server answers, then sends the copy as a stateTransfer on the link its
    # forwarded updates take, so the restarted server applies the copy before any of them.
    replicaJoin @35 :Void;
    # A chunk of the copy of shard `shard`, in the layout of migrateRows chunks (server.migrate_chunk_mb
    # each; `next` absent on the last, `rows` the whole copy's); all are sent at once, in order.
    stateTransfer @36 :MigrateRows;
    gradNorm @37 :GradNorm;         # trainer -> every server (global clipping); reply: gradNorm
    # A joined server -> scheduler: it holds every key it takes over. Reply: empty once it may
    # serve them; FailedPrecondition if its join was rolled back (it was declared dead first).
    joinCommit @38 :Void;
  }
}
