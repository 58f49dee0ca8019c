// tiered_durability_test.cc: TieredRowStore's durability: kill -9 of a child writing in wal mode,
// a full file system (RLIMIT_FSIZE in a child), checkpoints and their restore, damaged or missing
// checkpoints, unwritable directories, export and import.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "offload/tiered_row_store.h"
#include "test_util.h"

extern char** environ;

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

constexpr int kWidth = 8;
constexpr uint64_t kKeys = 300;
constexpr int kBatch = 16;

void InitKey(uint64_t key, std::span<float> r) {
  for (size_t j = 0; j < r.size(); ++j) r[j] = static_cast<float>(key) * 0.5f + j;
}

TieredStoreOptions WalOptions(const std::string& path) {
  TieredStoreOptions o;
  o.path = path;
  o.durability = Durability::kWal;
  o.shards = 2;
  o.dram_budget_bytes = 32 * (4 * kWidth + TieredRowStore::kRecordOverheadBytes);
  o.rocksdb_write_buffer_bytes = 1 << 20;
  return o;
}

// ---------------------------------------------------------------------------------------------
// The writer child: this binary again, running only WalChild.DISABLED_Writer.

// Applies batches of r[0] += 1 (r[1] = 2 r[0]) in wal mode and writes (key, version) of every
// acknowledged update to the ack pipe. With STRATA_TEST_FSIZE, files are limited to that size
// and the child exits 0 once an Update fails with IOError (3 if none failed, 4 if another code).
TEST(WalChild, DISABLED_Writer) {
  const char* path = std::getenv("STRATA_TEST_STORE");
  const char* fd_text = std::getenv("STRATA_TEST_ACK_FD");
  const char* fsize = std::getenv("STRATA_TEST_FSIZE");
  if (!path || !fd_text) GTEST_SKIP() << "only run as a child of the Wal tests";
  const int ack_fd = std::atoi(fd_text);
  auto store = TieredRowStore::Open(WalOptions(path), kWidth);
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
    std::_Exit(2);
  }
  if (fsize) {
    signal(SIGXFSZ, SIG_IGN);
    rlimit lim{static_cast<rlim_t>(std::atoll(fsize)), static_cast<rlim_t>(std::atoll(fsize))};
    setrlimit(RLIMIT_FSIZE, &lim);
  }
  for (uint64_t i = 0; i < 200000; ++i) {
    std::vector<uint64_t> keys(kBatch), acks(2 * kBatch);
    for (int j = 0; j < kBatch; ++j) keys[j] = (i * kBatch + j) % kKeys;
    auto init = [](uint64_t key, std::span<float> r) {  // version 0
      InitKey(key, r);
      r[0] = r[1] = 0;
    };
    Status s = (*store)->Update(keys, init, [&](size_t j, std::span<float> r) {
      r[0] += 1;
      r[1] = 2 * r[0];
      acks[2 * j] = keys[j];
      acks[2 * j + 1] = static_cast<uint64_t>(r[0]);
    });
    if (!s.ok()) {
      std::fprintf(stderr, "update %llu failed: %s\n", static_cast<unsigned long long>(i),
                   s.ToString().c_str());
      std::fflush(stderr);
      std::_Exit(fsize && s.code() == StatusCode::kIOError ? 0 : 4);
    }
    if (write(ack_fd, acks.data(), acks.size() * 8) != static_cast<ssize_t>(acks.size() * 8)) std::_Exit(6);
  }
  std::_Exit(3);
}

// Starts the writer child on `store`, acks to the returned fd.
pid_t SpawnWriter(const std::string& store, const char* fsize, int* ack_read_fd) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  std::vector<std::string> env_strings = {"STRATA_TEST_STORE=" + store,
                                          "STRATA_TEST_ACK_FD=" + std::to_string(fds[1])};
  if (fsize) env_strings.push_back(std::string("STRATA_TEST_FSIZE=") + fsize);
  std::vector<char*> envp;
  for (char** e = environ; *e; ++e) envp.push_back(*e);
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=WalChild.DISABLED_Writer";
  std::string disabled = "--gtest_also_run_disabled_tests";
  char* argv[] = {exe.data(), filter.data(), disabled.data(), nullptr};
  const pid_t pid = fork();  // everything the child needs is prepared: it only execs
  if (pid == 0) {
    close(fds[0]);
    execve(exe.c_str(), argv, envp.data());
    _exit(127);
  }
  close(fds[1]);
  *ack_read_fd = fds[0];
  return pid;
}

// Reads acks until `stop_after` (then SIGKILLs the child) or EOF; returns key -> last version.
std::map<uint64_t, uint64_t> ReadAcks(int fd, pid_t child, uint64_t stop_after, uint64_t* count) {
  std::map<uint64_t, uint64_t> last;
  std::vector<char> buf;
  char chunk[4096];
  bool killed = false;
  ssize_t n;
  while ((n = read(fd, chunk, sizeof(chunk))) > 0) {
    buf.insert(buf.end(), chunk, chunk + n);
    size_t whole = buf.size() / 16 * 16;
    for (size_t at = 0; at < whole; at += 16) {
      uint64_t kv[2];
      std::memcpy(kv, buf.data() + at, 16);
      last[kv[0]] = std::max(last[kv[0]], kv[1]);
      ++*count;
    }
    buf.erase(buf.begin(), buf.begin() + whole);
    if (!killed && *count >= stop_after) {
      kill(child, SIGKILL);
      killed = true;
    }
  }
  close(fd);
  return last;
}

int WaitChild(pid_t pid) {
  for (int i = 0; i < 6000; ++i) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// Every acknowledged version is in the reopened store (one more is allowed: the batch in flight
// may have reached the WAL before the kill).
void VerifyAcks(const std::string& store_path, const std::map<uint64_t, uint64_t>& acked) {
  auto store = TieredRowStore::Open(WalOptions(store_path), kWidth);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<uint64_t> keys;
  for (const auto& [k, v] : acked) keys.push_back(k);
  ASSERT_TRUE((*store)->Read(keys, nullptr, [&](size_t i, std::span<const float> r) {
    const uint64_t want = acked.at(keys[i]);
    EXPECT_GE(r[0], static_cast<float>(want)) << "key " << keys[i] << " lost an acknowledged update";
    EXPECT_LE(r[0], static_cast<float>(want + 1)) << "key " << keys[i];
    EXPECT_EQ(r[1], 2 * r[0]) << "key " << keys[i] << " is torn";
  }).ok());
}

TEST(WalCrash, EveryAcknowledgedUpdateSurvivesKill9) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  int fd = -1;
  const pid_t child = SpawnWriter(path, nullptr, &fd);
  uint64_t count = 0;
  auto acked = ReadAcks(fd, child, 3000, &count);
  const int code = WaitChild(child);
  EXPECT_EQ(code, 128 + SIGKILL) << "the child should have been killed mid-run";
  ASSERT_GE(count, 3000u);
  VerifyAcks(path, acked);
}

TEST(WalFullDisk, AWriteFailureIsAnIOErrorAndNothingAcknowledgedIsLost) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  int fd = -1;
  const pid_t child = SpawnWriter(path, "262144", &fd);  // files may not grow past 256 KiB
  uint64_t count = 0;
  auto acked = ReadAcks(fd, child, UINT64_MAX, &count);
  EXPECT_EQ(WaitChild(child), 0) << "expected the child to see an IOError from Update";
  ASSERT_GT(count, 0u);
  VerifyAcks(path, acked);
}

// ---------------------------------------------------------------------------------------------
// Checkpoints

TieredStoreOptions CheckpointOptions(const TempDir& dir) {
  TieredStoreOptions o;
  o.path = dir.path() + "/store";
  o.durability = Durability::kCheckpoint;
  o.shards = 2;
  o.dram_budget_bytes = 40 * (4 * 6 + TieredRowStore::kRecordOverheadBytes);
  o.rocksdb_write_buffer_bytes = 1 << 20;
  return o;
}

void Train(TieredRowStore& s, int step, uint64_t key_range = 400) {
  std::vector<uint64_t> keys(32);
  for (int j = 0; j < 32; ++j) keys[j] = (step * 37 + j * 11) % key_range;
  ASSERT_TRUE(s.Update(keys, InitKey, [&](size_t i, std::span<float> r) {
    r[0] += 0.5f * step;
    r[5] = r[5] * 0.9f + static_cast<float>(keys[i]);
  }).ok());
}

std::map<uint64_t, std::vector<float>> Snapshot(TieredRowStore& s, uint64_t key_range = 400) {
  std::map<uint64_t, std::vector<float>> out;
  for (uint64_t k = 0; k < key_range; ++k) {
    std::vector<uint64_t> one = {k};
    Status st = s.Read(one, nullptr, [&](size_t, std::span<const float> r) {
      out[k] = std::vector<float>(r.begin(), r.end());
    });
    EXPECT_TRUE(st.ok() || st.IsNotFound()) << st.ToString();
  }
  return out;
}

TEST(Checkpoint, RestoredStateEqualsTheLastCheckpointExactly) {
  TempDir dir;
  const TieredStoreOptions o = CheckpointOptions(dir);
  const std::string ckpt = dir.path() + "/ckpt";
  std::map<uint64_t, std::vector<float>> at_checkpoint;
  {
    auto store = TieredRowStore::Open(o, 6);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (int step = 0; step < 30; ++step) Train(**store, step, 200);
    ASSERT_TRUE((*store)->AdvanceClock(30).ok());
    (*store)->SetCheckpointMetadata("tables: emb(6); adam steps: 30");
    ASSERT_TRUE((*store)->Checkpoint(ckpt).ok());
    at_checkpoint = Snapshot(**store);
    for (int step = 30; step < 60; ++step) Train(**store, step);  // and new keys 200..399
  }
  auto restored = TieredRowStore::OpenFromCheckpoint(ckpt, o, 6);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ((*restored)->detailed_stats().clock, 30u);
  EXPECT_EQ((*restored)->checkpoint_metadata(), "tables: emb(6); adam steps: 30");
  EXPECT_EQ(Snapshot(**restored), at_checkpoint);
}

TEST(Checkpoint, EveryKClocksKeepsTheNewestAndRestoresTheLatest) {
  TempDir dir;
  TieredStoreOptions o = CheckpointOptions(dir);
  o.checkpoint_every_clocks = 2;
  o.checkpoints_to_keep = 2;
  std::map<uint64_t, std::vector<float>> at_6;
  {
    auto store = TieredRowStore::Open(o, 6);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (uint64_t clock = 1; clock <= 7; ++clock) {
      Train(**store, static_cast<int>(clock));
      ASSERT_TRUE((*store)->AdvanceClock(clock).ok());
      if (clock == 6) at_6 = Snapshot(**store);
    }
    EXPECT_EQ((*store)->detailed_stats().checkpoints, 3u);
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(o.path + "/checkpoints")) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[1], "clock-00000000000000000006");
  auto latest = TieredRowStore::LatestCheckpoint(o.path + "/checkpoints");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  auto restored = TieredRowStore::OpenFromCheckpoint(*latest, o, 6);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(Snapshot(**restored), at_6);
}

TEST(Checkpoint, MissingOrDamagedCheckpointIsAClearError) {
  TempDir dir;
  const TieredStoreOptions o = CheckpointOptions(dir);
  const std::string ckpt = dir.path() + "/ckpt";
  std::map<uint64_t, std::vector<float>> current;
  {
    auto store = TieredRowStore::Open(o, 6);
    ASSERT_TRUE(store.ok());
    for (int step = 0; step < 20; ++step) Train(**store, step);
    ASSERT_TRUE((*store)->Checkpoint(ckpt).ok());
    Train(**store, 99);
    current = Snapshot(**store);
  }
  auto expect = [&](const std::string& dir_to_restore, StatusCode code, const std::string& words) {
    auto r = TieredRowStore::OpenFromCheckpoint(dir_to_restore, o, 6);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
  };
  expect(dir.path() + "/nope", StatusCode::kNotFound, "nope");
  EXPECT_EQ(TieredRowStore::OpenFromCheckpoint(ckpt, o, 7).status().code(), StatusCode::kInvalidArgument);

  // A flipped byte in the manifest.
  const std::string manifest = ckpt + "/STRATA_MANIFEST";
  std::string text = testing::ReadFile(manifest);
  std::string damaged = text;
  damaged[damaged.find("clock ") + 6] ^= 1;
  testing::WriteFile(manifest, damaged);
  expect(ckpt, StatusCode::kCorruption, "checksum");
  // A truncated RocksDB file, then a missing one.
  testing::WriteFile(manifest, text);
  std::string sst;
  for (const auto& e : fs::directory_iterator(ckpt + "/db")) {
    if (e.path().extension() == ".sst") sst = e.path();
  }
  ASSERT_FALSE(sst.empty());
  // SSTs of a checkpoint are hard links to the live store's: write a new, shorter file instead
  // of truncating the shared one.
  const std::string sst_bytes = testing::ReadFile(sst);
  fs::remove(sst);
  testing::WriteFile(sst, sst_bytes.substr(0, sst_bytes.size() / 2));
  expect(ckpt, StatusCode::kCorruption, "bytes");
  fs::remove(sst);
  expect(ckpt, StatusCode::kCorruption, "missing file");
  // No manifest at all: an incomplete checkpoint.
  fs::remove(manifest);
  expect(ckpt, StatusCode::kCorruption, "incomplete");

  // The store itself was left alone by the failed restores.
  auto store = TieredRowStore::Open(o, 6);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ(Snapshot(**store), current);
}

TEST(Checkpoint, NonEmptyOrUnwritableTargetIsAnErrorAndTheStoreGoesOn) {
  TempDir dir;
  auto store = TieredRowStore::Open(CheckpointOptions(dir), 6);
  ASSERT_TRUE(store.ok());
  Train(**store, 1);
  fs::create_directories(dir.path() + "/full");
  testing::WriteFile(dir.path() + "/full/x", "x");
  EXPECT_EQ((*store)->Checkpoint(dir.path() + "/full").code(), StatusCode::kAlreadyExists);
  testing::WriteFile(dir.path() + "/file", "x");  // a path under a regular file: ENOTDIR
  Status s = (*store)->Checkpoint(dir.path() + "/file/ckpt");
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_NE(s.message().find(dir.path() + "/file"), std::string::npos) << s.ToString();
  Train(**store, 2);
  EXPECT_TRUE((*store)->Checkpoint(dir.path() + "/ok").ok());
}

// stats() carries a histogram of the seconds of each synced WAL write and of each checkpoint
// (the server's /metrics): one synced write per update in wal mode, none without the WAL, and
// one per successful checkpoint.
TEST(Timings, EachSyncedWalWriteAndEachCheckpointIsCounted) {
  TempDir dir;
  auto wal = TieredRowStore::Open(WalOptions(dir.path() + "/wal"), kWidth);
  ASSERT_TRUE(wal.ok()) << wal.status().ToString();
  auto store = TieredRowStore::Open(CheckpointOptions(dir), 6);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const uint64_t before = (*wal)->stats().wal_sync_seconds.count;
  for (uint64_t i = 0; i < 5; ++i) {
    std::vector<uint64_t> keys = {i, i + 100};
    ASSERT_TRUE((*wal)->Update(keys, InitKey, [](size_t, std::span<float> r) { r[0] += 1; }).ok());
    Train(**store, static_cast<int>(i));
  }
  const Histogram::Snapshot synced = (*wal)->stats().wal_sync_seconds;
  EXPECT_EQ(synced.count, before + 5);
  EXPECT_EQ(synced.counts.size(), Histogram::SecondsBounds().size() + 1);
  EXPECT_EQ((*wal)->stats().checkpoint_seconds.count, 0u);
  fs::create_directories(dir.path() + "/full");
  testing::WriteFile(dir.path() + "/full/x", "x");
  ASSERT_TRUE((*store)->Checkpoint(dir.path() + "/c1").ok());
  EXPECT_FALSE((*store)->Checkpoint(dir.path() + "/full").ok());  // not counted
  Train(**store, 6);
  ASSERT_TRUE((*store)->Checkpoint(dir.path() + "/c2").ok());
  const RowStoreStats st = (*store)->stats();
  EXPECT_EQ(st.checkpoint_seconds.count, 2u);
  EXPECT_EQ(st.wal_sync_seconds.count, 0u);  // the checkpoint's flush of dirty rows is not a WAL sync
}

TEST(TieredStore, UnwritableDirectoryIsAClearError) {
  TempDir dir;
  testing::WriteFile(dir.path() + "/file", "x");
  TieredStoreOptions o = CheckpointOptions(dir);
  o.path = dir.path() + "/file/store";
  auto r = TieredRowStore::Open(o, 6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError) << r.status().ToString();
  EXPECT_NE(r.status().message().find(o.path), std::string::npos) << r.status().ToString();
}

TEST(TieredStore, ReadOnlyDirectoryIsAClearError) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions (see UnwritableDirectory)";
  TempDir dir;
  const std::string ro = dir.path() + "/ro";
  fs::create_directories(ro);
  chmod(ro.c_str(), 0555);
  TieredStoreOptions o = CheckpointOptions(dir);
  o.path = ro + "/store";
  auto r = TieredRowStore::Open(o, 6);
  chmod(ro.c_str(), 0755);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError) << r.status().ToString();
}

// ---------------------------------------------------------------------------------------------
// Export and import

TEST(Export, RoundTripsEveryRecordAndRejectsDamagedFiles) {
  TempDir dir;
  TieredStoreOptions a = CheckpointOptions(dir);
  a.durability = Durability::kNone;
  TieredStoreOptions b = a;
  b.path = dir.path() + "/other";
  auto src = TieredRowStore::Open(a, 6);
  auto dst = TieredRowStore::Open(b, 6);
  ASSERT_TRUE(src.ok() && dst.ok());
  for (int step = 0; step < 25; ++step) Train(**src, step);
  const std::string file = dir.path() + "/table.bin";
  ASSERT_TRUE((*src)->Export(file).ok());

  std::string bytes = testing::ReadFile(file);
  std::string damaged = bytes;
  damaged[damaged.size() / 2] ^= 0x10;
  testing::WriteFile(dir.path() + "/damaged.bin", damaged);
  testing::WriteFile(dir.path() + "/short.bin", bytes.substr(0, bytes.size() - 5));
  EXPECT_EQ((*dst)->Import(dir.path() + "/damaged.bin").code(), StatusCode::kCorruption);
  EXPECT_EQ((*dst)->Import(dir.path() + "/short.bin").code(), StatusCode::kCorruption);
  EXPECT_EQ((*dst)->Import(dir.path() + "/missing.bin").code(), StatusCode::kNotFound);
  EXPECT_TRUE(Snapshot(**dst).empty());  // nothing applied by the failed imports

  ASSERT_TRUE((*dst)->Import(file).ok());
  const auto want = Snapshot(**src);
  EXPECT_GT(want.size(), 300u);
  EXPECT_EQ(Snapshot(**dst), want);

  b.path = dir.path() + "/wide";
  auto wide = TieredRowStore::Open(b, 7);
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ((*wide)->Import(file).code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Format versions: files of the FNV-1a era (version 1) are refused as such

TEST(FormatVersion, OlderCheckpointIsRefusedNotPassedOver) {
  TempDir dir;
  const TieredStoreOptions o = CheckpointOptions(dir);
  const std::string root = dir.path() + "/auto";
  const std::string older = root + "/clock-00000000000000000001";
  const std::string newer = root + "/clock-00000000000000000002";
  {
    auto store = TieredRowStore::Open(o, 6);
    ASSERT_TRUE(store.ok());
    Train(**store, 1);
    ASSERT_TRUE((*store)->Checkpoint(older).ok());
    Train(**store, 2);
    ASSERT_TRUE((*store)->Checkpoint(newer).ok());
  }
  auto latest = TieredRowStore::LatestCheckpoint(root);
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(*latest, newer);

  const std::string manifest = newer + "/STRATA_MANIFEST";
  std::string text = testing::ReadFile(manifest);
  ASSERT_EQ(text.rfind("strata-checkpoint 2\n", 0), 0u) << text;
  text[text.find('2')] = '1';
  testing::WriteFile(manifest, text);
  for (const Status& s : {TieredRowStore::LatestCheckpoint(root).status(),
                          TieredRowStore::OpenFromCheckpoint(newer, o, 6).status()}) {
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_NE(s.message().find("format version 1"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(manifest), std::string::npos) << s.ToString();
  }
}

TEST(FormatVersion, OlderExportFileIsRefused) {
  TempDir dir;
  TieredStoreOptions o = CheckpointOptions(dir);
  o.durability = Durability::kNone;
  auto store = TieredRowStore::Open(o, 6);
  ASSERT_TRUE(store.ok());
  Train(**store, 1);
  const std::string file = dir.path() + "/table.bin";
  ASSERT_TRUE((*store)->Export(file).ok());
  std::string bytes = testing::ReadFile(file);
  ASSERT_EQ(bytes.substr(0, 8), "STRATAX2");
  bytes[7] = '1';
  testing::WriteFile(file, bytes);
  const Status s = (*store)->Import(file);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("format version 1"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace strata
