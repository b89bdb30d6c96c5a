// flowline/executor_server.hpp — one executor of a flow served to other flows over flowline's binary
// protocol (docs/remote-protocol.md), so that a flow on another machine lists it under `hosts:`.
//
//   FlowConfig config = executor_flow(load_flow_config("flows/encode.yml"), "encoder");  // that one executor
//   Flow flow(std::move(config));
//   flow.start();
//   ExecutorServer server(flow, "encoder");
//   server.start({.port = 9000});    // binds 127.0.0.1:9000; serves on its own threads
//   ...                              // until SIGTERM, say
//   server.stop();                   // answers what is in flight, then closes every connection
//   flow.close();
//
// Each connection starts with a handshake (protocol version, the token when one is set); then the client
// sends requests, several in flight, and gets each answer, tagged with its id, as soon as the flow has it.
// Requests of all connections share the executor's batches. Every size, count and wait is bounded: frame
// size, requests in flight per connection (beyond it the server stops reading that connection until
// answers go out), connections, the time to complete the handshake. A malformed frame (bad length, bad
// version or token, truncated tensor, garbage) gets an Error frame naming the problem, is logged with the
// peer's address, and closes that connection; the server and the other connections go on.
//
// Threads and ownership: the server runs its own I/O threads (options.threads), each with an event loop of
// its own that keeps the connections given to it; frames are decoded on them and answers encoded on the
// flow's replica threads. start() and stop() are called from one
// controlling thread. The Flow must be started before start() and outlive the server; close it after stop().
#pragma once

#include "flowline/flow_config.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace flowline {

class Flow;

struct ExecutorServerOptions {
  std::string host = "127.0.0.1";            // the address to bind; "0.0.0.0" or "::" to serve other machines
  std::uint16_t port = 9000;                 // 0: a free port (port() says which)
  int threads = 2;                           // I/O threads
  std::size_t max_frame_bytes = 256u << 20;  // larger frames close the connection (before the Hello: 4 KiB)
  // What all connections' partly read frames may hold together. A frame's buffer grows with the bytes that
  // arrive, never by its declared length; past this budget reads wait (TCP backpressure) until frames finish.
  std::size_t max_partial_frame_bytes = std::size_t{1} << 30;  // 1 GiB
  std::size_t max_in_flight = 64;                              // requests per connection inside the flow at once
  std::size_t max_connections = 1024;                          // more are closed at once
  std::chrono::milliseconds handshake_timeout{10'000};         // from accept to the Hello frame
  std::chrono::milliseconds frame_timeout{30'000};             // from a frame's length to its last byte
  std::string token;  // when not empty, clients must present it in their Hello frame
};

struct ExecutorServerStats {
  std::uint64_t connections = 0;  // open now
  std::uint64_t accepted = 0;
  std::uint64_t requests = 0;  // answered
  std::uint64_t documents = 0;
  std::uint64_t protocol_errors = 0;  // connections closed for a malformed frame, version or token
  std::uint64_t in_flight = 0;
};

class ExecutorServer {
 public:
  // Serves executor `executor` (its name in `flow`) of a started flow. Its type is told to clients.
  ExecutorServer(Flow& flow, std::string executor);
  ~ExecutorServer();  // stop()
  ExecutorServer(const ExecutorServer&) = delete;
  ExecutorServer& operator=(const ExecutorServer&) = delete;

  // Binds and starts serving. Throws flowline::Error when the address cannot be bound.
  void start(ExecutorServerOptions options);
  std::uint16_t port() const;
  // Stops accepting, waits (up to 30 s) for the answers in flight to be written, closes every connection
  // and joins the I/O threads. Idempotent.
  void stop();
  // Counters read from atomics: any thread, at any time; port() likewise once start() has returned.
  ExecutorServerStats stats() const;

  struct Impl;  // defined in the library; its connections refer to it

 private:
  std::unique_ptr<Impl> impl_;
};

// The flow that serves executor `name` of `config` alone: that executor without `needs` and `hosts`
// (its `uses`, `with`, replicas and devices run here), the flow's options and plugins. Throws
// flowline::Error when the flow has no such executor, or it has no `uses`.
FlowConfig executor_flow(const FlowConfig& config, const std::string& name);

}  // namespace flowline
