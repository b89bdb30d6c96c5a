// `flowline serve`: a flow behind flowline::Gateway until SIGINT/SIGTERM.
#include "serve.hpp"

#include "launcher.hpp"

#include "flowline/error.hpp"
#include "flowline/flow.hpp"
#include "flowline/io.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <pthread.h>

namespace flowline::cli {

namespace {

// The bearer token from --token-file (its first line, without surrounding whitespace) or FLOWLINE_TOKEN.
std::string read_token(const std::string& file) {
  std::string token;
  if (!file.empty()) {
    token = read_file(file);
    token = token.substr(0, token.find('\n'));
  } else if (const char* env = std::getenv("FLOWLINE_TOKEN")) {
    token = env;
  }
  const auto first = token.find_first_not_of(" \t\r");
  if (first == std::string::npos) {
    if (!file.empty()) throw Error(fmt::format("--token-file '{}' holds no token", file));
    return {};
  }
  return token.substr(first, token.find_last_not_of(" \t\r") + 1 - first);
}

}  // namespace

CLI::App* add_serve_command(CLI::App& app, ServeOptions& o) {
  auto* cmd =
      app.add_subcommand("serve", "Serve a flow over HTTP: Jina's, OpenAI's and TEI's APIs, /health, /ready, /metrics");
  cmd->add_option("flow", o.flow, "flow file (YAML)")->required()->check(CLI::ExistingFile);
  cmd->add_option("--host", o.gateway.host, "address to bind (0.0.0.0 to serve other machines)")->capture_default_str();
  cmd->add_option("--port,-p", o.gateway.port, "port to bind (0: any free port, see --ready-file)")
      ->capture_default_str();
  cmd->add_option("--threads", o.gateway.threads, "I/O threads (0: one per core)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", o.gateway.max_body_bytes, "larger request bodies get 413")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-documents", o.gateway.max_documents, "documents per request; more get 413")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-json-depth", o.gateway.max_json_depth, "deeper JSON gets 400")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-in-flight", o.gateway.max_in_flight,
                  "requests inside the flow at once; more get 503 with Retry-After (0: the flow's queue capacity)")
      ->capture_default_str();
  cmd->add_option("--max-connections", o.gateway.max_connections, "open connections; more are closed at once")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--request-timeout", o.request_timeout_ms, "milliseconds a request may take; then 504")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--idle-timeout", o.idle_timeout_ms, "milliseconds a connection may stay silent; then it closes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--embeddings-endpoint", o.gateway.embeddings_endpoint,
                  "the flow endpoint that /v1/embeddings and /embed post to")
      ->capture_default_str();
  cmd->add_option("--token-file", o.token_file,
                  "require \"Authorization: Bearer TOKEN\" with the token in this file (else FLOWLINE_TOKEN, if set)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--ready-file", o.ready_file, "once serving, write the bound port to this file");
  cmd->add_option("--set", o.sets, "override an executor parameter, EXECUTOR.PARAM=VALUE; repeatable");
  return cmd;
}

int command_serve(ServeOptions o) {
  // SIGINT and SIGTERM are taken by sigwait() below: blocked here, before any thread exists, so that every
  // thread the flow and the gateway start inherits the mask and none of them is interrupted.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  FlowConfig config;
  try {
    config = load_flow_with_sets(o.flow, o.sets);
    o.gateway.token = read_token(o.token_file);
  } catch (const ConfigError& e) {
    print_config_error(e);
    return kExitUsage;
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitUsage;
  }
  o.gateway.request_timeout = std::chrono::milliseconds(o.request_timeout_ms);
  o.gateway.idle_timeout = std::chrono::milliseconds(o.idle_timeout_ms);

  Flow flow(std::move(config));
  auto gateway = Gateway::attach_to(flow);
  if (const int failed = start_flow(flow); failed != kExitOk) return failed;
  try {
    gateway->start(o.gateway);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    flow.close();
    return kExitUsage;
  }
  fmt::print(stderr, "flowline: serving {} on http://{}:{}\n", o.flow, o.gateway.host, gateway->port());
  if (!o.ready_file.empty()) {
    std::ofstream(o.ready_file) << gateway->port() << "\n";
  }
  int signal = 0;
  sigwait(&stop_signals, &signal);
  fmt::print(stderr, "flowline: {} received: draining ({} requests in flight)\n",
             signal == SIGINT ? "SIGINT" : "SIGTERM", gateway->stats().in_flight);
  gateway->stop();
  flow.close();
  const GatewayStats stats = gateway->stats();
  fmt::print(stderr, "flowline: stopped after {} requests ({} documents)\n", stats.requests, stats.documents);
  return kExitOk;
}

}  // namespace flowline::cli
