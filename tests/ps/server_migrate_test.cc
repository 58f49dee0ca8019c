// server_migrate_test.cc: an elastic job's rows moving in chunks (ps/migration.h; PsServer's
// TakeOver, HandleMigrate and HandOver) with servers and a trainer as threads in one process and
// a chunk budget of 1 KiB (17 rows of the Adam table here), so a few hundred rows take dozens of
// chunks: a joining server and the server taking a leaver's rows hold every row once, with its
// optimizer state (an Adam table pushed once more after the move equals one that never moved) and
// the push ids; the old owner erases exactly what moved; a chunk asked for again comes back the
// same, and hostile asks are refused naming the field.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "tests/ps/elastic_fixture.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using testing::kTable;

constexpr uint32_t kAdam = 11, kReplay = 12, kAdamDim = 4;

class ServerMigrateTest : public testing::ElasticPsTest {
 protected:
  ServerMigrateTest() { options_.migrate_chunk_mb = 1.0 / 1024; }  // 1 KiB, the smallest allowed

  // An Adam table: its record holds the values, both moments and the step.
  Status CreateAdam(uint32_t id) {
    TableSpec t;
    t.id = id;
    t.name = "adam" + std::to_string(id);
    t.kind = TableKind::kSparse;
    t.dim = kAdamDim;
    t.optimizer.kind = OptimizerKind::kAdam;
    t.optimizer.lr = 0.1f;
    t.init.kind = InitKind::kUniform;
    t.init.a = -1.0f;
    t.init.b = 1.0f;
    t.consistency = Consistency::kAsp;
    return client_->CreateTable(t);
  }
  static std::vector<uint64_t> Keys(uint64_t n) {
    std::vector<uint64_t> keys(n);
    for (uint64_t k = 0; k < n; ++k) keys[k] = k * 7919;
    return keys;
  }
  uint64_t Stat(int server, const char* name) { return Stats(server)[name].get<uint64_t>(); }
  // After the move: one more push to `table` and to a fresh table that got the same pushes
  // without moving (`pushes` of them, then that one) leaves both equal, bit for bit.
  void ExpectStateMoved(const std::vector<uint64_t>& keys, int pushes) {
    ASSERT_TRUE(CreateAdam(kReplay).ok());
    for (int i = 0; i < pushes; ++i) ASSERT_TRUE(Push(keys, kReplay, kAdamDim).ok());
    ASSERT_TRUE(Push(keys, kAdam, kAdamDim).ok());
    ASSERT_TRUE(Push(keys, kReplay, kAdamDim).ok());
    const std::vector<float> moved = Values(keys, kAdam, kAdamDim), stayed = Values(keys, kReplay, kAdamDim);
    ASSERT_EQ(moved.size(), stayed.size());
    EXPECT_EQ(std::memcmp(moved.data(), stayed.data(), moved.size() * sizeof(float)), 0);
  }
};

TEST_F(ServerMigrateTest, AJoiningServerTakesEveryRowOnceWithItsStateAndPushIdsInManyChunks) {
  const std::vector<uint64_t> keys = Keys(1200);
  ASSERT_TRUE(CreateAdam(kAdam).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Push(keys, kAdam, kAdamDim).ok());
  // A push of a key the joining server will hold, applied on its old owner; its reply "lost".
  uint64_t moving = 1000;
  while (ElasticSparseServer(moving, 2, 3) != 2) ++moving;
  const uint64_t id = (uint64_t{nodes_[2]->id()} << 40) | 5;
  ASSERT_TRUE(PushWithId("mem://server" + std::to_string(SparseServer(moving, 2)), moving, id).ok());
  const std::vector<float> before = Values(keys, kAdam, kAdamDim);
  const uint64_t held = Records(0) + Records(1);

  ASSERT_TRUE(AddServer().ok());
  const uint64_t out = Stat(0, "rows_moved_out") + Stat(1, "rows_moved_out");
  EXPECT_GT(out, held / 5);
  EXPECT_LT(out, held / 2);
  // Every row that moved arrived once, and the old owners erased exactly those.
  EXPECT_EQ(Stat(2, "rows_moved_in"), out);
  EXPECT_EQ(Records(2), out);
  EXPECT_EQ(Stat(0, "rows_erased") + Stat(1, "rows_erased"), out);
  EXPECT_EQ(Records(0) + Records(1) + Records(2), held);
  const uint64_t chunks = Stat(2, "migrate_chunks_in");
  EXPECT_GT(chunks, 20u);
  EXPECT_EQ(Stat(0, "migrate_chunks_out") + Stat(1, "migrate_chunks_out"), chunks);
  EXPECT_EQ(Values(keys, kAdam, kAdamDim), before);
  ASSERT_NO_FATAL_FAILURE(ExpectStateMoved(keys, 3));
  // The push id moved with the row: its retry at the new owner is a duplicate, applied once.
  ASSERT_TRUE(PushWithId("mem://server2", moving, id).ok());
  EXPECT_EQ(Stat(2, "duplicate_pushes"), 1u);
  EXPECT_EQ(Applied({moving})[0], 1.0f);
  std::cout << out << " rows moved to the joining server in " << chunks << " chunks\n";
}

// Server 0 holds back half of what it sends (its migrate replies among them) for 600 ms, past the
// joining server's 300 ms timeout: the joiner asks again (the first ask, or the chunk at its
// cursor), the late replies are dropped as unknown, and every row still arrives exactly once.
class LateChunkRepliesTest : public ServerMigrateTest {
 protected:
  LateChunkRepliesTest() {
    server0_transport_.fault.delay_rate = 0.5;
    server0_transport_.fault.delay_ms = 600;
    server0_transport_.fault.seed = 7;
    joiner_transport_.request_timeout_ms = 300;
  }
};

TEST_F(LateChunkRepliesTest, LateChunkRepliesAreAskedForAgainAndEveryRowStillMovesOnce) {
  const std::vector<uint64_t> keys = Keys(1200);  // about 10 chunks from server 0
  ASSERT_TRUE(CreateAdam(kAdam).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Push(keys, kAdam, kAdamDim).ok());
  const std::vector<float> before = Values(keys, kAdam, kAdamDim);
  const uint64_t held = Records(0) + Records(1);

  ASSERT_TRUE(AddServer(Millis(120000)).ok());
  const uint64_t out = Stat(0, "rows_moved_out") + Stat(1, "rows_moved_out");
  EXPECT_GT(out, held / 5);
  EXPECT_EQ(Stat(2, "rows_moved_in"), out);
  EXPECT_EQ(Records(2), out);
  EXPECT_EQ(Records(0) + Records(1) + Records(2), held);
  const uint64_t chunks = Stat(2, "migrate_chunks_in"), again = Stat(2, "migrate_asks_again");
  EXPECT_GT(again, 0u) << "no reply was late: the test tested nothing";
  // A chunk whose reply came late was sent twice; the joiner took it once.
  EXPECT_GE(Stat(0, "migrate_chunks_out") + Stat(1, "migrate_chunks_out"), chunks);
  EXPECT_EQ(Values(keys, kAdam, kAdamDim), before);
  ASSERT_NO_FATAL_FAILURE(ExpectStateMoved(keys, 3));
  std::cout << out << " rows moved in " << chunks << " chunks, " << again << " asks repeated\n";
}

TEST_F(ServerMigrateTest, TheServerTakingALeaversRowsAsksForThemInManyChunks) {
  const std::vector<uint64_t> keys = Keys(1200);
  ASSERT_TRUE(CreateAdam(kAdam).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Push(keys, kAdam, kAdamDim).ok());
  const std::vector<float> before = Values(keys, kAdam, kAdamDim);
  const uint64_t held = Records(1), total = Records(0) + held;
  ASSERT_GT(held, 100u);
  ASSERT_TRUE(servers_[1]->HandOver(Millis(5000)).ok());
  EXPECT_EQ(Stat(0, "rows_moved_in"), held);
  EXPECT_EQ(Stat(1, "rows_moved_out"), held);
  EXPECT_EQ(Stat(1, "rows_erased"), held);
  EXPECT_EQ(Records(1), 0u);
  EXPECT_EQ(Records(0), total);
  EXPECT_GT(Stat(0, "migrate_chunks_in"), 20u);
  EXPECT_EQ(Stat(1, "migrate_chunks_out"), Stat(0, "migrate_chunks_in"));
  EXPECT_EQ(Values(keys, kAdam, kAdamDim), before);
  ASSERT_NO_FATAL_FAILURE(ExpectStateMoved(keys, 2));
}

// The keys of a chunk, table after table, and its payload bytes (keys, records, push ids).
struct Chunk {
  std::vector<uint64_t> keys;
  std::string bytes;
  std::optional<MigrationCursor> next;
  uint64_t rows = 0;
};
Chunk Read(const Message& m) {
  Chunk c;
  auto rows = m.reader().getBody().getMigrateRows();
  for (size_t i = 0; i < rows.getTables().size(); ++i) {
    const Buffer& k = m.payload(2 * i);
    for (size_t j = 0; j < k.size() / sizeof(uint64_t); ++j) {
      uint64_t key;
      std::memcpy(&key, k.data() + j * sizeof(key), sizeof(key));
      c.keys.push_back(key);
    }
  }
  for (size_t i = 0; i < m.num_payloads(); ++i) {
    c.bytes.append(reinterpret_cast<const char*>(m.payload(i).data()), m.payload(i).size());
  }
  c.next = ReadCursor(rows.getNext(), rows.hasNext());
  c.rows = rows.getRows();
  return c;
}

TEST_F(ServerMigrateTest, AChunkAskedAgainIsTheSameAndHostileAsksAreRefusedNamingTheField) {
  const std::vector<uint64_t> keys = Keys(2000);
  ASSERT_TRUE(Push(keys).ok());
  const uint64_t held = Records(0);
  // A joining server that asks by hand.
  nodes_.push_back(MakeNode(Role::kServer, "server2", -1, /*join=*/true));
  Node& joiner = *nodes_.back();
  ASSERT_TRUE(joiner.Join().ok());
  auto peer = joiner.rpc().Connect("mem://server0");
  ASSERT_TRUE(peer.ok());
  auto ask = [&](std::optional<MigrationCursor> cursor, uint32_t servers = 3, Node* from = nullptr) {
    Message m;
    auto req = m.builder().getBody().initMigrate();
    req.setServers(servers);
    req.initLeft(0);
    if (cursor) WriteCursor(*cursor, req.initCursor());
    Node& n = from ? *from : joiner;
    auto p = n.rpc().Connect("mem://server0");
    return p.ok() ? n.rpc().CallAndWait(*p, std::move(m), Millis(5000)) : Result<Message>(p.status());
  };

  auto first = ask(std::nullopt);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto again = ask(std::nullopt);  // its reply lost: the layout is switched already, the same rows
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  Chunk c = Read(*first);
  EXPECT_EQ(Read(*again).bytes, c.bytes);
  std::map<uint64_t, int> seen;
  int chunks = 1;
  for (uint64_t k : c.keys) ++seen[k];
  while (c.next) {
    auto r = ask(c.next), twice = ask(c.next);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(twice.ok()) << twice.status().ToString();
    Chunk next = Read(*r);
    EXPECT_EQ(Read(*twice).bytes, next.bytes) << "chunk " << chunks;
    for (uint64_t k : next.keys) ++seen[k];
    c = std::move(next);
    ++chunks;
  }
  EXPECT_GT(chunks, 4);
  std::set<uint64_t> expect;
  for (uint64_t k : keys) {
    if (SparseServer(k, 2) == 0 && ElasticSparseServer(k, 2, 3) == 2) expect.insert(k);
  }
  ASSERT_FALSE(expect.empty());
  EXPECT_EQ(seen.size(), expect.size());
  EXPECT_EQ(c.rows, expect.size());
  for (const auto& [k, n] : seen) {
    EXPECT_EQ(n, 1) << "key " << k;
    EXPECT_TRUE(expect.count(k)) << "key " << k << " does not move to server 2";
  }

  auto refused = [&](Result<Message> r, StatusCode code, const std::string& names) {
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(names), std::string::npos) << r.status().ToString();
  };
  refused(ask(MigrationCursor{999, 0, false}), StatusCode::kInvalidArgument, "migrate.cursor.table 999");
  refused(ask(MigrationCursor{kTable, 1u << 30, false}), StatusCode::kInvalidArgument,
          "migrate.cursor.row 1073741824 out of range: table \"rows\" moves " + std::to_string(expect.size()));
  refused(ask(MigrationCursor{0, 1u << 30, true}), StatusCode::kInvalidArgument, "migrate.cursor.row 1073741824");
  refused(ask(MigrationCursor{kTable, 0, false}, 4), StatusCode::kInvalidArgument, "migrate.servers");
  refused(ask(MigrationCursor{kTable, 0, false}, 3, nodes_[2].get()), StatusCode::kFailedPrecondition,
          "migrate.cursor from node " + std::to_string(nodes_[2]->id()) + ": no migration to it");

  // Done: server 0 erases exactly the rows that moved.
  Message done;
  auto req = done.builder().getBody().initMigrate();
  req.setServers(3);
  req.setDone(true);
  ASSERT_TRUE(joiner.rpc().CallAndWait(*peer, std::move(done), Millis(5000)).ok());
  EXPECT_EQ(Stat(0, "rows_erased"), expect.size());
  EXPECT_EQ(Stat(0, "rows_moved_out"), expect.size());
  EXPECT_EQ(Records(0), held - expect.size());
}

// A joining server that dies after an older server switched its layout for it, before it took
// every row: the scheduler marks it left instead of dead (its join is rolled back), the older
// servers take its rank out of their layouts and serve the rows they still hold, and pushes sent
// meanwhile are applied once each. The dead joiner cannot take rows any more; the next server
// to join takes its share under the layout with the dead one left, and nothing is lost.
TEST_F(ServerMigrateTest, AJoiningServerThatDiesHalfwayIsRolledBackAndNothingIsLost) {
  const std::vector<uint64_t> keys = Keys(1200);
  ASSERT_TRUE(CreateAdam(kAdam).ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(Push(keys, kAdam, kAdamDim).ok());
  const std::vector<uint64_t> ledger = Keys(300);
  ASSERT_TRUE(Push(ledger).ok());
  int rounds = 1;
  const std::vector<float> before = Values(keys, kAdam, kAdamDim);
  const uint64_t held = Records(0) + Records(1);

  // The joiner registers and asks server 0 for its plan (server 0 switches: it refuses the keys
  // of the plan as moved from now on), then dies: no heartbeat, no commit.
  nodes_.push_back(MakeNode(Role::kServer, "server2", -1, /*join=*/true));
  Node& joiner = *nodes_.back();
  servers_.push_back(std::make_unique<PsServer>(joiner, options_));
  servers_.back()->ExpectTakeOver();  // answers Unavailable: the clients retry
  ASSERT_TRUE(joiner.Join().ok());
  {
    const ClusterView v = joiner.view();
    EXPECT_TRUE(v.Find(joiner.id())->joining);
  }
  Message ask;
  auto req = ask.builder().getBody().initMigrate();
  req.setServers(3);
  req.initLeft(0);
  auto peer = joiner.rpc().Connect("mem://server0");
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE(joiner.rpc().CallAndWait(*peer, std::move(ask), Millis(5000)).ok());
  EXPECT_EQ(Stats(0)["layout_servers"].get<uint32_t>(), 3u);
  joiner.StopWithoutLeaving();

  // Pushes go on while the scheduler waits out the joiner's heartbeat timeout and after.
  bool rolled_back = false;
  for (int extra = 0; extra < 3; ++rounds) {
    ASSERT_TRUE(Push(ledger).ok());
    if (rolled_back) ++extra;
    rolled_back = rolled_back || (Stat(0, "joins_rolled_back") == 1 && Stat(1, "joins_rolled_back") == 1);
    std::this_thread::sleep_for(Millis(50));
  }
  const ClusterView view = *nodes_[2]->RefreshView();
  const NodeInfo* gone = view.Find(Role::kServer, 2);
  ASSERT_NE(gone, nullptr);
  EXPECT_TRUE(gone->left && gone->joining && !gone->alive);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(Stats(s)["layout_left"], nlohmann::json::array({2})) << "server " << s;
    EXPECT_EQ(Stat(s, "rows_erased"), 0u) << "server " << s;
  }
  EXPECT_EQ(Records(0) + Records(1), held);
  EXPECT_EQ(Values(keys, kAdam, kAdamDim), before);
  for (float applied : Applied(ledger)) ASSERT_EQ(applied, static_cast<float>(rounds));

  // The dead joiner's asks are refused: its rank left the job.
  Status late = servers_[2]->TakeOver(Millis(2000));
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition) << late.ToString();
  EXPECT_NE(late.message().find("its join was rolled back"), std::string::npos) << late.ToString();

  // The next server to join (rank 3, rank 2 left) takes its share, with its state.
  nodes_.push_back(MakeNode(Role::kServer, "server3", -1, /*join=*/true));
  servers_.push_back(std::make_unique<PsServer>(*nodes_.back(), options_));
  servers_.back()->ExpectTakeOver();
  ASSERT_TRUE(nodes_.back()->Join().ok());
  EXPECT_EQ(nodes_.back()->rank(), 3);
  ASSERT_TRUE(servers_.back()->TakeOver(Millis(20000)).ok());
  const uint64_t out = Stat(0, "rows_moved_out") + Stat(1, "rows_moved_out");
  EXPECT_GT(out, held / 5);
  EXPECT_EQ(Stat(3, "rows_moved_in"), out);
  EXPECT_EQ(Records(0) + Records(1) + Records(3), held);
  {
    const ClusterView v = *nodes_.back()->RefreshView();
    EXPECT_FALSE(v.Find(nodes_.back()->id())->joining) << "server 3 committed its join";
  }
  EXPECT_EQ(Values(keys, kAdam, kAdamDim), before);
  for (float applied : Applied(ledger)) ASSERT_EQ(applied, static_cast<float>(rounds));
  ASSERT_NO_FATAL_FAILURE(ExpectStateMoved(keys, 2));
  std::cout << rounds << " ledger rounds across the rollback; " << out << " rows then moved to server 3\n";
}

}  // namespace
}  // namespace strata
