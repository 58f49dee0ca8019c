// client.cc: PsClient.
#include "ps/client.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "common/dtype.h"
#include "ps/key_index.h"

namespace strata {
namespace {

// Checks a values reply: one payload per expected block (f32, or bf16 when asked), of the
// expected sizes.
Status CheckValues(const Message& reply, const std::vector<size_t>& floats, DType dtype = DType::kF32) {
  if (reply.op() != Op::VALUES || reply.num_payloads() != floats.size()) {
    return Status::Internal("expected values with " + std::to_string(floats.size()) +
                            " payloads, got " + std::string(OpName(reply.op())) + " with " +
                            std::to_string(reply.num_payloads()));
  }
  for (size_t i = 0; i < floats.size(); ++i) {
    const PayloadInfo p = reply.payload_info(i);
    if (p.dtype != dtype || p.buffer->size() != floats[i] * DTypeSize(dtype)) {
      return Status::Internal("values payload " + std::to_string(i) + " has the wrong size");
    }
  }
  return Status::OK();
}

// The requests of a whole-tensor push or pull: one per chunk, so a server applies (or reads)
// one chunk while the next is still on the wire, and several calls' chunks interleave
// (BytePS-style partitioning). Tensors of one chunk take one request.
std::vector<std::pair<uint32_t, std::vector<uint64_t>>> DenseRequests(const TableSpec& spec,
                                                                       const PsLayout& layout) {
  std::vector<std::pair<uint32_t, std::vector<uint64_t>>> requests;
  for (uint64_t c = 0; c < spec.NumChunks(); ++c) {
    requests.push_back({layout.DenseOwner(spec, c), {c}});
  }
  return requests;
}

// A frame viewing a vector shared by every (re)send of one request.
template <typename T>
Buffer View(const std::shared_ptr<std::vector<T>>& v) {
  return Buffer(v->data(), v->size() * sizeof(T), v);
}

}  // namespace

namespace {
// Push ids must not repeat the ids a durable server recorded in an earlier run of the job (a new
// scheduler hands out node ids from the start again): each client's counter starts at a random
// point of [0, 2^39), which leaves 2^39 pushes before it reaches the node id's bits.
uint64_t FirstPushCounter() {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) | rd();
  return r & ((uint64_t{1} << 39) - 1);
}
}  // namespace

// Failures a server outage produces; anything else (a bad request, our own shutdown, which
// reports Cancelled) is final.
bool PsClient::Retryable(const Status& s) {
  return s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable;
}

PsClient::PsClient(Node& node, Millis timeout, Replication replication)
    : node_(node), timeout_(timeout), replication_(replication), pushes_sent_(FirstPushCounter()) {}

Status PsClient::Connect() {
  if (!servers_.empty()) return Status::OK();
  const ClusterView view = node_.view();
  const int count = view.Count(Role::kServer);
  if (count == 0) return Status::FailedPrecondition("the cluster has no servers");
  for (int r = 0; r < count; ++r) {
    // Shard r starts at server r; Retry moves it when that one is down or does not serve it.
    const NodeInfo* n = view.Find(Role::kServer, r);
    if (!n) return Status::Internal("server rank " + std::to_string(r) + " is missing from the view");
    STRATA_ASSIGN_OR_RETURN(PeerId peer, node_.rpc().Connect(n->address));
    servers_.push_back(peer);
    addresses_.push_back(n->address);
    holders_.push_back(static_cast<uint32_t>(r));
  }
  // Dense chunks live on the job's first servers (cluster.servers); servers that joined an
  // elastic job later take sparse keys only (ps/layout.h).
  const int first = node_.options().cluster.servers;
  layout_.base = static_cast<uint32_t>(first > 0 && first <= count ? first : count);
  layout_.servers = static_cast<uint32_t>(count);
  return GrowLayout();  // and the servers that left
}

Status PsClient::Route(uint32_t shard, bool refused) {
  // The Node keeps its view current from the scheduler's dead/rejoined events; asking the
  // scheduler as well covers an event still on its way.
  auto fresh = node_.RefreshView();
  const ClusterView view = fresh.ok() ? *fresh : node_.view();
  if (const NodeInfo* own = view.Find(Role::kServer, static_cast<int>(shard));
      own && own->left && node_.options().cluster.elastic) {
    // The shard's server left (its keys were handed over): whichever holder served it, Finish
    // sends the keys where they live now.
    return Status::FailedPrecondition(own->Describe() + " left the job: " + std::string(kLayoutMoved));
  }
  const uint32_t rank = NextHolder(view, layout_, shard, holders_[shard], refused, replication_);
  const NodeInfo* n = view.Find(Role::kServer, static_cast<int>(rank));
  if (!n) return Status::Internal("server rank " + std::to_string(rank) + " is missing from the view");
  if (n->left && node_.options().cluster.elastic) {
    // It handed its keys over (elastic): Finish sends them where they live now.
    return Status::FailedPrecondition(n->Describe() + " left the job: " + std::string(kLayoutMoved));
  }
  if (!n->alive) return Status::Unavailable(n->Describe() + " is down");
  if (n->address != addresses_[shard]) {
    STRATA_ASSIGN_OR_RETURN(PeerId peer, node_.rpc().Connect(n->address));
    servers_[shard] = peer;
    addresses_[shard] = n->address;
  }
  holders_[shard] = rank;
  return Status::OK();
}

void PsClient::Send(PsTicket::Part& part, Millis timeout) {
  part.sent_to = addresses_[part.server];
  Message m = part.make();
  m.set_shard(static_cast<int32_t>(part.server));
  part.ticket = node_.rpc().Call(servers_[part.server], std::move(m), timeout);
}

Result<Message> PsClient::Await(PsTicket::Part& part, Millis timeout) {
  // In slices: a server that dies while we wait is noticed (the Node's view marks it dead or
  // gives its rank a new address once it rejoins) and the part fails over to a retry at once,
  // instead of waiting out the whole timeout for a reply that will never come.
  using SteadyClock = std::chrono::steady_clock;
  const auto deadline = SteadyClock::now() + timeout;
  // The address this part went to: another request's retry may have moved addresses_ on since.
  const std::string address = part.sent_to;
  for (;;) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - SteadyClock::now());
    Result<Message> r = part.ticket.Wait(std::clamp(left, Millis(0), Millis(200)));
    if (r.ok() || r.status().code() != StatusCode::kDeadlineExceeded || part.ticket.done() || left <= Millis(0)) {
      return r;
    }
    // A node that lost its scheduler ends (cluster.scheduler_timeout_ms): a BSP pull parked on
    // a peer that has already gone that way would otherwise wait out the whole timeout.
    if (Status lost = node_.SchedulerStatus(); !lost.ok()) return Status::Aborted(lost.message());
    const ClusterView view = node_.view();
    const NodeInfo* n = view.Find(Role::kServer, static_cast<int>(holders_[part.server]));
    if (n && (!n->alive || n->address != address)) {
      return Status::Unavailable("server " + std::to_string(part.server) + " at " + address +
                                 " went down while the request was in flight");
    }
  }
}

Result<Message> PsClient::Retry(PsTicket::Part& part, Result<Message> failed) {
  using SteadyClock = std::chrono::steady_clock;
  const auto give_up = SteadyClock::now() + timeout_;
  Result<Message> r = std::move(failed);
  for (int attempt = 0; !r.ok() && Retryable(r.status()) && part.make; ++attempt) {
    auto left = std::chrono::duration_cast<Millis>(give_up - SteadyClock::now());
    if (left <= Millis(0)) break;
    // A server that answered Unavailable at once (a backup that has not yet heard that the
    // server serving its shard died) is asked again after a pause, not in a tight loop.
    if (attempt > 0) {
      std::this_thread::sleep_for(std::min(left, Millis(20)));
      left = std::chrono::duration_cast<Millis>(give_up - SteadyClock::now());
    }
    const bool refused = !r.ok() && r.status().message().find(kNotServing) != std::string::npos;
    if (Status s = Route(part.server, refused); !s.ok()) {
      if (!Retryable(s)) return s;
      std::this_thread::sleep_for(std::min(left, Millis(50)));  // down: wait for it to rejoin
      continue;
    }
    ++retries_;
    Send(part, left);
    r = Await(part, left + Millis(1000));
  }
  return r;
}

Result<const TableSpec*> PsClient::Spec(uint32_t table, TableKind kind) const {
  auto it = tables_.find(table);
  if (it == tables_.end()) return Status::NotFound("table " + std::to_string(table) + " was not created by this client");
  if (it->second.kind != kind) {
    return Status::InvalidArgument("table \"" + it->second.name + "\" is " +
                                   (it->second.kind == TableKind::kDense ? "dense" : "sparse"));
  }
  return &it->second;
}

Result<uint32_t> PsClient::DenseServers() {
  STRATA_RETURN_IF_ERROR(Connect());
  return layout_.base;
}

Status PsClient::CreateTable(const TableSpec& spec) {
  STRATA_RETURN_IF_ERROR(spec.Validate());
  STRATA_RETURN_IF_ERROR(Connect());
  STRATA_RETURN_IF_ERROR(GrowLayout());
  for (uint32_t r : layout_.left) {
    if (spec.kind == TableKind::kDense && r < layout_.base) {
      return Status::FailedPrecondition("creating dense table \"" + spec.name + "\": server " + std::to_string(r) +
                                        " left the job, and dense chunks live on every one of the first " +
                                        std::to_string(layout_.base) + " servers (cluster.servers)");
    }
  }
  // Servers serving a checkpoint, or holding the table at another dense placement (restored from
  // a store written under the id layout), answer with their spec: its placement is where the
  // chunks are, and every server must say the same.
  auto held = std::make_shared<std::optional<uint32_t>>();
  auto adopt = [held](const Message& reply) -> Status {
    auto body = reply.reader().getBody();
    if (body.which() != wire::Envelope::Body::CREATE_TABLE) return Status::OK();
    const uint32_t placement = body.getCreateTable().getPlacement();
    if (held->has_value() && **held != placement) {
      return Status::Internal("the servers answered dense placements " + std::to_string(**held) + " and " +
                              std::to_string(placement) + " for one table");
    }
    *held = placement;
    return Status::OK();
  };
  PsTicket ticket;
  for (uint32_t s = 0; s < servers_.size(); ++s) {
    if (layout_.Left(s)) continue;  // an elastic server that left holds nothing
    PsTicket::Part part(s, adopt, [spec] {
                          Message m;
                          ToWire(spec, m.builder().getBody().initCreateTable());
                          return m;
                        });
    Send(part, timeout_);
    ticket.parts_.push_back(std::move(part));
  }
  STRATA_RETURN_IF_ERROR(Wait(ticket).WithContext("creating table \"" + spec.name + "\""));
  tables_[spec.id] = spec;
  if (held->has_value()) tables_[spec.id].placement = **held;
  return Status::OK();
}

Status PsClient::SaveTables(const std::string& checkpoint) {
  STRATA_RETURN_IF_ERROR(Connect());
  STRATA_RETURN_IF_ERROR(GrowLayout());
  PsTicket ticket;
  for (uint32_t s = 0; s < servers_.size(); ++s) {
    if (layout_.Left(s)) continue;
    PsTicket::Part part(s, nullptr, [checkpoint] {
                          Message m;
                          m.builder().getBody().setSaveTables(checkpoint);
                          return m;
                        });
    Send(part, timeout_);
    ticket.parts_.push_back(std::move(part));
  }
  return Wait(ticket).WithContext("saving the servers' tables into " + checkpoint);
}

PsTicket PsClient::Sparse(uint32_t table, std::span<const uint64_t> keys, const float* grads,
                          float* out, bool push, bool bf16) {
  PsTicket ticket;
  auto spec_or = Spec(table, TableKind::kSparse);
  if (!spec_or.ok()) {
    ticket.early_ = spec_or.status();
    return ticket;
  }
  if (Status s = GrowLayout(); !s.ok()) {
    ticket.early_ = s;
    return ticket;
  }
  const TableSpec& spec = **spec_or;
  const uint32_t servers = layout_.servers;
  const size_t dim = spec.dim;
  // Per server: distinct keys, their summed gradients, and which of them each of the call's
  // keys (input position, position among the distinct) reads back into `out`.
  struct Slice {
    std::vector<uint64_t> keys;
    std::vector<float> grads;
    std::vector<std::pair<uint32_t, uint32_t>> scatter;
  };
  std::vector<Slice> slices(servers);
  KeyIndex index(keys.size());  // a key lives on one server: one index for all of them
  for (Slice& s : slices) {
    s.keys.reserve(keys.size() / servers + 1);
    if (out) s.scatter.reserve(keys.size() / servers + 1);
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    Slice& s = slices[layout_.SparseOwner(keys[i])];
    bool fresh = false;
    const uint32_t at = index.FindOrInsert(keys[i], static_cast<uint32_t>(s.keys.size()), &fresh);
    if (fresh) {
      s.keys.push_back(keys[i]);
      if (grads) s.grads.insert(s.grads.end(), grads + i * dim, grads + (i + 1) * dim);
    } else if (grads) {
      float* sum = s.grads.data() + static_cast<size_t>(at) * dim;
      for (size_t j = 0; j < dim; ++j) sum[j] += grads[i * dim + j];
    }
    if (out) s.scatter.emplace_back(static_cast<uint32_t>(i), at);
  }
  for (uint32_t sv = 0; sv < servers; ++sv) {
    Slice& s = slices[sv];
    if (s.keys.empty()) continue;
    const int64_t n = static_cast<int64_t>(s.keys.size());
    auto q = std::make_shared<PsTicket::Sparse>();
    q->table = table;
    q->clock = clock_;
    q->push = push;
    q->return_values = out != nullptr;
    q->push_id = push ? NextPushId() : 0;
    q->lr = lr_;
    q->dim = dim;
    q->keys = std::make_shared<std::vector<uint64_t>>(std::move(s.keys));
    q->grads = std::make_shared<std::vector<float>>(std::move(s.grads));
    q->bf16 = bf16;
    const bool narrow = bf16 && !push;  // a push-pull's values come back in fp32
    PsTicket::Part part = SparsePart(sv, std::move(q));
    Send(part, timeout_);
    if (out) {
      part.on_reply = [scatter = std::move(s.scatter), dim, n, out, narrow](const Message& reply) {
        STRATA_RETURN_IF_ERROR(CheckValues(reply, {static_cast<size_t>(n) * dim}, narrow ? DType::kBF16 : DType::kF32));
        if (narrow) {
          const auto* v = reinterpret_cast<const unsigned char*>(reply.payload(0).data());
          for (const auto& [pos, at] : scatter) {
            for (size_t j = 0; j < dim; ++j) {
              uint16_t h;
              std::memcpy(&h, v + (at * dim + j) * sizeof(uint16_t), sizeof(h));
              out[pos * dim + j] = BF16ToFloat(h);
            }
          }
          return Status::OK();
        }
        const auto* v = reinterpret_cast<const float*>(reply.payload(0).data());
        for (const auto& [pos, at] : scatter) std::memcpy(out + pos * dim, v + at * dim, dim * sizeof(float));
        return Status::OK();
      };
    }
    ticket.parts_.push_back(std::move(part));
  }
  return ticket;
}

PsTicket PsClient::Pull(uint32_t table, std::span<const uint64_t> keys, float* out, bool bf16) {
  return Sparse(table, keys, nullptr, out, false, bf16);
}
PsTicket PsClient::Push(uint32_t table, std::span<const uint64_t> keys, const float* grads, bool bf16) {
  return Sparse(table, keys, grads, nullptr, true, bf16);
}
PsTicket PsClient::PushPull(uint32_t table, std::span<const uint64_t> keys, const float* grads, float* out) {
  return Sparse(table, keys, grads, out, true, false);
}

PsTicket PsClient::PullDense(uint32_t table, float* out, bool bf16, bool next_clock) {
  return PullDenseAs(table, out, bf16 ? DType::kBF16 : DType::kF32, DType::kF32, next_clock);
}

PsTicket PsClient::PullDenseBf16(uint32_t table, uint16_t* out, bool next_clock) {
  return PullDenseAs(table, out, DType::kBF16, DType::kBF16, next_clock);
}

PsTicket PsClient::PullDenseAs(uint32_t table, void* out, DType wire, DType into, bool next_clock) {
  const bool bf16 = wire == DType::kBF16;
  PsTicket ticket;
  auto spec_or = Spec(table, TableKind::kDense);
  if (!spec_or.ok()) {
    ticket.early_ = spec_or.status();
    return ticket;
  }
  const TableSpec spec = **spec_or;
  const int64_t clock = clock_ + (next_clock ? 1 : 0);
  for (auto& [sv, mine_chunks] : DenseRequests(spec, layout_)) {
    auto chunks = std::make_shared<std::vector<uint64_t>>(std::move(mine_chunks));
    std::vector<size_t> floats;
    for (uint64_t c : *chunks) floats.push_back(spec.ChunkLength(c));
    const int64_t n = static_cast<int64_t>(chunks->size());
    PsTicket::Part part(sv, nullptr, [table, clock, chunks, n, bf16] {
                          Message m;
                          auto p = m.builder().getBody().initPull();
                          p.setTable(table);
                          p.setClock(clock);
                          p.setBf16(bf16);
                          m.AddPayload(DType::kI64, {n}, View(chunks));
                          return m;
                        });
    part.on_reply = [spec, chunks, floats, out, bf16, into](const Message& reply) {
      STRATA_RETURN_IF_ERROR(CheckValues(reply, floats, bf16 ? DType::kBF16 : DType::kF32));
      for (size_t i = 0; i < chunks->size(); ++i) {
        const size_t at = (*chunks)[i] * spec.chunk_floats;
        if (into == DType::kBF16) {  // bf16 kept as it came
          std::memcpy(static_cast<uint16_t*>(out) + at, reply.payload(i).data(), floats[i] * sizeof(uint16_t));
          continue;
        }
        float* to = static_cast<float*>(out) + at;
        if (!bf16) {
          std::memcpy(to, reply.payload(i).data(), floats[i] * sizeof(float));
          continue;
        }
        const auto* h = reinterpret_cast<const unsigned char*>(reply.payload(i).data());
        for (size_t k = 0; k < floats[i]; ++k) {
          uint16_t v;
          std::memcpy(&v, h + 2 * k, sizeof(v));
          to[k] = BF16ToFloat(v);
        }
      }
      return Status::OK();
    };
    Send(part, timeout_);
    ticket.parts_.push_back(std::move(part));
  }
  return ticket;
}

PsTicket PsClient::PushDense(uint32_t table, const float* grads, std::shared_ptr<const void> owner) {
  return PushDenseAs(table, grads, DType::kF32, std::move(owner));
}

PsTicket PsClient::PushDenseBf16(uint32_t table, const uint16_t* grads, std::shared_ptr<const void> owner) {
  return PushDenseAs(table, grads, DType::kBF16, std::move(owner));
}

PsTicket PsClient::PushDenseAs(uint32_t table, const void* grads, DType dtype, std::shared_ptr<const void> owner) {
  PsTicket ticket;
  auto spec_or = Spec(table, TableKind::kDense);
  if (!spec_or.ok()) {
    ticket.early_ = spec_or.status();
    return ticket;
  }
  const TableSpec spec = **spec_or;
  const int64_t clock = clock_;
  const float lr = lr_;
  // Zero-copy: frames point into the caller's buffer, which outlives the call and its retries
  // (see Wait), or which `owner` keeps alive as long as a frame holds it.
  const std::shared_ptr<const void> borrowed = owner ? std::move(owner) : std::shared_ptr<const void>(grads, [](const void*) {});
  for (auto& [sv, mine_chunks] : DenseRequests(spec, layout_)) {
    auto chunks = std::make_shared<std::vector<uint64_t>>(std::move(mine_chunks));
    const int64_t n = static_cast<int64_t>(chunks->size());
    const uint64_t push_id = NextPushId();
    PsTicket::Part part(sv, nullptr, [spec, table, clock, chunks, n, grads, dtype, borrowed, push_id, lr] {
                          Message m;
                          auto p = m.builder().getBody().initPush();
                          p.setTable(table);
                          p.setClock(clock);
                          p.setPushId(push_id);
                          p.setLr(lr);
                          m.AddPayload(DType::kI64, {n}, View(chunks));
                          const size_t size = DTypeSize(dtype);
                          for (uint64_t c : *chunks) {
                            const uint32_t len = spec.ChunkLength(c);
                            m.AddPayload(dtype, {static_cast<int64_t>(len)},
                                         Buffer(static_cast<const char*>(grads) + c * spec.chunk_floats * size,
                                                len * size, borrowed));
                          }
                          return m;
                        });
    Send(part, timeout_);
    ticket.parts_.push_back(std::move(part));
  }
  return ticket;
}

Status PsClient::Wait(PsTicket& ticket, std::optional<Millis> timeout) {
  if (!ticket.early_.ok()) return ticket.early_;
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(timeout_ + Millis(1000));
  Status first;
  for (auto& part : ticket.parts_) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    auto r = Finish(part, std::max(left, Millis(0)));
    if (auto t = part.ticket.completed_at()) ticket.completed_ = std::max(ticket.completed_, *t);
    Status s = r.ok() ? (part.on_reply ? part.on_reply(*r) : Status::OK()) : r.status();
    if (!s.ok() && first.ok()) first = s.WithContext("server " + std::to_string(part.server));
  }
  ticket.parts_.clear();
  return first;
}

std::optional<std::chrono::steady_clock::time_point> PsClient::CompletedAt(const PsTicket& ticket) {
  if (!ticket.parts_.empty() || ticket.completed_ == std::chrono::steady_clock::time_point{}) return std::nullopt;
  return ticket.completed_;
}

bool PsClient::Arrived(const PsTicket& ticket) {
  if (!ticket.early_.ok()) return true;
  for (const PsTicket::Part& part : ticket.parts_) {
    if (!part.ticket.done()) return false;
  }
  return true;
}

Status PsClient::Clock(float grad_scale) {
  STRATA_RETURN_IF_ERROR(Connect());
  const int64_t clock = clock_;
  const std::vector<uint32_t>& members = members_;
  const std::string where = "clock " + std::to_string(clock);
  // Elastic: a server that switched to a layout with a joining server refuses a clock that does
  // not count it (ClockRequest.servers), so the joining server hears of every clock it must
  // apply; the clock then goes again to every server of the refreshed layout (a repeat is
  // counted once).
  for (int round = 0;; ++round) {
    STRATA_RETURN_IF_ERROR(GrowLayout());
    const uint32_t servers = node_.options().cluster.elastic ? layout_.servers : 0;
    PsTicket ticket;
    for (uint32_t s = 0; s < servers_.size(); ++s) {
      if (layout_.Left(s)) continue;
      PsTicket::Part part(s, nullptr, [clock, grad_scale, members, servers] {
                            Message m;
                            auto c = m.builder().getBody().initClock();
                            c.setClock(clock);
                            c.setGradScale(grad_scale);
                            c.setServers(servers);
                            if (!members.empty()) {
                              c.setMembers(static_cast<uint32_t>(members.size()));
                              auto ranks = c.initMemberRanks(static_cast<unsigned>(members.size()));
                              for (size_t i = 0; i < members.size(); ++i) ranks.set(static_cast<unsigned>(i), members[i]);
                            }
                            return m;
                          });
      Send(part, timeout_);
      ticket.parts_.push_back(std::move(part));
    }
    bool moved = false;
    Status first;
    for (auto& part : ticket.parts_) {
      Result<Message> r = Finish(part, timeout_ + Millis(1000));
      if (r.ok()) continue;
      if (LayoutMoved(r.status())) {
        moved = true;
      } else if (first.ok()) {
        first = r.status().WithContext("server " + std::to_string(part.server));
      }
    }
    ticket.parts_.clear();
    STRATA_RETURN_IF_ERROR(first.WithContext(where));
    if (!moved) break;
    if (round >= 8) {
      return Status::Internal(where + ": refused 9 times as sent under an older server layout (" +
                              std::to_string(layout_.servers) + " servers here)");
    }
    (void)node_.RefreshView();
  }
  ++clock_;
  return Status::OK();
}

Result<double> PsClient::GradSumSquares() {
  STRATA_RETURN_IF_ERROR(Connect());
  STRATA_RETURN_IF_ERROR(GrowLayout());
  PsTicket ticket;
  const int64_t clock = clock_;
  std::vector<double> sums(servers_.size(), 0.0);
  for (uint32_t s = 0; s < servers_.size(); ++s) {
    if (layout_.Left(s)) continue;
    PsTicket::Part part(s, [&sums, s](const Message& reply) {
                          if (!reply.reader().getBody().isGradNorm()) {
                            return Status::InvalidArgument("server " + std::to_string(s) + " answered gradNorm with " +
                                                           std::string(OpName(reply.op())));
                          }
                          sums[s] = reply.reader().getBody().getGradNorm().getSumSquares();
                          return Status::OK();
                        },
                        [clock] {
                          Message m;
                          m.builder().getBody().initGradNorm().setClock(clock);
                          return m;
                        });
    Send(part, timeout_);
    ticket.parts_.push_back(std::move(part));
  }
  STRATA_RETURN_IF_ERROR(Wait(ticket).WithContext(
      "the global gradient norm of clock " + std::to_string(clock) +
      " (optimizer.clip_norm): a server answers once every replica's pushes of that clock reached it"));
  double sum = 0;
  for (double s : sums) sum += s;  // in server order: the same double on every trainer
  return sum;
}

Result<std::string> PsClient::ServerStats(uint32_t server) {
  STRATA_RETURN_IF_ERROR(Connect());
  if (server >= servers_.size()) return Status::InvalidArgument("no server " + std::to_string(server));
  // The server of that rank (not the one serving shard `server` now).
  const ClusterView view = node_.view();
  const NodeInfo* n = view.Find(Role::kServer, static_cast<int>(server));
  if (!n) return Status::Internal("server rank " + std::to_string(server) + " is missing from the view");
  STRATA_ASSIGN_OR_RETURN(PeerId peer, node_.rpc().Connect(n->address));
  Message m;
  m.set_op(Op::GET_STATS);
  STRATA_ASSIGN_OR_RETURN(Message reply, node_.rpc().CallAndWait(peer, std::move(m), timeout_));
  if (reply.op() != Op::STATS) return Status::Internal("getStats answered with " + std::string(OpName(reply.op())));
  return std::string(reply.reader().getBody().getStats().cStr());
}

}  // namespace strata
