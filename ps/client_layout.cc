// client_layout.cc: PsClient under elastic servers (ps/layout.h): building sparse parts, taking
// joined servers into the layout, and sending the keys of a part its server no longer holds to
// the server that holds them now.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>

#include "common/dtype.h"
#include "ps/client.h"

namespace strata {
namespace {

template <typename T>
Buffer View(const std::shared_ptr<std::vector<T>>& v) {
  return Buffer(v->data(), v->size() * sizeof(T), v);
}

}  // namespace

PsTicket::Part PsClient::SparsePart(uint32_t server, std::shared_ptr<const PsTicket::Sparse> q) {
  PsTicket::Part part(server, nullptr, [q] {
    Message m;
    const int64_t n = static_cast<int64_t>(q->keys->size());
    if (q->push) {
      auto p = m.builder().getBody().initPush();
      p.setTable(q->table);
      p.setClock(q->clock);
      p.setReturnValues(q->return_values);
      p.setPushId(q->push_id);
      p.setLr(q->lr);
    } else {
      auto p = m.builder().getBody().initPull();
      p.setTable(q->table);
      p.setClock(q->clock);
      p.setBf16(q->bf16);
    }
    m.AddPayload(DType::kI64, {n}, View(q->keys));
    const std::vector<int64_t> rows = {n, static_cast<int64_t>(q->dim)};
    if (q->push && q->bf16) {  // rounded afresh for each send: a retry sends the same bytes
      auto narrow = std::make_shared<std::vector<uint16_t>>(q->grads->size());
      ConvertF32ToBF16(q->grads->data(), narrow->data(), narrow->size());
      m.AddPayload(DType::kBF16, rows, View(narrow));
    } else if (q->push) {
      m.AddPayload(DType::kF32, rows, View(q->grads));
    }
    return m;
  });
  part.sparse = std::move(q);
  return part;
}

Status PsClient::GrowLayout() {
  const ClusterView view = node_.view();
  const int count = view.Count(Role::kServer);
  for (int r = static_cast<int>(servers_.size()); r < count; ++r) {
    const NodeInfo* n = view.Find(Role::kServer, r);
    if (!n) return Status::Internal("server rank " + std::to_string(r) + " is missing from the view");
    STRATA_ASSIGN_OR_RETURN(PeerId peer, node_.rpc().Connect(n->address));
    servers_.push_back(peer);
    addresses_.push_back(n->address);
    holders_.push_back(static_cast<uint32_t>(r));
  }
  layout_.servers = std::max(layout_.servers, static_cast<uint32_t>(servers_.size()));
  // Servers that left an elastic job handed their keys over before the view showed it.
  if (node_.options().cluster.elastic) {
    for (const NodeInfo& n : view.WithRole(Role::kServer)) {
      if (n.left && n.rank > 0) layout_.Leave(static_cast<uint32_t>(n.rank));
    }
  }
  return Status::OK();
}

Result<Message> PsClient::Finish(PsTicket::Part& part, Millis timeout) {
  Result<Message> r = Await(part, timeout);
  if (!r.ok() && Retryable(r.status())) r = Retry(part, std::move(r));
  if (!r.ok() && LayoutMoved(r.status())) {
    if (part.sparse) return Resplit(part);
    // A clock or createTable for a server that left (Route): it holds nothing any more. Route
    // learnt that from a fresh view the layout has not taken in yet.
    if (!layout_.Left(part.server)) STRATA_RETURN_IF_ERROR(GrowLayout());
    if (layout_.Left(part.server)) return Message();
  }
  return r;
}

Result<Message> PsClient::Resplit(PsTicket::Part& part, int depth) {
  const PsTicket::Sparse& q = *part.sparse;
  const size_t n = q.keys->size(), dim = q.dim;
  // A server that took keys is in the view from the moment it joined, and one that gave its
  // keys away is shown as left before it refuses any: one refresh finds where they are.
  std::map<uint32_t, std::vector<size_t>> by_owner;  // server -> positions in the part
  (void)node_.RefreshView();
  STRATA_RETURN_IF_ERROR(GrowLayout());
  for (size_t i = 0; i < n; ++i) by_owner[layout_.SparseOwner((*q.keys)[i])].push_back(i);
  if (by_owner.size() == 1 && by_owner.begin()->first == part.server) {
    // The server refused under a layout older than this view: a join rolled back (the server
    // hears of it by its own event, which may come after this refresh). Ask it again shortly.
    if (depth > 8) {
      return Status::Internal("server " + std::to_string(part.server) + " refused keys as moved, but the layout of " +
                              std::to_string(layout_.servers) + " servers places them there");
    }
    std::this_thread::sleep_for(Millis(50) * (depth + 1));
  }
  if (depth > 8) return Status::Internal("keys of server " + std::to_string(part.server) + " moved 9 times in a row");
  ++resplits_;
  struct Sub {
    std::vector<size_t> positions;
    PsTicket::Part part;
  };
  std::vector<Sub> subs;
  for (auto& [server, positions] : by_owner) {
    auto sub = std::make_shared<PsTicket::Sparse>(q);  // the same table, clock and push id
    sub->keys = std::make_shared<std::vector<uint64_t>>();
    sub->grads = std::make_shared<std::vector<float>>();
    for (size_t i : positions) {
      sub->keys->push_back((*q.keys)[i]);
      if (q.push) sub->grads->insert(sub->grads->end(), q.grads->begin() + i * dim, q.grads->begin() + (i + 1) * dim);
    }
    subs.push_back({std::move(positions), SparsePart(server, std::move(sub))});
    Send(subs.back().part, timeout_);
  }
  // The values as the part's own server would send them: bf16 for a bf16 pull.
  const DType dtype = q.bf16 && !q.push ? DType::kBF16 : DType::kF32;
  const size_t row_bytes = dim * DTypeSize(dtype);
  auto values = std::make_shared<std::vector<unsigned char>>(q.return_values ? n * row_bytes : 0);
  for (Sub& sub : subs) {
    Result<Message> r = Await(sub.part, timeout_ + Millis(1000));
    if (!r.ok() && Retryable(r.status())) r = Retry(sub.part, std::move(r));
    if (!r.ok() && LayoutMoved(r.status())) r = Resplit(sub.part, depth + 1);  // another server joined meanwhile
    if (!r.ok()) return r.status().WithContext("server " + std::to_string(sub.part.server));
    if (!q.return_values) continue;
    if (r->op() != Op::VALUES || r->num_payloads() != 1 || r->payload_info(0).dtype != dtype ||
        r->payload(0).size() != sub.positions.size() * row_bytes) {
      return Status::Internal("server " + std::to_string(sub.part.server) + " answered moved keys with " +
                              std::string(OpName(r->op())) + " of the wrong size");
    }
    const auto* v = reinterpret_cast<const unsigned char*>(r->payload(0).data());
    for (size_t j = 0; j < sub.positions.size(); ++j) {
      std::memcpy(values->data() + sub.positions[j] * row_bytes, v + j * row_bytes, row_bytes);
    }
  }
  // Answered as the part's own server would have: values in the part's key order, or empty.
  Message reply;
  if (q.return_values) {
    reply.set_op(Op::VALUES);
    reply.AddPayload(dtype, {static_cast<int64_t>(n), static_cast<int64_t>(dim)}, View(values));
  }
  return reply;
}

}  // namespace strata
