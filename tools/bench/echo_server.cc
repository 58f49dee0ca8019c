// echo_server.cc: EchoServerProcess: the forked server (ours: an RpcEndpoint; raw: ZeroMQ
// PULL/REP sockets on one thread) and the parent's side of the fork.
#include "tools/bench/echo_server.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "common/optim/kernels.h"
#include "common/transport.h"
#include "tools/bench/bench_util.h"

namespace strata::bench {
namespace {

// `tag` makes ipc paths unique to this run. Raw sockets use ZeroMQ's "*" port spelling.
std::string ListenAddress(const std::string& scheme, const std::string& tag, const char* name,
                          bool raw) {
  if (scheme == "tcp") return raw ? "tcp://127.0.0.1:*" : "tcp://127.0.0.1:0";
  return "ipc:///tmp/strata-bench-" + tag + "-" + name;
}

// ---------------------------------------------------------------------------------------------
// The server process

// Answers echo requests with the same payloads and counts one-way echoes. An echo request
// without payloads ends a stream: it comes after every one-way message sent before it (one
// link delivers in order), so it is answered with the complete count, which restarts from 0.
// Handlers run on the transport's I/O thread, one at a time: the count is a plain one, as the raw
// peer's is.
void HandleEcho(uint64_t& one_way, Request request) {
  const Message& msg = request.message();
  if (msg.op() != Op::ECHO) {
    return request.ReplyError(Status::Unimplemented("the bench server only answers echo"));
  }
  if (request.one_way()) {
    ++one_way;
    return;
  }
  Message reply = request.MakeReply();
  reply.set_op(Op::ECHO);
  if (msg.num_payloads() == 0) {
    const auto count = static_cast<int64_t>(std::exchange(one_way, 0));
    reply.AddPayload(DType::kI64, {1}, Buffer::Copy(&count, sizeof(count)));
  }
  for (size_t i = 0; i < msg.num_payloads(); ++i) {
    PayloadInfo info = msg.payload_info(i);
    reply.AddPayload(info.dtype, info.shape, *info.buffer);
  }
  request.Reply(std::move(reply));
}

// What the raw peer's thread does with each message it receives on the PULL, or each request's
// payload on the rpc socket, as a parameter server's receiving side must
// (EchoServerAddresses::ctl): nothing, a copy into a tensor (a client's pull), or an SGD step
// with the message as the gradient (a server's push). Either pass walks through a destination
// of `span` bytes, a message's worth at a time, as a tensor's chunks arrive in turn.
class ReceiverPass {
 public:
  void Configure(uint64_t kind, uint64_t span) {
    kind_ = kind <= static_cast<uint64_t>(RawPass::kSgd) ? static_cast<RawPass>(kind) : RawPass::kNone;
    dest_.assign(std::min<uint64_t>(span, kMaxSpan) / sizeof(float), 0.0f);
    at_ = 0;
  }

  void Apply(const zmq::message_t& msg) {
    const size_t n = msg.size() / sizeof(float);
    if (kind_ == RawPass::kNone || n == 0) return;
    if (dest_.size() < n) dest_.resize(n);
    if (at_ + n > dest_.size()) at_ = 0;
    float* to = dest_.data() + at_;
    at_ += n;
    if (kind_ == RawPass::kCopy) {
      std::memcpy(to, msg.data(), n * sizeof(float));
    } else {
      optim::SgdStep({.lr = 1e-3f}, {.w = to, .m = nullptr, .grad = static_cast<const float*>(msg.data()),
                                     .n = static_cast<int64_t>(n)});
    }
  }

 private:
  static constexpr uint64_t kMaxSpan = uint64_t{1} << 32;
  RawPass kind_ = RawPass::kNone;
  std::vector<float> dest_;
  size_t at_ = 0;  // in floats
};

// The raw sockets' request-reply peer of a parameter server (strata-bench ps): answers a request
// of [R (u64), payload...] with R bytes, after its pass over the payload. The replies' bytes are
// sent from memory without a copy, as a server replies from a chunk's snapshot; buffers
// outgrown stay alive, and the owner keeps this object until the socket is closed, since
// ZeroMQ may still be writing from them.
class RpcReplies {
 public:
  // Answers the next request, if one is in; whether one was. Throws zmq::error_t.
  bool Answer(zmq::socket_t& rpc, ReceiverPass& pass) {
    zmq::message_t part;
    if (!rpc.recv(part, zmq::recv_flags::dontwait)) return false;
    uint64_t bytes = 0;
    std::memcpy(&bytes, part.data(), std::min(part.size(), sizeof(bytes)));
    while (part.more()) {
      (void)rpc.recv(part, zmq::recv_flags::none);  // the rest is in already
      pass.Apply(part);
    }
    bytes = std::min<uint64_t>(bytes, kMaxReplyBytes);
    if (buffers_.empty() || buffers_.back().size() < bytes) buffers_.emplace_back(bytes, std::byte{1});
    rpc.send(zmq::message_t(buffers_.back().data(), bytes, nullptr), zmq::send_flags::none);
    return true;
  }

 private:
  static constexpr uint64_t kMaxReplyBytes = uint64_t{1} << 30;
  std::vector<std::vector<std::byte>> buffers_;
};

// The raw ZeroMQ peer of HandleEcho, on one thread polling its four sockets.
void ServeRaw(zmq::socket_t& pull, zmq::socket_t& rep, zmq::socket_t& ctl, zmq::socket_t& rpc,
              RpcReplies& replies, const std::atomic<bool>& stop) {
  uint64_t received = 0;
  ReceiverPass pass, rpc_pass;
  std::optional<uint64_t> awaited;
  zmq::pollitem_t items[] = {{pull.handle(), 0, ZMQ_POLLIN, 0},
                             {rep.handle(), 0, ZMQ_POLLIN, 0},
                             {ctl.handle(), 0, ZMQ_POLLIN, 0},
                             {rpc.handle(), 0, ZMQ_POLLIN, 0}};
  zmq::message_t msg;
  try {
    while (!stop.load()) {
      zmq::poll(items, 4, std::chrono::milliseconds(100));
      if (items[3].revents & ZMQ_POLLIN) {
        while (replies.Answer(rpc, rpc_pass)) {
        }
      }
      if (items[0].revents & ZMQ_POLLIN) {
        while (pull.recv(msg, zmq::recv_flags::dontwait)) {
          pass.Apply(msg);
          ++received;
        }
      }
      if ((items[1].revents & ZMQ_POLLIN) && rep.recv(msg, zmq::recv_flags::dontwait)) {
        rep.send(msg, zmq::send_flags::none);
      }
      if (!awaited && (items[2].revents & ZMQ_POLLIN) && ctl.recv(msg, zmq::recv_flags::dontwait)) {
        uint64_t n[3] = {0, 0, 0};
        std::memcpy(n, msg.data(), std::min(msg.size(), sizeof(n)));
        if (msg.size() >= sizeof(n)) {
          pass.Configure(n[1], n[2]);
          rpc_pass.Configure(n[1], n[2]);
        }
        awaited = n[0];
      }
      if (awaited && received >= *awaited) {
        uint64_t got = received;
        ctl.send(zmq::buffer(&got, sizeof(got)), zmq::send_flags::none);
        received -= *awaited;
        awaited.reset();
      }
    }
  } catch (const zmq::error_t& e) {
    if (e.num() != ETERM) std::cerr << "strata-bench server: raw loop: " << e.what() << "\n";
  }
}

// One scheme's servers: ours and the raw sockets with their thread.
class SchemeServer {
 public:
  SchemeServer() = default;
  SchemeServer(const SchemeServer&) = delete;
  SchemeServer& operator=(const SchemeServer&) = delete;
  ~SchemeServer() {
    stop_ = true;
    if (raw_thread_.joinable()) raw_thread_.join();
    if (rpc_) rpc_->Shutdown();
  }

  Result<EchoServerAddresses> Start(zmq::context_t& context, const std::string& scheme,
                                    const std::string& tag, const TransportOptions& options) {
    EchoServerAddresses a;
    a.scheme = scheme;
    STRATA_ASSIGN_OR_RETURN(auto transport,
                            MakeTransport(ListenAddress(scheme, tag, "ours", false), options));
    rpc_ = std::make_unique<RpcEndpoint>(std::move(transport));
    rpc_->SetHandler([counter = &one_way_](Request r) { HandleEcho(*counter, std::move(r)); });
    STRATA_ASSIGN_OR_RETURN(a.ours, rpc_->Bind(ListenAddress(scheme, tag, "ours", false)));
    try {
      auto bind = [&](zmq::socket_t& socket, const char* name) {
        socket.set(zmq::sockopt::linger, 0);
        socket.bind(ListenAddress(scheme, tag, name, true));
        return socket.get(zmq::sockopt::last_endpoint);
      };
      pull_ = zmq::socket_t(context, zmq::socket_type::pull);
      rep_ = zmq::socket_t(context, zmq::socket_type::rep);
      ctl_ = zmq::socket_t(context, zmq::socket_type::rep);
      rpc_raw_ = zmq::socket_t(context, zmq::socket_type::rep);
      a.pull = bind(pull_, "pull");
      a.rep = bind(rep_, "rep");
      a.ctl = bind(ctl_, "ctl");
      a.rpc = bind(rpc_raw_, "rpc");
    } catch (const zmq::error_t& e) {
      return Status::IOError(std::string("raw sockets: ") + e.what());
    }
    raw_thread_ = std::thread([this] { ServeRaw(pull_, rep_, ctl_, rpc_raw_, rpc_replies_, stop_); });
    return a;
  }

 private:
  std::unique_ptr<RpcEndpoint> rpc_;
  uint64_t one_way_ = 0;  // HandleEcho's
  RpcReplies rpc_replies_;  // declared before the sockets: outlives them
  zmq::socket_t pull_, rep_, ctl_, rpc_raw_;
  std::atomic<bool> stop_{false};
  std::thread raw_thread_;
};

bool WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// The server process: reports one line of addresses per scheme, then "ready", and serves
// until the parent closes `stop_fd` (or dies).
Status Serve(const std::vector<std::string>& schemes, const TransportOptions& options,
             const std::string& tag, int report_fd, int stop_fd) {
  zmq::context_t context(1);  // outlives the servers' raw sockets
  std::vector<std::unique_ptr<SchemeServer>> servers;
  std::string lines;
  for (const std::string& scheme : schemes) {
    auto& server = servers.emplace_back(std::make_unique<SchemeServer>());
    STRATA_ASSIGN_OR_RETURN(EchoServerAddresses a, server->Start(context, scheme, tag, options));
    lines += a.scheme + " " + a.ours + " " + a.pull + " " + a.rep + " " + a.ctl + " " + a.rpc + "\n";
  }
  if (!WriteAll(report_fd, lines + "ready\n")) return Status::IOError("report pipe closed");
  for (;;) {
    char c;
    const ssize_t n = read(stop_fd, &c, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) return Status::OK();
  }
}

[[noreturn]] void RunServerProcess(const std::vector<std::string>& schemes,
                                   const TransportOptions& options, const std::string& tag,
                                   int report_fd, int stop_fd) {
  Status s = Serve(schemes, options, tag, report_fd, stop_fd);
  if (!s.ok()) (void)WriteAll(report_fd, "error " + s.ToString() + "\n");
  _exit(s.ok() ? 0 : 1);  // skips the parent's atexit handlers and static destructors
}

}  // namespace

Result<std::unique_ptr<EchoServerProcess>> EchoServerProcess::Fork(
    const std::vector<std::string>& schemes, Millis timeout, const TransportOptions& options,
    const cpu_set_t* cpus) {
  int report[2], stop[2];
  if (pipe(report) != 0) return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  if (pipe(stop) != 0) {
    close(report[0]);
    close(report[1]);
    return Status::IOError(std::string("pipe: ") + std::strerror(errno));
  }
  const std::string tag = std::to_string(getpid());
  const pid_t pid = fork();
  if (pid < 0) return Status::IOError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(report[0]);
    close(stop[1]);
    if (cpus && sched_setaffinity(0, sizeof(*cpus), cpus) != 0) {
      (void)WriteAll(report[1], std::string("error sched_setaffinity: ") + std::strerror(errno) + "\n");
      _exit(1);
    }
    RunServerProcess(schemes, options, tag, report[1], stop[0]);
  }
  close(report[1]);
  close(stop[0]);
  auto server = std::unique_ptr<EchoServerProcess>(new EchoServerProcess(pid, stop[1]));
  Status s = server->ReadAddresses(report[0], timeout);
  close(report[0]);
  if (!s.ok()) return s.WithContext("bench server");
  return server;
}

EchoServerProcess::~EchoServerProcess() {
  close(stop_fd_);
  int status = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (const EchoServerAddresses& a : addresses_) {
    for (const std::string* e : {&a.ours, &a.pull, &a.rep, &a.ctl, &a.rpc}) {
      if (e->rfind("ipc://", 0) == 0) unlink(e->c_str() + 6);
    }
  }
}

Status EchoServerProcess::ReadAddresses(int fd, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string text;
  while (text.find("ready\n") == std::string::npos) {
    if (text.rfind("error ", 0) == 0 && text.find('\n') != std::string::npos) {
      return Status::Unavailable(text.substr(6, text.find('\n') - 6));
    }
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) == 0) {
      return Status::DeadlineExceeded("did not start in time");
    }
    char chunk[512];
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Unavailable("exited during start-up: " + text);
    text.append(chunk, static_cast<size_t>(n));
  }
  for (const std::string& line : SplitList(text, '\n')) {
    auto f = SplitList(line, ' ');
    if (f.size() == 6) addresses_.push_back({f[0], f[1], f[2], f[3], f[4], f[5]});
  }
  return Status::OK();
}

}  // namespace strata::bench
