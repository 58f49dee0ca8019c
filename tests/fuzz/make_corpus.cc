// make_corpus.cc: writes the seed corpus of message_fuzzer: a valid encoded message of every op
// (requests, replies, error replies, with and without payloads of every dtype), in the
// fuzzer's input framing (described in message_fuzzer.cc; keep the two in step).
//   make_corpus OUT_DIR
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/frame_batch.h"
#include "common/message.h"

namespace strata {
namespace {

constexpr uint8_t kUnalignedEnvelope = 0x10;
constexpr uint8_t kTightLimits = 0x20;
constexpr uint8_t kBatch = 0x40;

// Frames -> fuzzer input: flags and frame count, n-1 little-endian lengths, the bytes.
std::string Framed(const Frames& frames, uint8_t flags) {
  STRATA_CHECK_LE(frames.size(), 15u);
  std::string out(1, static_cast<char>(frames.size() | flags));
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    const auto len = static_cast<uint32_t>(frames[i].size());
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((len >> (8 * b)) & 0xff));
  }
  for (const Buffer& f : frames) out.append(f.view());
  return out;
}

template <typename T>
Buffer Values(std::vector<T> v) {
  return Buffer::Take(std::move(v));
}

// A mix of payloads: every dtype, scalar and multi-dimensional shapes, an empty tensor.
void AddMixedPayloads(Message& m) {
  m.AddPayload(DType::kF32, {2, 3}, Values<float>({1, 2, 3, 4, 5, 6}));
  m.AddPayload(DType::kF16, {2}, Values<uint16_t>({0x3c00, 0xc000}));
  m.AddPayload(DType::kBF16, {}, Values<uint16_t>({0x3f80}));
  m.AddPayload(DType::kI32, {1, 1, 2}, Values<int32_t>({-1, 7}));
  m.AddPayload(DType::kI64, {3}, Values<int64_t>({1, 1ll << 40, -5}));
  m.AddPayload(DType::kU8, {0}, Buffer());
  m.AddBytes(Buffer::Copy("key-bytes"));
}

void FillNode(wire::NodeInfo::Builder n, uint32_t id, wire::Role role, int rank) {
  n.setId(id);
  n.setRole(role);
  n.setRank(rank);
  n.setAddress("tcp://127.0.0.1:" + std::to_string(7000 + id));
  n.setAlive(true);
  n.setIncarnation(id % 2);
  n.setJoining(id == 3);  // elastic: a server still taking its keys over
}

void FillView(wire::ClusterView::Builder v) {
  v.setEpoch(3);
  auto nodes = v.initNodes(3);
  FillNode(nodes[0], 0, wire::Role::SCHEDULER, 0);
  FillNode(nodes[1], 1, wire::Role::SERVER, 0);
  FillNode(nodes[2], 2, wire::Role::TRAINER, 0);
}

Message Request(uint64_t id) {
  Message m;
  m.set_request_id(id);
  m.set_sender(2);
  return m;
}

struct Seed {
  std::string name;
  Message message;
};

std::vector<Seed> Seeds() {
  std::vector<Seed> seeds;
  auto add = [&](std::string name, Message m) { seeds.push_back({std::move(name), std::move(m)}); };

  {
    Message m = Request(1);
    auto r = m.builder().getBody().initRegister();
    r.setRole(wire::Role::TRAINER);
    r.setAddress("ipc:///tmp/strata-trainer-0");
    r.setRequestedRank(0);
    r.setHostname("host-a");
    r.setPid(4242);
    add("register", std::move(m));
  }
  {
    Message m = Request(1);
    m.set_reply(true);
    m.set_sender(0);
    auto r = m.builder().getBody().initRegisterReply();
    r.setNodeId(2);
    r.setRank(0);
    FillView(r.initView());
    r.setHeartbeatIntervalMs(500);
    r.setHeartbeatTimeoutMs(5000);
    add("registerReply", std::move(m));
  }
  {
    Message m = Request(2);
    m.set_op(Op::GET_VIEW);
    add("getView", std::move(m));
  }
  {
    Message m = Request(2);
    m.set_reply(true);
    FillView(m.builder().getBody().initView());
    add("view", std::move(m));
  }
  {
    Message m = Request(3);
    auto b = m.builder().getBody().initBarrier();
    b.setName("epoch-1");
    b.setScope(wire::BarrierScope::TRAINERS);
    add("barrier", std::move(m));
  }
  {
    Message m = Request(4);
    m.set_op(Op::HEARTBEAT);
    m.set_incarnation(2);
    add("heartbeat", std::move(m));
  }
  {
    Message m = Request(4);
    m.set_reply(true);
    m.builder().getBody().initHeartbeatReply().setViewEpoch(3);
    add("heartbeatReply", std::move(m));
  }
  {
    Message m = Request(5);
    auto kv = m.builder().getBody().initKvSet();
    kv.setKey("nccl-id");
    const std::string value = "0123456789abcdef";
    kv.setValue(
        capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(value.data()), value.size()));
    add("kvSet", std::move(m));
  }
  {
    Message m = Request(6);
    auto kv = m.builder().getBody().initKvGet();
    kv.setKey("nccl-id");
    kv.setWaitMs(1000);
    add("kvGet", std::move(m));
  }
  {
    Message m = Request(6);
    m.set_reply(true);
    const std::string value = "0123456789abcdef";
    m.builder().getBody().setKvValue(
        capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(value.data()), value.size()));
    add("kvValue", std::move(m));
  }
  {
    Message m = Request(0);
    auto e = m.builder().getBody().initNodeEvent();
    e.setKind(wire::NodeEvent::Kind::DEAD);
    FillNode(e.initNode(), 1, wire::Role::SERVER, 0);
    FillView(e.initView());
    add("nodeEvent", std::move(m));
  }
  {
    Message m = Request(7);
    m.set_op(Op::DEREGISTER);
    add("deregister", std::move(m));
  }
  {
    Message m = Request(0);
    m.set_op(Op::SHUTDOWN);
    add("shutdown", std::move(m));
  }
  {
    Message m = Request(8);
    m.set_op(Op::ECHO);
    AddMixedPayloads(m);
    add("echo-payloads", std::move(m));
  }
  {
    Message m = Request(8);
    m.set_op(Op::ECHO);
    m.AddBytes(Buffer::Take(std::vector<uint8_t>(3000, 0xab)));
    add("echo-bytes", std::move(m));
  }
  {
    Message m = Request(9);
    m.set_op(Op::ECHO);
    Message reply = m.MakeReply(1);
    reply.set_op(Op::ECHO);
    reply.AddPayload(DType::kF32, {4}, Values<float>({1, 2, 3, 4}));
    add("echo-reply", std::move(reply));
    add("error-reply", m.MakeErrorReply(1, Status::NotFound("no table 'emb'")));
  }
  {
    Message m = Request(10);
    m.set_op(Op::EMPTY);
    add("empty", std::move(m));
  }
  {  // replication: a push a shard's primary forwards to its backup
    Message m = Request(11);
    m.set_shard(1);
    m.set_origin(3);
    auto p = m.builder().getBody().initPush();
    p.setTable(1);
    p.setPushId(7);
    m.AddPayload(DType::kI64, {2}, Values<int64_t>({1, 2}));
    m.AddPayload(DType::kF32, {2, 2}, Values<float>({0.5f, -1, 2, 3}));
    add("push-forwarded", std::move(m));
  }
  {
    Message m = Request(12);
    m.set_shard(1);
    m.set_op(Op::REPLICA_JOIN);
    add("replicaJoin", std::move(m));
  }
  {  // elastic: a joined server that holds its keys tells the scheduler
    Message m = Request(16);
    m.set_op(Op::JOIN_COMMIT);
    add("joinCommit", std::move(m));
  }
  {  // an elastic BSP clock: its step split by 3 trainers
    Message m = Request(15);
    auto c = m.builder().getBody().initClock();
    c.setClock(7);
    c.setGradScale(1.0f);
    c.setMembers(3);
    auto ranks = c.initMemberRanks(3);
    for (unsigned i = 0; i < 3; ++i) ranks.set(i, i);
    add("clock-members", std::move(m));
  }
  {  // a chunk of a copy of a shard: one sparse table of one row, push ids, clocks, more to come
    Message m = Request(13);
    m.set_shard(0);
    auto copy = m.builder().getBody().initStateTransfer();
    copy.setRows(9);
    copy.setCopy((uint64_t{1} << 32) | 2);  // the holder's incarnation 1, its second copy
    auto next = copy.initNext();
    next.setTable(1);
    next.setRow(1);
    auto t = copy.initTables(1)[0];
    t.setId(1);
    t.setName("emb");
    t.setKind(wire::TableKind::SPARSE);
    t.setDim(2);
    auto clock = copy.initTrainerClocks(1)[0];
    clock.setNode(3);
    clock.setClock(4);
    m.AddPayload(DType::kI64, {1}, Values<int64_t>({5}));
    m.AddPayload(DType::kF32, {1, 3}, Values<float>({0.25f, -0.5f, 0}));
    m.AddPayload(DType::kI64, {1, 2}, Values<int64_t>({3, 7}));
    add("stateTransfer", std::move(m));
  }
  {  // elastic: a joining server asking for the chunk after row 64 of table 1
    Message m = Request(14);
    auto req = m.builder().getBody().initMigrate();
    req.setServers(3);
    req.initLeft(1).set(0, 2);
    auto cursor = req.initCursor();
    cursor.setTable(1);
    cursor.setRow(64);
    add("migrate-cursor", std::move(m));
  }
  {  // elastic: one chunk of rows, its push ids, clocks and the next chunk's cursor
    Message m = Request(15);
    auto rows = m.builder().getBody().initMigrateRows();
    auto t = rows.initTables(1)[0];
    t.setId(1);
    t.setName("emb");
    t.setKind(wire::TableKind::SPARSE);
    t.setDim(2);
    auto clock = rows.initTrainerClocks(1)[0];
    clock.setNode(3);
    clock.setClock(4);
    rows.setServers(3);
    rows.setRows(9);
    auto next = rows.initNext();
    next.setRow(2);
    next.setPushIds(true);
    m.AddPayload(DType::kI64, {1}, Values<int64_t>({5}));
    m.AddPayload(DType::kF32, {1, 3}, Values<float>({0.25f, -0.5f, 0}));
    m.AddPayload(DType::kI64, {1, 2}, Values<int64_t>({3, 7}));
    add("migrateRows-chunk", std::move(m));
  }
  {  // elastic BSP: a migration's last chunk: no rows left, the moving keys' accumulations (one
     // summed, one staged by node 4), the sender's clock record, a dead rank; a chunk ahead and
     // a clipping factor as a replica's copy carries them
    Message m = Request(16);
    auto rows = m.builder().getBody().initMigrateRows();
    rows.setServers(3);
    rows.setRows(0);
    auto state = rows.initBsp(1)[0];
    state.setTable(1);
    state.setAppliedClock(6);
    auto clocks = state.initClocks(2);
    clocks.set(0, 6);
    clocks.set(1, 6);
    auto keys = state.initKeys(2);
    keys.set(0, 5);
    keys.set(1, 8);
    auto pushes = state.initPushes(2);
    pushes.set(0, 2);
    pushes.set(1, 1);
    auto lrs = state.initLrs(2);
    lrs.set(0, -1.0f);
    lrs.set(1, -1.0f);
    auto by = state.initStagedBy(2);
    by.set(0, 0);
    by.set(1, 5);
    state.initChunkKeys(1).set(0, 3);
    state.initChunkNext(1).set(0, 7);
    auto record = rows.initClockMembers(1)[0];
    record.setClock(6);
    auto members = record.initMembers(2);
    members.set(0, 0);
    members.set(1, 1);
    record.initClocked(1).set(0, 1);
    rows.initDeadRanks(1).set(0, 2);
    auto scale = rows.initGradScales(1)[0];
    scale.setClock(6);
    scale.setScale(0.5f);
    m.AddPayload(DType::kI64, {0, 2}, Values<int64_t>({}));
    // Key 5's sum holds 0 floats and key 8's 3 (message_fuzzer sizes an entry key % 5).
    m.AddPayload(DType::kF32, {3}, Values<float>({0.25f, -0.5f, 1.0f}));
    add("migrateRows-bsp", std::move(m));
  }
  {  // elastic: a clock message from a trainer whose layout counts 3 servers
    Message m = Request(17);
    auto c = m.builder().getBody().initClock();
    c.setClock(7);
    c.setServers(3);
    c.setMembers(2);
    auto ranks = c.initMemberRanks(2);
    ranks.set(0, 0);
    ranks.set(1, 1);
    add("clock-servers", std::move(m));
  }
  return seeds;
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  int written = 0;
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream out(dir / name, std::ios::binary);
    out << bytes;
    STRATA_CHECK(out.good()) << "writing " << (dir / name).string();
    ++written;
  };
  for (Seed& seed : Seeds()) {
    const Frames frames = Encode(seed.message);
    STRATA_CHECK(Decode(frames).ok()) << seed.name << " does not decode";
    write(seed.name, Framed(frames, 0));
  }
  // The flag variants, on one message with payloads each.
  for (Seed& seed : Seeds()) {
    if (seed.name != "echo-payloads" && seed.name != "register") continue;
    const Frames frames = Encode(seed.message);
    write(seed.name + "-unaligned", Framed(frames, kUnalignedEnvelope));
    write(seed.name + "-tight", Framed(frames, kTightLimits));
  }
  // Batches, as the transport sends small messages: three seeds in one, and every seed in one
  // (the latter also at an odd address, UnpackBatch's copy path).
  BatchWriter few, all;
  for (Seed& seed : Seeds()) {
    const Frames frames = Encode(seed.message);
    if (seed.name == "echo-payloads" || seed.name == "register" || seed.name == "clock-members") {
      few.Append(frames);
    }
    all.Append(frames);
  }
  const Buffer all_batch = all.Finish();
  write("batch-three", Framed({few.Finish()}, kBatch));
  write("batch-every-seed", Framed({all_batch}, kBatch));
  write("batch-every-seed-unaligned", Framed({all_batch}, kBatch | kUnalignedEnvelope));
  std::printf("wrote %d seeds to %s\n", written, dir.c_str());
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) { return strata::Main(argc, argv); }
