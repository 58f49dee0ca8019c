// echo_server.h: EchoServer, an RpcEndpoint on a real loopback tcp port that answers every
// request with an empty reply and counts the requests that reached it, for the transport tests
// that check who gets through (CURVE, the connection bound).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "common/rpc.h"
#include "common/transport.h"

namespace strata::testing {

class EchoServer {
 public:
  // Binds on 127.0.0.1, a free port; address() is empty if that failed (the test has failed).
  explicit EchoServer(const TransportOptions& options) {
    auto transport = MakeTransport("tcp://127.0.0.1:0", options);
    EXPECT_TRUE(transport.ok()) << transport.status().ToString();
    if (!transport.ok()) return;
    rpc_ = std::make_unique<RpcEndpoint>(std::move(transport).value());
    rpc_->SetHandler([this](Request r) {
      ++handled_;
      r.Reply(r.MakeReply());
    });
    auto bound = rpc_->Bind("tcp://127.0.0.1:0");
    EXPECT_TRUE(bound.ok()) << bound.status().ToString();
    if (bound.ok()) address_ = *bound;
  }
  const std::string& address() const { return address_; }
  int handled() const { return handled_.load(); }

 private:
  std::atomic<int> handled_{0};
  std::unique_ptr<RpcEndpoint> rpc_;
  std::string address_;
};

}  // namespace strata::testing
