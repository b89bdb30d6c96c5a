// `flowline serve`: a flow behind flowline::Gateway until SIGINT/SIGTERM.
#include "serve.hpp"

#include "launcher.hpp"
#include "outputs.hpp"

#include "flowline/error.hpp"
#include "flowline/executor_server.hpp"
#include "flowline/flow.hpp"
#include "flowline/io.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <dlfcn.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <pthread.h>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

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

// The option of one row of the settings table (serve_settings.hpp), stored only when given so that the
// flow file's key applies otherwise; the default shown is GatewayOptions', the bounds are the row's.
void add_setting(CLI::App& cmd, ServeSettings& given, const ServeSetting& setting) {
  std::string help(setting.help);
  if (!setting.key.empty() && !setting.key_by_hand) help += fmt::format(" Flow file: with.{}.", setting.key);
  if (setting.key == "port") help += " Flow file: with.port.";  // Jina's form: one port per protocol
  std::visit(
      [&](const auto& member) {
        auto& field = given.*member.given;
        using Given = typename std::decay_t<decltype(field)>::value_type;
        CLI::Option* option = nullptr;
        if constexpr (std::is_same_v<Given, std::chrono::milliseconds>) {
          option = cmd.add_option_function<long long>(
              std::string(setting.flag), [&field](long long ms) { field = std::chrono::milliseconds(ms); }, help);
        } else {
          option = cmd.add_option_function<Given>(
              std::string(setting.flag), [&field](const Given& v) { field = v; }, help);
        }
        option->default_str(serve_default(setting));
        if constexpr (std::is_same_v<Given, int>) {
          option->check(CLI::Range(static_cast<int>(setting.minimum), static_cast<int>(setting.maximum)));
        } else if constexpr (!std::is_same_v<Given, std::string> && !std::is_same_v<Given, bool>) {
          if (setting.minimum >= 1) {
            option->check(CLI::PositiveNumber);
          } else {
            option->check(CLI::NonNegativeNumber);
          }
        }
      },
      setting.field);
}

// How long jemalloc keeps the pages a server frees before it returns them, in ms (the launcher's
// default is jemalloc's 10 s, which `flowline run` keeps). A server frees request bodies, parsed documents
// and answers of up to --max-body-bytes each, many at once under load; kept for 10 s they came on top of the
// fronts' bounds: 30 gRPC streams of 30 MB messages peaked at 3.6-4.7 GiB against 3 GiB (docs/benchmarks.md,
// "the launcher's decay under serve"). Over 1 s they are still reused by the next requests of a busy
// server, and by an encoder's next batch, which frees and takes the same sizes within milliseconds.
constexpr long kServeDecayMs = 1000;

// Sets jemalloc's decay for serving, for the arenas there are and those made later. Through dlsym: the
// launcher links jemalloc only into the executable (src/CMakeLists.txt); without it (glibc's malloc, a
// sanitizer build) there is no mallctl and nothing to do. MALLOC_CONF naming a decay wins, as it does
// for the launcher's other settings.
void set_serving_decay() {
  using Mallctl = int (*)(const char*, void*, std::size_t*, void*, std::size_t);
  const auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  if (!mallctl) return;
  if (const char* conf = std::getenv("MALLOC_CONF");
      conf && std::string_view(conf).find("decay_ms") != std::string_view::npos)
    return;
  unsigned arenas = 0;
  std::size_t size = sizeof(arenas);
  if (mallctl("arenas.narenas", &arenas, &size, nullptr, 0) != 0) return;
  // Muzzy pages (returned with MADV_FREE) still count in RSS until the kernel wants them: none are kept.
  for (const auto& [key, ms] : {std::pair{"dirty_decay_ms", kServeDecayMs}, std::pair{"muzzy_decay_ms", 0L}}) {
    auto decay = static_cast<ssize_t>(ms);
    mallctl(fmt::format("arenas.{}", key).c_str(), nullptr, nullptr, &decay, sizeof(decay));  // arenas made later
    // Arenas not initialized yet refuse (EFAULT); they take the value above when they are.
    for (unsigned i = 0; i < arenas; ++i) {
      mallctl(fmt::format("arena.{}.{}", i, key).c_str(), nullptr, nullptr, &decay, sizeof(decay));
    }
  }
}

}  // namespace

CLI::App* add_serve_command(CLI::App& app, ServeOptions& o) {
  auto* cmd =
      app.add_subcommand("serve", "Serve a flow over HTTP: Jina's, OpenAI's and TEI's APIs, /health, /ready, /metrics");
  cmd->add_option("flow", o.flow, "flow file (YAML)")->required()->check(CLI::ExistingFile);
  // The gateway's settings, one option per row of the settings table that has a flag.
  for (const ServeSetting& setting : serve_settings()) {
    if (!setting.flag.empty()) add_setting(*cmd, o.given, setting);
  }
  cmd->add_option("--token-file", o.token_file,
                  "require \"Authorization: Bearer TOKEN\" with the token in this file (else FLOWLINE_TOKEN, if set)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--ready-file", o.ready_file, "once serving, write the bound port to this file");
  cmd->add_option("--set", o.sets, "override an executor parameter, EXECUTOR.PARAM=VALUE; repeatable");
  cmd->add_option("--executor", o.executor,
                  "serve this executor alone to other flows (their `hosts:`) over the binary protocol on --port "
                  "(default 9000); see docs/remote-executors.md");
  cmd->add_option("--http-port", o.http_port, "with --executor: also serve HTTP (health, ready, metrics) on this port")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--max-frame-bytes", o.max_frame_bytes, "with --executor: larger frames close the connection")
      ->check(CLI::Range(std::size_t{64}, std::size_t{0xFFFFFFFFu}))
      ->default_str(std::to_string(o.max_frame_bytes));
  cmd->add_option("--max-partial-frame-bytes", o.max_partial_frame_bytes,
                  "with --executor: what all connections' partly read frames may hold together; past it reads "
                  "wait (at least a quarter of --max-frame-bytes)")
      ->check(CLI::PositiveNumber)
      ->default_str(std::to_string(o.max_partial_frame_bytes));
  cmd->footer("\nRoutes (docs/serving.md):\n" + gateway_routes());
  cmd->add_flag("--overwrite", o.overwrite,
                "replace the files the flow's writers write when they exist (else serve refuses to start)");
  cmd->add_option("--max-output-bytes", o.max_output_bytes,
                  "what each file the flow's writers write may hold; later requests are refused (0: no bound)")
      ->default_str(std::to_string(o.max_output_bytes));
  return cmd;
}

namespace {

// The bound port, and a second line with the gRPC port when the gateway serves both.
void write_ready_file(const std::string& file, std::uint16_t port, std::uint16_t grpc_port = 0) {
  if (file.empty()) return;
  const std::string partial = file + ".partial";  // written whole, then renamed: never seen half-written
  std::ofstream out(partial);
  out << port << "\n";
  if (grpc_port) out << grpc_port << "\n";
  out.close();
  std::error_code ignored;
  std::filesystem::rename(partial, file, ignored);
}

// `flowline serve FLOW --executor NAME`: the executor alone behind an ExecutorServer (and a Gateway on
// --http-port), until a stop signal.
int serve_executor(ServeOptions& o, FlowConfig config, const sigset_t& stop_signals) {
  ExecutorServerOptions options;
  GatewayOptions http;
  try {
    config = executor_flow(config, o.executor);
    if (!outputs_are_free(config, "", o.overwrite)) return kExitUsage;
    if (config.serve.host) options.host = *config.serve.host;
    if (o.given.host) options.host = *o.given.host;
    options.port = static_cast<std::uint16_t>(o.given.port.value_or(9000));
    if (o.given.threads && *o.given.threads > 0) options.threads = *o.given.threads;
    if (o.given.max_in_flight && *o.given.max_in_flight > 0) options.max_in_flight = *o.given.max_in_flight;
    if (o.given.max_connections) options.max_connections = *o.given.max_connections;
    options.max_frame_bytes = o.max_frame_bytes;
    options.max_partial_frame_bytes = o.max_partial_frame_bytes;
    options.token = read_token(o.token_file);
    http.host = options.host;
    http.token = options.token;
    http.port = static_cast<std::uint16_t>(o.http_port.value_or(0));
    // Requests of every connection wait in the executor's queue: room for them all, so that reading a
    // connection never blocks on another's backlog.
    config.options.queue_capacity = std::max(config.options.queue_capacity, options.max_in_flight * 16);
  } catch (const Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return kExitUsage;
  }
  Flow flow(std::move(config));
  std::shared_ptr<Gateway> gateway;
  if (o.http_port) gateway = Gateway::attach_to(flow);
  if (const int failed = start_flow(flow); failed != kExitOk) return failed;
  ExecutorServer server(flow, o.executor);
  try {
    server.start(options);
    if (gateway) gateway->start(http);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    server.stop();
    flow.close();
    return kExitUsage;
  }
  fmt::print(stderr, "flowline: serving executor '{}' of {} on {}:{}{}\n", o.executor, o.flow, options.host,
             server.port(), gateway ? fmt::format(" (HTTP on port {})", gateway->port()) : "");
  write_ready_file(o.ready_file, server.port());
  int signal = 0;
  sigwait(&stop_signals, &signal);
  const ExecutorServerStats before = server.stats();
  fmt::print(stderr, "flowline: {} received: draining ({} requests in flight)\n",
             signal == SIGINT ? "SIGINT" : "SIGTERM", before.in_flight);
  if (gateway) gateway->stop();
  server.stop();
  flow.close();
  const ExecutorServerStats stats = server.stats();
  fmt::print(stderr, "flowline: stopped after {} requests ({} documents); {} connections closed for protocol errors\n",
             stats.requests, stats.documents, stats.protocol_errors);
  return kExitOk;
}

}  // namespace

int command_serve(ServeOptions o) {
  // SIGINT and SIGTERM are taken by sigwait() below: blocked here, before any thread exists, so that every
  // thread the flow and the gateway start inherits the mask and none of them is interrupted.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  set_serving_decay();

  FlowConfig config;
  GatewayOptions options;
  try {
    config = load_flow_with_sets(o.flow, o.sets);
    config.options.max_output_bytes = o.max_output_bytes;
    if (!o.executor.empty()) return serve_executor(o, std::move(config), stop_signals);
    if (!outputs_are_free(config, "", o.overwrite)) return kExitUsage;
    options.apply(config.serve);
    options.apply(o.given);
    options.token = read_token(o.token_file);
  } catch (const Error& e) {
    print_load_error(e);
    return kExitUsage;
  }

  Flow flow(std::move(config));
  auto gateway = Gateway::attach_to(flow);
  if (const int failed = start_flow(flow); failed != kExitOk) return failed;
  try {
    gateway->start(options);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    flow.close();
    return kExitUsage;
  }
  if (options.http) fmt::print(stderr, "flowline: serving {} on http://{}:{}\n", o.flow, options.host, gateway->port());
  if (options.grpc_port)
    fmt::print(stderr, "flowline: serving {} on grpc://{}:{}\n", o.flow, options.host, gateway->grpc_port());
  if (options.http)
    write_ready_file(o.ready_file, gateway->port(), gateway->grpc_port());
  else
    write_ready_file(o.ready_file, gateway->grpc_port());
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
