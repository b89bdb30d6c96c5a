// `flowline serve FLOW.yml`: starts a flow and serves it over HTTP with flowline::Gateway until SIGINT or
// SIGTERM, then drains (answers what is in flight) and exits 0. With --executor NAME it serves that one
// executor to other flows (flowline::ExecutorServer, the binary protocol) instead.
#pragma once

#include "flowline/flow_config.hpp"
#include "flowline/gateway.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace flowline::cli {

struct ServeOptions {
  std::string flow;
  std::vector<std::string> sets;  // --set EXECUTOR.PARAM=VALUE
  std::string token_file;         // --token-file; else FLOWLINE_TOKEN
  std::string ready_file;         // --ready-file: written with the bound port once serving
  // --executor NAME: serve that executor alone over the binary protocol (ExecutorServer) on --port, and over
  // HTTP on --http-port when given (health, readiness, metrics, Jina's API).
  std::string executor;
  std::optional<int> http_port;
  std::size_t max_frame_bytes = 256u << 20;
  std::size_t max_partial_frame_bytes = std::size_t{1} << 30;  // the executor server's partial-frame budget
  bool overwrite = false;  // --overwrite: replace the files the flow's writers write when they exist
  // --max-output-bytes: what each file the flow's executors write may hold (RuntimeInfo::max_output_bytes);
  // every client's request adds to it. 0: no bound.
  std::uint64_t max_output_bytes = std::uint64_t{1} << 30;
  // The options given on the command line; they override the flow file's `with:` settings, which override
  // GatewayOptions' defaults.
  ServeSettings given;
};

// Adds the `serve` subcommand and its options to `app`, filling `options` when parsed.
CLI::App* add_serve_command(CLI::App& app, ServeOptions& options);
int command_serve(ServeOptions options);

}  // namespace flowline::cli
