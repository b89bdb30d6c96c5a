// flowline/serve_settings.hpp — the gateway's settings, declared once: GatewayOptions (what a Gateway runs
// with), ServeSettings (what a flow file's `with:` keys or `flowline serve`'s options set) and
// serve_settings(), the table with one row per setting — its flow-file key, its command-line flag, its help,
// its two members and the front that applies it. The table drives `flowline serve`'s options,
// GatewayOptions::apply (gateway.hpp) and docs/serving.md's limits table (gateway_limits_table(), checked by
// a test), and is what the flow schema's with.gateway keys are checked against. A new setting is one member
// in each struct and one row.
//
// Plain data, kept apart from the Flow's options: the flow file parser (flow_config.hpp) fills
// FlowConfig::serve, and the gateway applies it, after which the command line's options override it. A Flow
// run in process (`flowline run`, Flow::post) never reads it. The table is constant: any thread may read it.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

namespace flowline {

// Unset fields leave the gateway's defaults (GatewayOptions); the command line overrides what is set here.
struct ServeSettings {
  std::optional<std::string> host;
  std::optional<int> port;       // HTTP's, 0..65535
  std::optional<bool> http;      // serve HTTP (with.protocol lists http, or lists no protocol)
  std::optional<int> grpc_port;  // serve Jina's gRPC on this port (with.protocol lists grpc; --grpc-port)
  std::optional<std::string> title;
  std::optional<int> threads;
  std::optional<std::size_t> max_body_bytes;
  std::optional<std::size_t> max_documents;
  std::optional<std::size_t> max_json_depth;
  std::optional<std::size_t> max_in_flight;  // requests inside the flow at once (not FlowOptions::max_in_flight)
  std::optional<std::size_t> max_connections;
  std::optional<std::size_t> max_stream_documents;
  std::optional<std::chrono::milliseconds> request_timeout;
  std::optional<std::chrono::milliseconds> idle_timeout;
  std::optional<std::string> embeddings_endpoint;
  std::optional<std::size_t> grpc_memory_bytes;
};

// The gateway's options, grouped by who applies them: the core (every front: admission, the timeout, the
// token, the size of a request), the HTTP front, and the gRPC front. An option of one front has no effect
// on the other; docs/serving.md's table says the same per option.
struct GatewayOptions {
  // Where and what to serve.
  std::string host = "127.0.0.1";          // the address to bind; "0.0.0.0" or "::" to serve other machines
  std::uint16_t port = 8080;               // HTTP's; 0: a free port, chosen by the system (Gateway::port() says which)
  bool http = true;                        // serve HTTP on `port`
  std::optional<std::uint16_t> grpc_port;  // serve Jina's gRPC on this port too (0: a free one); see grpc_available()
  int threads = 0;                         // I/O threads (HTTP's sockets, the core's timers); 0: one per core

  // Every front (the core).
  std::size_t max_body_bytes = 32u << 20;  // an HTTP body or a gRPC message; larger: 413 / RESOURCE_EXHAUSTED
  std::size_t max_documents = 4096;        // documents (or inputs) per request; more: 413 / RESOURCE_EXHAUSTED
  std::size_t max_in_flight = 0;  // requests inside the flow at once; more: 503 / UNAVAILABLE (0: the flow's queue
                                  // capacity, else its max_in_flight)
  std::chrono::milliseconds request_timeout{60'000};  // a request not answered by then: 504 / DEADLINE_EXCEEDED
  std::string token;  // when not empty, requests other than /health and /ready need "Authorization: Bearer <token>"
                      // (gRPC: metadata "authorization: Bearer <token>")
  // A connection silent this long closes (HTTP: mid-request too; gRPC: without a call open, as gRPC's
  // max_connection_idle).
  std::chrono::milliseconds idle_timeout{60'000};

  // HTTP only.
  std::size_t max_json_depth = 64;                // deeper JSON gets 400
  std::size_t max_connections = 10'000;           // connections beyond it are closed at once
  std::size_t max_stream_documents = 10'000'000;  // documents in one NDJSON stream; beyond, an error line ends it
  std::string embeddings_endpoint = "/encode";    // the flow endpoint of /v1/embeddings and /embed requests
  std::string title = "flowline";                 // in /openapi.json and /docs

  // gRPC only: the memory gRPC may use for its connections and messages (gRPC's resource quota; 0: none).
  // gRPC C++ 1.51 has no bound on the number of connections: under this bound it shrinks their buffers and
  // closes idle ones first. Each connection also holds at most 256 streams.
  std::size_t grpc_memory_bytes = 1u << 30;

  // Replaces the fields that `settings` sets (the flow file's `with:` keys, or the command line's options):
  // every row of serve_settings(). Defined in flowline::gateway.
  void apply(const ServeSettings& settings);
};

// Which front applies a setting (docs/serving.md's "fronts" column): the core is every front's ("both").
enum class ServeFront { Core, Http, Grpc };

// How a setting's value reads and shows: a count (4,096), a size in bytes (32 MiB), milliseconds (the
// flow file's key ends in _ms, the option takes a number), text, a port.
enum class ServeUnit { Count, Bytes, Millis, Text, Port };

// A setting's two members: the ServeSettings field that is set, and the GatewayOptions field it replaces.
template <class Given, class Option>
struct ServeMember {
  std::optional<Given> ServeSettings::*given;
  Option GatewayOptions::*option;
};
using ServeField = std::variant<ServeMember<std::string, std::string>, ServeMember<int, std::uint16_t>,
                                ServeMember<int, std::optional<std::uint16_t>>, ServeMember<bool, bool>,
                                ServeMember<int, int>, ServeMember<std::size_t, std::size_t>,
                                ServeMember<std::chrono::milliseconds, std::chrono::milliseconds>>;

// One setting.
struct ServeSetting {
  std::string_view key;      // under the flow file's `with:` ("gateway.max_documents"); empty: not a flow-file key
  std::string_view flag;     // `flowline serve`'s option ("--max-documents"; "--port,-p"); empty: none
  std::string_view help;     // one or two sentences, for `serve --help`, the schema and docs/serving.md
  std::string_view example;  // the schema's example ("max_documents: 1024")
  std::string_view beyond;   // docs/serving.md's limits table: what happens beyond it; empty: not a limit
  ServeFront front;
  ServeUnit unit;
  ServeField field;
  double minimum = 0;  // the value's bounds, on the command line and in the flow file
  double maximum = std::numeric_limits<double>::infinity();
  // The default as docs/serving.md words it, where the value alone would mislead (max_in_flight's 0).
  std::string_view shown = {};
  // The flow-file key has its own reading in the schema (Jina's with.port list, with.protocol).
  bool key_by_hand = false;
};

namespace serve_settings_detail {
using S = ServeSettings;
using O = GatewayOptions;
using std::chrono::milliseconds;
inline constexpr double kPortMax = 65535;
// clang-format off
inline constexpr std::array kServeSettings{
    ServeSetting{"port", "--port,-p", "Port to bind (0: any free one, see --ready-file).", "port: [8080, 12345]", "",
                 ServeFront::Http, ServeUnit::Port, ServeMember<int, std::uint16_t>{&S::port, &O::port}, 0, kPortMax,
                 {}, true},
    ServeSetting{"host", "--host", "Address `flowline serve` binds; 0.0.0.0 or :: serves other machines.",
                 "host: 0.0.0.0", "— (`0.0.0.0` or `::` serves other machines)", ServeFront::Core, ServeUnit::Text,
                 ServeMember<std::string, std::string>{&S::host, &O::host}},
    ServeSetting{"protocol", "", "Protocols `flowline serve` speaks: http, grpc (Jina's gRPC, which Jina's Client uses by default) or both; "
                 "with.port lists their ports in the same order.", "protocol: [http, grpc]", "",
                 ServeFront::Http, ServeUnit::Text, ServeMember<bool, bool>{&S::http, &O::http}, 0, 1, {}, true},
    ServeSetting{"", "--grpc-port",
                 "Also serve Jina's gRPC protocol (what Jina's Client speaks by default) on this port (0: any free "
                 "one); flow file: with.protocol and with.port.", "", "", ServeFront::Grpc, ServeUnit::Port,
                 ServeMember<int, std::optional<std::uint16_t>>{&S::grpc_port, &O::grpc_port}, 0, kPortMax, "off"},
    ServeSetting{"title", "", "Title of the API in /openapi.json and /docs.", "title: Embeddings", "",
                 ServeFront::Http, ServeUnit::Text, ServeMember<std::string, std::string>{&S::title, &O::title}},
    ServeSetting{"gateway.threads", "--threads", "I/O threads; 0: one per core.", "threads: 4", "", ServeFront::Core,
                 ServeUnit::Count, ServeMember<int, int>{&S::threads, &O::threads}, 0, 1024},
    ServeSetting{"gateway.max_body_bytes", "--max-body-bytes", "Larger request bodies get 413.",
                 "max_body_bytes: 1048576",
                 "413, connection closed (the body is not read; `Expect: 100-continue` is answered 413 before it is "
                 "sent); gRPC: `RESOURCE_EXHAUSTED`", ServeFront::Core, ServeUnit::Bytes,
                 ServeMember<std::size_t, std::size_t>{&S::max_body_bytes, &O::max_body_bytes}, 1},
    ServeSetting{"gateway.max_documents", "--max-documents", "Documents per request; more get 413.",
                 "max_documents: 1024", "413 naming the limit; gRPC: `RESOURCE_EXHAUSTED`", ServeFront::Core,
                 ServeUnit::Count, ServeMember<std::size_t, std::size_t>{&S::max_documents, &O::max_documents}, 1},
    ServeSetting{"gateway.max_json_depth", "--max-json-depth", "Deeper JSON gets 400.", "max_json_depth: 16",
                 "400 naming the depth and byte", ServeFront::Http, ServeUnit::Count,
                 ServeMember<std::size_t, std::size_t>{&S::max_json_depth, &O::max_json_depth}, 1},
    ServeSetting{"gateway.max_in_flight", "--max-in-flight",
                 "Requests inside the flow at once; more get 503 with Retry-After. 0: the flow's queue capacity.",
                 "max_in_flight: 256",
                 "503 with `Retry-After: 1`; the probes still answer. gRPC: a stream's request waits for a slot (its "
                 "window of 16 holds the client back)", ServeFront::Core, ServeUnit::Count,
                 ServeMember<std::size_t, std::size_t>{&S::max_in_flight, &O::max_in_flight}, 0,
                 std::numeric_limits<double>::infinity(),
                 "the flow's queue capacity (`queue_capacity`, else `max_in_flight`: 64)"},
    ServeSetting{"gateway.max_connections", "--max-connections",
                 "Open HTTP connections; more are closed at once (gRPC: see grpc_memory_bytes).",
                 "max_connections: 1000", "new connections are closed at once", ServeFront::Http, ServeUnit::Count,
                 ServeMember<std::size_t, std::size_t>{&S::max_connections, &O::max_connections}, 1},
    ServeSetting{"gateway.max_stream_documents", "--max-stream-documents",
                 "Documents in one streamed (NDJSON) request; the stream ends with an error line beyond it.",
                 "max_stream_documents: 1000000", "an error line (413) ends the stream", ServeFront::Http,
                 ServeUnit::Count,
                 ServeMember<std::size_t, std::size_t>{&S::max_stream_documents, &O::max_stream_documents}, 1},
    ServeSetting{"gateway.request_timeout_ms", "--request-timeout", "Milliseconds a request may take; then 504.",
                 "request_timeout_ms: 5000",
                 "504; the connection stays usable; gRPC: `DEADLINE_EXCEEDED` (or the client's deadline, when "
                 "nearer)", ServeFront::Core, ServeUnit::Millis,
                 ServeMember<milliseconds, milliseconds>{&S::request_timeout, &O::request_timeout}, 1},
    ServeSetting{"gateway.idle_timeout_ms", "--idle-timeout",
                 "Milliseconds a connection may stay silent; then it closes.", "idle_timeout_ms: 10000",
                 "the connection is closed (HTTP: also one that stops mid-request; gRPC: one without a call open)",
                 ServeFront::Core, ServeUnit::Millis,
                 ServeMember<milliseconds, milliseconds>{&S::idle_timeout, &O::idle_timeout}, 1},
    ServeSetting{"gateway.embeddings_endpoint", "--embeddings-endpoint",
                 "The flow endpoint that /v1/embeddings and /embed post to.", "embeddings_endpoint: /encode", "",
                 ServeFront::Http, ServeUnit::Text,
                 ServeMember<std::string, std::string>{&S::embeddings_endpoint, &O::embeddings_endpoint}},
    ServeSetting{"gateway.grpc_memory_bytes", "--grpc-memory-bytes",
                 "Memory the gRPC front's connections and messages may use (gRPC's resource quota; 0: no bound). "
                 "Under it gRPC shrinks their buffers and closes idle connections; it must hold two messages of "
                 "max_body_bytes.", "grpc_memory_bytes: 268435456",
                 "gRPC's resource quota over its connections and messages: under pressure gRPC shrinks their buffers "
                 "and closes idle connections first (gRPC C++ 1.51 has no bound on the count of connections); each "
                 "connection holds at most 256 calls. At least 2 × `--max-body-bytes`", ServeFront::Grpc,
                 ServeUnit::Bytes, ServeMember<std::size_t, std::size_t>{&S::grpc_memory_bytes, &O::grpc_memory_bytes}},
};
// clang-format on
}  // namespace serve_settings_detail

// Every setting, in the order of the flow schema (docs/yaml-reference.md).
inline constexpr const auto& serve_settings() noexcept { return serve_settings_detail::kServeSettings; }

// A setting's default as the schema and `serve --help` show it: GatewayOptions' value ("33554432", "60000",
// "127.0.0.1"; "off" where the option is unset).
inline std::string serve_default(const ServeSetting& setting) {
  const GatewayOptions defaults;
  return std::visit(
      [&](const auto& member) -> std::string {
        const auto& value = defaults.*member.option;
        using V = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<V, std::string>) {
          return value;
        } else if constexpr (std::is_same_v<V, std::chrono::milliseconds>) {
          return std::to_string(value.count());
        } else if constexpr (std::is_same_v<V, std::optional<std::uint16_t>>) {
          return value ? std::to_string(*value) : std::string(setting.shown.empty() ? "off" : setting.shown);
        } else if constexpr (std::is_same_v<V, bool>) {
          return value ? "true" : "false";
        } else {
          return std::to_string(value);
        }
      },
      setting.field);
}

}  // namespace flowline
