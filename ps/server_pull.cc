// server_pull.cc: PsServer's pulls: a pull parked until its clock (BSP, SSP) or answered, sparse
// rows read from the store, dense chunks replied from their snapshots without a copy (stale
// ones read into fresh buffers first; a pull of fresh ones answered on the receive thread),
// and the next dense table read ahead from the tier.
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "ps/server.h"
#include "ps/server_table.h"

namespace strata {

Status PsServer::AnswerPull(Table& t, Request& request, const std::vector<uint64_t>& keys, size_t floats) {
  STRATA_ASSIGN_OR_RETURN(Message reply, PullReply(t, request, keys, floats));
  request.Reply(std::move(reply));
  return Status::OK();
}

Result<Message> PsServer::PullReply(Table& t, const Request& request, const std::vector<uint64_t>& keys,
                                    size_t floats) {
  if (t.snapshots) return DensePullReply(t, request, keys, floats);
  // Uninitialised (not a std::vector's zero fill): every float is written by the read below,
  // and the fill would be one more pass over every row.
  std::shared_ptr<float[]> values(new float[floats]);
  const size_t dim = t.spec.dim;
  auto copy = [&](size_t i, std::span<const float> record) {
    std::memcpy(values.get() + i * dim, record.data(), dim * sizeof(float));
  };
  // Serving a checkpoint, an absent row reads as its initializer and is not stored.
  Status s = serving_.empty() ? t.store->Read(keys, t.init, copy) : t.store->Peek(keys, t.init, copy);
  if (!s.ok()) return s.WithContext("pull from table \"" + t.spec.name + "\"");
  ++pulls_;
  keys_pulled_ += keys.size();
  Message reply = request.MakeReply();
  reply.set_op(Op::VALUES);
  const std::vector<int64_t> rows = {static_cast<int64_t>(keys.size()), static_cast<int64_t>(dim)};
  const auto body = request.message().reader().getBody();
  if (body.isPull() && body.getPull().getBf16()) {  // a push-pull answers in f32
    std::shared_ptr<uint16_t[]> narrow(new uint16_t[floats]);
    ConvertF32ToBF16(values.get(), narrow.get(), floats);
    bytes_out_ += floats * sizeof(uint16_t);
    reply.AddPayload(DType::kBF16, rows, Buffer(narrow.get(), floats * sizeof(uint16_t), narrow));
    return reply;
  }
  bytes_out_ += floats * sizeof(float);
  reply.AddPayload(DType::kF32, rows, Buffer(values.get(), floats * sizeof(float), values));
  return reply;
}

Result<Message> PsServer::DensePullReply(Table& t, const Request& request, const std::vector<uint64_t>& keys,
                                         size_t floats) {
  // The chunks' snapshots; the stale ones are read from the store into fresh buffers (each read
  // visits a record under the store's lock, so it sees an update whole or not at all).
  std::vector<std::shared_ptr<const float>> values(keys.size());
  std::vector<uint64_t> versions(keys.size());
  std::vector<uint64_t> stale_keys;
  std::vector<size_t> stale_index;
  for (size_t i = 0; i < keys.size(); ++i) {
    DenseSnapshots::Lookup l = t.snapshots->Get(keys[i]);
    values[i] = std::move(l.values);
    versions[i] = l.version;
    if (!values[i]) {
      stale_keys.push_back(keys[i]);
      stale_index.push_back(i);
    }
  }
  if (!stale_keys.empty()) {
    std::vector<std::shared_ptr<float>> fresh(stale_keys.size());
    for (auto& f : fresh) f = t.snapshots->Acquire();
    auto copy = [&](size_t j, std::span<const float> record) {
      std::memcpy(fresh[j].get(), record.data(), t.ValueFloats(stale_keys[j]) * sizeof(float));
    };
    Status s = serving_.empty() ? t.store->Read(stale_keys, t.init, copy) : t.store->Peek(stale_keys, t.init, copy);
    if (!s.ok()) return s.WithContext("pull from table \"" + t.spec.name + "\"");
    for (size_t j = 0; j < stale_keys.size(); ++j) {
      const size_t i = stale_index[j];
      values[i] = std::move(fresh[j]);
      t.snapshots->Publish(keys[i], versions[i], values[i], /*read=*/true);
    }
  }
  Message reply = DenseValuesReply(t, request, keys, values, floats);
  // The primary's own shard only: a backup copy (backup_of_) answers for another rank's chunks.
  if (backup_of_ < 0) ReadNextTableAhead(t);
  return reply;
}

Message PsServer::DenseValuesReply(const Table& t, const Request& request, const std::vector<uint64_t>& keys,
                                   const std::vector<std::shared_ptr<const float>>& values, size_t floats) {
  ++pulls_;
  keys_pulled_ += keys.size();
  const auto body = request.message().reader().getBody();
  const bool bf16 = body.isPull() && body.getPull().getBf16();  // a push-pull answers in f32
  bytes_out_ += floats * (bf16 ? sizeof(uint16_t) : sizeof(float));
  Message reply = request.MakeReply();
  reply.set_op(Op::VALUES);
  for (size_t i = 0; i < keys.size(); ++i) {
    const int64_t len = t.ValueFloats(keys[i]);
    if (bf16) {  // rounded into a buffer of its own
      std::shared_ptr<uint16_t[]> h(new uint16_t[static_cast<size_t>(len)]);
      for (int64_t k = 0; k < len; ++k) h[k] = FloatToBF16(values[i].get()[k]);
      reply.AddPayload(DType::kBF16, {len}, Buffer(h.get(), static_cast<size_t>(len) * sizeof(uint16_t), h));
      continue;
    }
    // One frame per chunk, sent without a copy.
    reply.AddPayload(DType::kF32, {len}, Buffer(values[i].get(), len * sizeof(float), values[i]));
  }
  return reply;
}

bool PsServer::TryPullOnReceive(Request& request) {
  const auto start = std::chrono::steady_clock::now();
  const Message& msg = request.message();
  if (IsCopy() || options_.replication != Replication::kNone || taking_over_ || HasOrigin(msg)) return false;
  // Everything its sender sent before is done (and nothing else of it is admitted meanwhile:
  // this thread delivers that sender's requests), so the pull sees its sender's earlier pushes.
  if (!lanes_->Idle(msg.sender())) return false;
  const auto pull = msg.reader().getBody().getPull();
  if (pull.getBf16()) return false;  // rounding is a pass over every value: a worker's job
  std::shared_lock layout_lock(migrate_mu_, std::try_to_lock);  // a migration may hold it long
  if (!layout_lock.owns_lock()) return false;
  // Tried too: createTable holds it while it opens a store and syncs the tables file.
  std::shared_lock tables_lock(tables_mu_, std::try_to_lock);
  if (!tables_lock.owns_lock()) return false;
  auto it = tables_.find(pull.getTable());
  if (it == tables_.end() || !it->second->snapshots) return false;
  Table& t = *it->second;  // tables are not destroyed while the server serves
  Table* const next = backup_of_ < 0 ? NextDenseTableLocked(t) : nullptr;
  tables_lock.unlock();
  std::vector<uint64_t> keys;
  size_t floats = 0;
  if (!ValidateKeys(t, msg, false, &keys, &floats).ok()) return false;  // the worker names what is wrong
  if (serving_.empty() && t.spec.consistency != Consistency::kAsp) {
    std::unique_lock clock_lock(clock_mu_, std::try_to_lock);
    if (!clock_lock.owns_lock() || (trainer_clock_.empty() && lost_trainers_.empty())) return false;
    Status error;
    if (!PullReadyLocked(t, pull.getClock(), &error) || !error.ok()) return false;  // parked, or failed, there
  }
  // Readiness only grows: the clock allowed it and still does. A stale chunk is read from the
  // store, which may be on disk: a worker's job too.
  std::vector<std::shared_ptr<const float>> values;
  if (!t.snapshots->GetFresh(keys, &values)) return false;
  ++requests_;
  ++pulls_on_receive_;
  request.Reply(DenseValuesReply(t, request, keys, values, floats));
  ReadTableAhead(next);
  pull_seconds_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return true;
}

void PsServer::ReadNextTableAhead(const Table& t) {
  Table* next = nullptr;
  {
    std::shared_lock lock(tables_mu_);
    next = NextDenseTableLocked(t);
  }
  ReadTableAhead(next);
}

PsServer::Table* PsServer::NextDenseTableLocked(const Table& t) const {
  auto it = tables_.upper_bound(t.spec.id);
  return it == tables_.end() || !it->second->snapshots ? nullptr : it->second.get();
}

void PsServer::ReadTableAhead(Table* next) {
  if (!next) return;
  const uint32_t servers = KeyLayout().base, me = static_cast<uint32_t>(node_.rank());
  if (servers == 0 || me >= servers) return;  // a joined server holds no dense chunks
  std::vector<uint64_t> keys;
  for (uint64_t k = (me + servers - next->spec.PlacementOffset() % servers) % servers; k < next->spec.NumChunks(); k += servers) {
    keys.push_back(k);
  }
  read_ahead_.Ask(next->store.get(), std::move(keys));
}

void PsServer::HandlePull(Request& request) {
  const Message& msg = request.message();
  auto pull = msg.reader().getBody().getPull();
  auto fail = [&](const Status& s) {
    ++errors_;
    request.ReplyError(s);
  };
  std::shared_lock layout_lock(migrate_mu_);
  if (taking_over_) return fail(TakingOver());
  auto table = FindTable(pull.getTable());
  if (!table.ok()) return fail(table.status());
  Table& t = **table;
  std::vector<uint64_t> keys;
  size_t floats = 0;
  if (Status s = ValidateKeys(t, msg, false, &keys, &floats); !s.ok()) return fail(s);
  if (serving_.empty()) {  // a served checkpoint never changes: no clock to wait for
    std::lock_guard lock(clock_mu_);
    if (trainer_clock_.empty() && lost_trainers_.empty()) {
      for (const NodeInfo& n : node_.view().WithRole(Role::kTrainer)) {
        if (n.alive) trainer_clock_[n.id] = 0;
      }
    }
    Status error;
    if (!PullReadyLocked(t, pull.getClock(), &error)) {
      const std::string& route = request.source().route;
      const std::string peer = route.empty() ? "node " + std::to_string(msg.sender()) : route;
      uint64_t bytes = 0;
      for (size_t i = 0; i < msg.num_payloads(); ++i) bytes += msg.payload(i).size();
      if (Status s = parked_quota_.Admit(peer, bytes, "node " + std::to_string(msg.sender())); !s.ok()) {
        return fail(s.WithContext("pull of table \"" + t.spec.name + "\" at clock " + std::to_string(pull.getClock())));
      }
      parked_.push_back({std::move(request), &t, pull.getClock(), peer, bytes});
      return;
    }
    if (!error.ok()) return fail(error);
  }
  if (Status s = AnswerPull(t, request, keys, floats); !s.ok()) fail(s);
}

}  // namespace strata
