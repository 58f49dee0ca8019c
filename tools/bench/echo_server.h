// echo_server.h: EchoServerProcess, the forked server of `strata-bench transport`. Per scheme
// (tcp, ipc) it serves echo on an RpcEndpoint (ours) and on raw ZeroMQ sockets (the peer).
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "common/rpc.h"

namespace strata::bench {

// What the raw peer's thread does with each PULL message and rpc request payload
// (EchoServerAddresses::ctl).
enum class RawPass : uint64_t { kNone = 0, kCopy = 1, kSgd = 2 };

// Where the server process listens for one scheme.
struct EchoServerAddresses {
  std::string scheme;  // "tcp" or "ipc"
  std::string ours;    // RpcEndpoint: echo requests are answered with the same payloads;
                       // one-way echoes are counted, and an echo request without payloads is
                       // answered with that count (an i64 payload), which restarts from 0
  std::string pull;    // raw PULL: counts one-way messages
  std::string rep;     // raw REP: echoes each request
  std::string ctl;     // raw REP: a request holding N (u64) is answered once the PULL has N
                       // messages more; one holding [N, RawPass, span] (u64s) also sets what
                       // the raw thread does with each later PULL message and rpc request
                       // payload: nothing, copy it into, or an SGD step on (its floats the
                       // gradient), the next part of a span-byte tensor
  std::string rpc;     // raw REP: a request's first frame holds R (u64), its other frames are
                       // read (and given the pass, see ctl) and dropped; the reply is R bytes
                       // from memory, sent without a copy
};

// The parent's handle on the server process: closing it stops the process and removes its
// ipc socket files. Not thread-safe (one owner).
class EchoServerProcess {
 public:
  // Forks the server for `schemes` and waits up to `timeout` for its addresses; its RpcEndpoints'
  // transports take `options`, and it runs on `cpus` if given. Call this before the calling
  // process starts any thread: the child inherits only the forking one.
  static Result<std::unique_ptr<EchoServerProcess>> Fork(const std::vector<std::string>& schemes,
                                                         Millis timeout,
                                                         const TransportOptions& options = {},
                                                         const cpu_set_t* cpus = nullptr);
  ~EchoServerProcess();
  EchoServerProcess(const EchoServerProcess&) = delete;
  EchoServerProcess& operator=(const EchoServerProcess&) = delete;

  const std::vector<EchoServerAddresses>& addresses() const { return addresses_; }
  pid_t pid() const { return pid_; }

 private:
  EchoServerProcess(pid_t pid, int stop_fd) : pid_(pid), stop_fd_(stop_fd) {}
  Status ReadAddresses(int fd, Millis timeout);

  pid_t pid_;
  int stop_fd_;  // the server exits when it reads EOF here
  std::vector<EchoServerAddresses> addresses_;
};

}  // namespace strata::bench
