// shm_p2p.cc: ShmP2P's segments, rings and progress engine.
#include "trainer/comm/shm_p2p.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <new>
#include <random>
#include <sstream>
#include <thread>

namespace strata {
namespace {

constexpr uint64_t kMagic = 0x3270326d68736174ULL;  // "tashm2p2"
constexpr uint64_t kHeaderBytes = 256;
constexpr uint64_t kRingHeaderBytes = 128;
constexpr uint64_t kMessageHeaderBytes = 16;

struct SegmentHeader {
  uint64_t magic;
  uint64_t nonce;
  uint64_t ring_bytes;
  int32_t size;
  int32_t pid;
  alignas(64) std::atomic<uint32_t> doorbell;  // rung by every peer that moved something for us
  std::atomic<uint32_t> sleeping;              // the owner waits on the doorbell
};
static_assert(sizeof(SegmentHeader) <= kHeaderBytes);

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // bytes ever written (the writer's)
  // Set by the writer when a send waits for space; the reader rings the writer's doorbell after
  // freeing some only then. (Ringing it after every read woke a writer asleep on something
  // else once a message: on cores the ranks share, each such wake-up can preempt a rank that
  // was computing.)
  std::atomic<uint32_t> writer_waiting;
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever read (the owner's)
};
static_assert(sizeof(RingHeader) <= kRingHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "rings in shared memory need lock-free atomics");

struct MessageHeader {
  uint32_t tag;
  uint32_t reserved;
  uint64_t bytes;
};
static_assert(sizeof(MessageHeader) == kMessageHeaderBytes);

uint64_t DataOffset(int size) { return (kHeaderBytes + size * kRingHeaderBytes + 4095) / 4096 * 4096; }
uint64_t SegmentBytes(int size, uint64_t ring_bytes) { return DataOffset(size) + (size - 1) * ring_bytes; }

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

// One rank's mapped segment.
struct ShmP2P::Segment {
  std::string name;
  int fd = -1;
  char* base = nullptr;
  uint64_t bytes = 0;
  bool owner = false, unlinked = false;
  int owner_rank = 0;

  ~Segment() {
    if (base) munmap(base, bytes);
    if (fd >= 0) close(fd);
    if (owner && !unlinked) shm_unlink(name.c_str());
  }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base); }
  // The ring `writer` writes into this segment (writer != owner_rank).
  RingHeader& ring(int writer) const {
    return *reinterpret_cast<RingHeader*>(base + kHeaderBytes + writer * kRingHeaderBytes);
  }
  char* data(int writer) const {
    const int index = writer < owner_rank ? writer : writer - 1;
    return base + DataOffset(header().size) + index * header().ring_bytes;
  }
  void Ring() const {
    SegmentHeader& h = header();
    h.doorbell.fetch_add(1, std::memory_order_seq_cst);
    if (h.sleeping.load(std::memory_order_seq_cst)) Futex(&h.doorbell, FUTEX_WAKE, INT_MAX, nullptr);
  }
};

namespace {

void CopyIn(char* ring, uint64_t cap, uint64_t pos, const char* src, uint64_t n) {
  if (n == 0) return;  // src may be null
  const uint64_t off = pos % cap, first = std::min(n, cap - off);
  std::memcpy(ring + off, src, first);
  if (n > first) std::memcpy(ring, src + first, n - first);
}

void CopyOut(char* dst, const char* ring, uint64_t cap, uint64_t pos, uint64_t n) {
  if (n == 0) return;  // dst may be null
  const uint64_t off = pos % cap, first = std::min(n, cap - off);
  std::memcpy(dst, ring + off, first);
  if (n > first) std::memcpy(dst + first, ring, n - first);
}

}  // namespace

ShmP2P::ShmP2P(int rank, int size, uint64_t ring_bytes, std::chrono::milliseconds timeout)
    : rank_(rank), size_(size), ring_bytes_(ring_bytes), timeout_(timeout), segments_(size), peers_(size) {}

ShmP2P::~ShmP2P() = default;

Result<std::unique_ptr<ShmP2P>> ShmP2P::Open(int rank, int size, uint64_t ring_bytes,
                                             std::chrono::milliseconds timeout, const Publish& publish,
                                             const Lookup& lookup) {
  if (size < 2 || rank < 0 || rank >= size) return Status::InvalidArgument("shared-memory transfers need 2 ranks or more");
  if (ring_bytes < 4096 || ring_bytes > (uint64_t{1} << 36)) {
    if (publish) (void)publish("shm/" + std::to_string(rank), "-");  // the others fail at once
    return Status::InvalidArgument("shared-memory ring of " + std::to_string(ring_bytes) + " bytes: 4 KiB to 64 GiB");
  }
  std::unique_ptr<ShmP2P> p(new ShmP2P(rank, size, ring_bytes, timeout));
  const std::string key = "shm/";
  std::random_device rd;
  const uint64_t nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  // This rank's segment; on any failure the others are told at once ("-"), not left to time out.
  Status made = [&]() -> Status {
    auto seg = std::make_unique<Segment>();
    std::ostringstream name;
    name << "/strata-" << getpid() << "-" << std::hex << nonce;
    seg->name = name.str();
    seg->owner = true;
    seg->owner_rank = rank;
    seg->bytes = SegmentBytes(size, ring_bytes);
    seg->fd = shm_open(seg->name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (seg->fd < 0) return Status::Unavailable(Errno("shm_open " + seg->name));
    // Reserved now: a /dev/shm too small for the rings is an error here, not a SIGBUS mid-step.
    if (int e = posix_fallocate(seg->fd, 0, static_cast<off_t>(seg->bytes)); e != 0) {
      return Status::ResourceExhausted("reserving " + std::to_string(seg->bytes) + " bytes of shared memory for " +
                                       seg->name + ": " + std::strerror(e));
    }
    // Held while this process lives: a peer that can take the lock exclusively knows it is gone
    // (whatever pid namespace either runs in; the kernel drops the lock with the process).
    if (flock(seg->fd, LOCK_SH) != 0) return Status::Unavailable(Errno("flock " + seg->name));
    // MAP_POPULATE: the page tables filled now, not by a fault at each first touch of a ring's
    // page (a pipeline's first pass over its rings, about 30 steps of a small model, ran 25%
    // slower on the 2-core host).
    void* base = mmap(nullptr, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, seg->fd, 0);
    if (base == MAP_FAILED) return Status::Unavailable(Errno("mmap " + seg->name));
    seg->base = static_cast<char*>(base);
    auto* h = new (seg->base) SegmentHeader{};
    h->nonce = nonce;
    h->ring_bytes = ring_bytes;
    h->size = size;
    h->pid = static_cast<int32_t>(getpid());
    for (int w = 0; w < size; ++w) new (seg->base + kHeaderBytes + w * kRingHeaderBytes) RingHeader{};
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = kMagic;
    p->segments_[rank] = std::move(seg);
    return Status::OK();
  }();
  if (!made.ok()) {
    (void)publish(key + std::to_string(rank), "-");
    return made;
  }
  std::ostringstream me;
  me << p->segments_[rank]->name << " " << nonce;
  STRATA_RETURN_IF_ERROR(publish(key + std::to_string(rank), me.str()));
  for (int q = 0; q < size; ++q) {
    if (q == rank) continue;
    STRATA_ASSIGN_OR_RETURN(const std::string text, lookup(key + std::to_string(q)));
    if (text == "-") return Status::Unavailable("rank " + std::to_string(q) + " could not make its shared memory");
    std::istringstream in(text);
    auto seg = std::make_unique<Segment>();
    uint64_t want = 0;
    if (!(in >> seg->name >> want)) return Status::Corruption("rank " + std::to_string(q) + "'s shared memory: \"" + text + "\"");
    seg->owner_rank = q;
    seg->bytes = SegmentBytes(size, ring_bytes);
    // Another host's name opens nothing here (or something else: the nonce tells).
    seg->fd = shm_open(seg->name.c_str(), O_RDWR, 0);
    if (seg->fd < 0) return Status::Unavailable(Errno("rank " + std::to_string(q) + "'s shm_open " + seg->name));
    struct stat st {};
    if (fstat(seg->fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != seg->bytes) {
      return Status::Unavailable("rank " + std::to_string(q) + "'s segment " + seg->name + " has another size");
    }
    void* base = mmap(nullptr, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, seg->fd, 0);
    if (base == MAP_FAILED) return Status::Unavailable(Errno("mmap " + seg->name));
    seg->base = static_cast<char*>(base);
    const SegmentHeader& h = seg->header();
    if (h.magic != kMagic || h.nonce != want || h.size != size || h.ring_bytes != ring_bytes) {
      return Status::Unavailable("rank " + std::to_string(q) + "'s segment " + seg->name + " is not the one it published");
    }
    p->segments_[q] = std::move(seg);
  }
  return p;
}

void ShmP2P::Unlink() {
  Segment& mine = *segments_[rank_];
  if (!mine.unlinked) shm_unlink(mine.name.c_str());
  mine.unlinked = true;
}

std::shared_ptr<ShmP2P::Op> ShmP2P::Post(bool send, void* data, uint64_t bytes, int peer, uint32_t tag) {
  auto op = std::make_shared<Op>();
  op->send = send;
  op->peer = peer;
  op->tag = tag;
  op->data = static_cast<char*>(data);
  op->bytes = bytes;
  if (!broken_.ok()) {
    (void)Failed(*op, Status::FailedPrecondition("shared-memory transfers broken by an earlier error (" +
                                                 broken_.ToString() + ")"));
    return op;
  }
  Peer& p = peers_[peer];
  if (send) {
    p.sends.push_back(op);
    Progress();  // this send, and whatever else can move
    return op;
  }
  Progress();  // a message of this tag may be waiting in the ring
  if (!broken_.ok()) {  // that progress found the transfers broken
    (void)Failed(*op, Status::FailedPrecondition("shared-memory transfers broken by an earlier error (" +
                                                 broken_.ToString() + ")"));
    return op;
  }
  auto early = p.unexpected.find(tag);
  if (early != p.unexpected.end()) {
    std::vector<char> m = std::move(early->second.front());
    early->second.pop_front();
    if (early->second.empty()) p.unexpected.erase(early);
    if (m.size() != bytes) {
      (void)Failed(*op, Status::InvalidArgument("message of tag " + std::to_string(tag) + " from rank " + std::to_string(peer) +
                                                " has " + std::to_string(m.size()) + " bytes, the receive " + std::to_string(bytes)));
    } else {
      if (bytes) std::memcpy(op->data, m.data(), bytes);
      op->moved = bytes;
      op->done = true;
    }
    return op;
  }
  p.posted.emplace(tag, op);
  return op;
}

bool ShmP2P::PumpSends(int peer) {
  Peer& p = peers_[peer];
  Segment& seg = *segments_[peer];
  RingHeader& ring = seg.ring(rank_);
  char* data = seg.data(rank_);
  uint64_t head = ring.head.load(std::memory_order_relaxed);
  const uint64_t start = head;
  for (uint64_t seen_tail = ring.tail.load(std::memory_order_acquire);;) {
    PumpInto(p, data, head, seen_tail);
    if (p.sends.empty()) break;
    // Out of space: ask the reader for a ring when it frees some, then look once more (a read
    // that finished before the flag was up rings nobody).
    ring.writer_waiting.store(1, std::memory_order_seq_cst);
    const uint64_t tail = ring.tail.load(std::memory_order_seq_cst);
    if (tail == seen_tail) break;
    seen_tail = tail;
  }
  if (head == start) return false;
  ring.head.store(head, std::memory_order_release);
  seg.Ring();
  return true;
}

void ShmP2P::PumpInto(Peer& p, char* data, uint64_t& head, uint64_t tail) {
  while (!p.sends.empty()) {
    Op& op = *p.sends.front();
    uint64_t space = ring_bytes_ - (head - tail);
    if (op.moved == 0) {
      if (space < kMessageHeaderBytes) break;  // a header goes in whole
      const MessageHeader mh{op.tag, 0, op.bytes};
      CopyIn(data, ring_bytes_, head, reinterpret_cast<const char*>(&mh), kMessageHeaderBytes);
      head += kMessageHeaderBytes;
      space -= kMessageHeaderBytes;
      op.moved = kMessageHeaderBytes;
    }
    const uint64_t n = std::min(space, kMessageHeaderBytes + op.bytes - op.moved);
    CopyIn(data, ring_bytes_, head, op.data + (op.moved - kMessageHeaderBytes), n);
    head += n;
    op.moved += n;
    if (op.moved < kMessageHeaderBytes + op.bytes) break;  // the ring is full
    op.done = true;
    p.sends.pop_front();
  }
}

bool ShmP2P::PumpRecvs(int peer) {
  Peer& p = peers_[peer];
  Segment& mine = *segments_[rank_];
  RingHeader& ring = mine.ring(peer);
  const char* data = mine.data(peer);
  uint64_t tail = ring.tail.load(std::memory_order_relaxed);
  const uint64_t start = tail, head = ring.head.load(std::memory_order_acquire);
  for (;;) {
    Incoming& in = p.in;
    if (!in.have_header) {
      if (head - tail < kMessageHeaderBytes) break;
      MessageHeader mh;
      CopyOut(reinterpret_cast<char*>(&mh), data, ring_bytes_, tail, kMessageHeaderBytes);
      tail += kMessageHeaderBytes;
      if (mh.bytes > (uint64_t{1} << 40)) {
        // Not a message any rank of this group sends: the ring is not ours to read any more.
        Status bad = Status::Corruption("message header from rank " + std::to_string(peer) + " says " +
                                        std::to_string(mh.bytes) + " bytes");
        Op none;
        (void)Failed(none, bad);  // breaks the transfers: every queued op fails, naming this
        return false;
      }
      in = Incoming{};
      in.have_header = true;
      in.tag = mh.tag;
      in.bytes = mh.bytes;
      auto it = p.posted.lower_bound(mh.tag);  // the first posted of this tag
      if (it != p.posted.end() && it->first == mh.tag) {
        in.op = it->second;
        p.posted.erase(it);
        if (in.op->bytes != mh.bytes) {
          (void)Failed(*in.op, Status::InvalidArgument(
                                   "message of tag " + std::to_string(mh.tag) + " from rank " + std::to_string(peer) +
                                   " has " + std::to_string(mh.bytes) + " bytes, the receive " + std::to_string(in.op->bytes)));
          in.op = nullptr;  // drained into the stash and dropped
        }
      }
      if (!in.op) in.stash.resize(mh.bytes);
    }
    const uint64_t n = std::min(head - tail, in.bytes - in.got);
    CopyOut((in.op ? in.op->data : in.stash.data()) + in.got, data, ring_bytes_, tail, n);
    tail += n;
    in.got += n;
    if (in.got < in.bytes) break;  // the rest is not written yet
    if (in.op) {
      in.op->moved = in.bytes;
      in.op->done = true;
    } else if (broken_.ok()) {
      // Unexpected: kept for the receive of its tag (one posted meanwhile takes it now).
      auto it = p.posted.lower_bound(in.tag);
      if (it != p.posted.end() && it->first == in.tag) {
        std::shared_ptr<Op> op = it->second;
        p.posted.erase(it);
        if (op->bytes != in.bytes) {
          (void)Failed(*op, Status::InvalidArgument("message of tag " + std::to_string(in.tag) + " from rank " +
                                                    std::to_string(peer) + " has " + std::to_string(in.bytes) +
                                                    " bytes, the receive " + std::to_string(op->bytes)));
        } else {
          if (in.bytes) std::memcpy(op->data, in.stash.data(), in.bytes);
          op->moved = in.bytes;
          op->done = true;
        }
      } else {
        p.unexpected[in.tag].push_back(std::move(in.stash));
      }
    }
    in = Incoming{};
  }
  if (tail == start) return false;
  ring.tail.store(tail, std::memory_order_seq_cst);
  if (ring.writer_waiting.exchange(0, std::memory_order_seq_cst) != 0) segments_[peer]->Ring();
  return true;
}

bool ShmP2P::Progress() {
  bool moved = false;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    moved |= PumpSends(q);
    moved |= PumpRecvs(q);
  }
  return moved;
}

Status ShmP2P::Failed(Op& op, Status s) {
  op.status = s;
  op.done = true;
  if (broken_.ok()) {
    broken_ = s;
    // Nothing queued moves any more, and no buffer of a failed op is touched again.
    const Status after = Status::FailedPrecondition("shared-memory transfers broken by an earlier error (" +
                                                    s.ToString() + ")");
    for (Peer& p : peers_) {
      for (auto& q : p.sends) {
        if (!q->done) q->status = after, q->done = true;
      }
      for (auto& [t, q] : p.posted) {
        if (!q->done) q->status = after, q->done = true;
      }
      if (p.in.op && !p.in.op->done) p.in.op->status = after, p.in.op->done = true;
      p.sends.clear();
      p.posted.clear();
      p.in.op = nullptr;
    }
  }
  return s;
}

Status ShmP2P::PeerGone(int peer) const {
  const Segment& seg = *segments_[peer];
  if (flock(seg.fd, LOCK_EX | LOCK_NB) == 0) {  // nobody holds the owner's shared lock
    flock(seg.fd, LOCK_UN);
    return Status::Unavailable("rank " + std::to_string(peer) + "'s process (pid " +
                               std::to_string(seg.header().pid) + ") is gone");
  }
  return Status::OK();
}

Status ShmP2P::Wait(Op& op) {
  if (broken_.ok()) Progress();  // moves the other queued transfers on too
  if (op.done) return op.status;
  if (!broken_.ok()) {
    return Failed(op, Status::FailedPrecondition("shared-memory transfers broken by an earlier error (" +
                                                 broken_.ToString() + ")"));
  }
  SegmentHeader& mine = segments_[rank_]->header();
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout_;
  auto next_check = Clock::now() + std::chrono::milliseconds(50);
  for (int idle = 0;;) {
    const uint32_t bell = mine.doorbell.load(std::memory_order_seq_cst);
    if (Progress()) idle = 0;
    if (op.done) return op.status;
    // The deadline and the peer's life, every 50 ms, busy or not.
    if (const auto now = Clock::now(); now >= next_check) {
      if (now >= deadline) {
        return Failed(op, Status::DeadlineExceeded("timed out after " + std::to_string(timeout_.count()) + " ms"));
      }
      if (Status s = PeerGone(op.peer); !s.ok()) return Failed(op, s);
      next_check = now + std::chrono::milliseconds(50);
    }
    // A short spin first (about 20 us of pause instructions, which leave a hyperthread
    // sibling its core): a neighbour's hand-off often lands within microseconds of the wait,
    // and a sleep puts a wake-up on its path.
    if (++idle < 2) {
      for (int i = 0; i < 2000 && mine.doorbell.load(std::memory_order_relaxed) == bell; ++i) CpuRelax();
      continue;
    }
    mine.sleeping.store(1, std::memory_order_seq_cst);
    const timespec slice{0, 50'000'000};  // 50 ms at most: the checks above run
    Futex(&mine.doorbell, FUTEX_WAIT, bell, &slice);
    mine.sleeping.store(0, std::memory_order_seq_cst);
  }
}

}  // namespace strata
