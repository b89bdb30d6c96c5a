// The flow YAML schema: one table of every key, its type, its target and its documentation. The parser
// (flow_parse.cpp) loops over it and `flowline schema` prints it, so the reference cannot drift.
#include "flowline/flow_config.hpp"

#include "python_workers.hpp"

#include <boost/json/array.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <type_traits>
#include <utility>
#include <variant>

namespace flowline {
namespace {

using Result = std::optional<std::string>;

std::vector<std::string> strings(const boost::json::value& value) {
  std::vector<std::string> out;
  for (const auto& item : value.get_array()) out.emplace_back(item.get_string());
  return out;
}

SchemaKey key(std::string path, SchemaValue value, double minimum, std::string type, std::string default_value,
              std::string help, std::string example, SchemaKey::Assign assign) {
  if (value == SchemaValue::Int) type = fmt::format("int >= {}", minimum);
  if (value == SchemaValue::IntOrAuto) type = fmt::format("int >= {} or auto", minimum);
  if (value == SchemaValue::Number) type = fmt::format("number >= {}", minimum);
  return SchemaKey{
      std::move(path), std::move(type), std::move(default_value), std::move(help), std::move(example), value,
      minimum,         assign};
}

using V = SchemaValue;

// The top-level keys and the flow-wide options.
std::vector<SchemaKey> flow_keys() {
  return {
      key("jtype", V::String, 0, "string", "Flow", "Accepted for Jina compatibility; must be 'Flow' when present.",
          "jtype: Flow",
          [](FlowConfig&, ExecutorConfig*, const boost::json::value& v) -> Result {
            if (v.get_string() == "Flow") return std::nullopt;
            return fmt::format("expected 'Flow', got '{}'", std::string_view(v.get_string()));
          }),
      key("with", V::Map, 0, "map", "{}", "Flow-wide options (the keys below).", "with: {request_size: 64}", nullptr),
      key("with.request_size", V::Int, 1, "", "100",
          "Documents per request the client sends (Jina's request_size). The launcher's --request-size overrides it.",
          "request_size: 32",
          [](FlowConfig& f, ExecutorConfig*, const boost::json::value& v) -> Result {
            f.options.request_size = static_cast<std::size_t>(v.get_int64());
            return std::nullopt;
          }),
      key("with.endpoint", V::String, 0, "string", "/",
          "The endpoint `flowline run` posts the input to (an indexing flow's /index); its --endpoint overrides it.",
          "endpoint: /index",
          [](FlowConfig& f, ExecutorConfig*, const boost::json::value& v) -> Result {
            std::string endpoint(v.get_string());
            if (endpoint.empty() || endpoint.front() != '/')
              return fmt::format("expected an endpoint starting with '/', got '{}'", endpoint);
            f.options.endpoint = std::move(endpoint);
            return std::nullopt;
          }),
      key("with.max_in_flight", V::Int, 1, "", "64",
          "Requests of one post inside the flow at once (Jina's prefetch); bounds memory on endless inputs.",
          "max_in_flight: 16",
          [](FlowConfig& f, ExecutorConfig*, const boost::json::value& v) -> Result {
            f.options.max_in_flight = static_cast<std::size_t>(v.get_int64());
            return std::nullopt;
          }),
      key("with.queue_capacity", V::Int, 0, "", "0",
          "Requests that may wait in front of each executor; 0 means max_in_flight.", "queue_capacity: 8",
          [](FlowConfig& f, ExecutorConfig*, const boost::json::value& v) -> Result {
            f.options.queue_capacity = static_cast<std::size_t>(v.get_int64());
            return std::nullopt;
          }),
      key("plugins", V::StringList, 0, "list of strings", "[]",
          "Shared libraries with executors: a path (relative to the flow file's folder) or a name searched in "
          "FLOWLINE_PLUGIN_PATH as NAME, libNAME.so or NAME.so.",
          "plugins: [libmy_executors.so]",
          [](FlowConfig& f, ExecutorConfig*, const boost::json::value& v) -> Result {
            f.plugins = strings(v);
            return std::nullopt;
          }),
      key("executors", V::Special, 0, "list of maps", "(required)",
          "The executors, in order. Each is a map with the keys below.",
          "executors:\n  - name: splitter\n    uses: TextSplitter", nullptr),
  };
}

// with.protocol: which fronts `flowline serve` runs, each on the with.port entry of its place (read
// before this key, in schema order).
Result set_protocols(FlowConfig& f, ExecutorConfig*, const boost::json::value& v) {
  ServeSettings& serve = f.serve;
  std::vector<int> ports;  // as with.port gave them, in order
  if (serve.port) ports.push_back(*serve.port);
  if (serve.grpc_port) ports.push_back(*serve.grpc_port);
  const auto& list = v.get_array();
  if (list.empty()) return std::string("expected http, grpc or a list of them, got an empty list");
  if (ports.size() > 1 && ports.size() != list.size())
    return fmt::format("{} protocols but {} ports in with.port: give one port per protocol, in the same order",
                       list.size(), ports.size());
  serve.http = false;
  serve.port.reset();
  serve.grpc_port.reset();
  for (std::size_t i = 0; i < list.size(); ++i) {
    std::string name(list[i].get_string());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    const std::optional<int> port = i < ports.size() ? std::optional<int>(ports[i]) : std::nullopt;
    if (name == "http") {
      if (*serve.http) return std::string("http is listed twice");
      serve.http = true;
      serve.port = port;
    } else if (name == "grpc") {
      if (serve.grpc_port) return std::string("grpc is listed twice");
      if (!port) return std::string("grpc needs its port: with.port lists one port per protocol, in the same order");
      serve.grpc_port = port;
    } else {
      return fmt::format("'{}' is not served: flowline speaks http and grpc (no websocket)", name);
    }
  }
  return std::nullopt;
}

// Jina's with.port and with.protocol, read by their own code: a port per protocol, in the same order.
SchemaKey jina_key(std::string_view name) {
  if (name == "port") {
    return key("with.port", V::StringOrList, 0, "port or list of ports", "8080",
               "Port `flowline serve` binds (0: any free one), or one port per entry of with.protocol, in its order "
               "(Jina's form). --port and --grpc-port override them.",
               "port: [8080, 12345]", [](FlowConfig& f, ExecutorConfig*, const boost::json::value& v) -> Result {
                 const auto& list = v.get_array();
                 if (list.empty()) return std::string("expected a port or a list of ports, got an empty list");
                 f.serve.port.reset();
                 f.serve.grpc_port.reset();
                 std::vector<int> ports;
                 for (const auto& p : list) {
                   const std::string_view text = p.get_string();
                   int port = -1;
                   const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
                   if (ec != std::errc() || end != text.data() + text.size() || port < 0 || port > 65535)
                     return fmt::format("expected a port from 0 to 65535, got '{}'", text);
                   ports.push_back(port);
                 }
                 // Paired with with.protocol's entries when it is read (it comes after this key); without it,
                 // the first port is HTTP's and a second gRPC's.
                 f.serve.port = ports[0];
                 if (ports.size() > 1) f.serve.grpc_port = ports[1];
                 if (ports.size() > 2)
                   return fmt::format("expected at most 2 ports (http and grpc), got {}", ports.size());
                 return std::nullopt;
               });
  }
  return key(
      "with.protocol", V::StringOrList, 0, "string or list", "http",
      "Protocols `flowline serve` speaks: http, grpc (Jina's gRPC, which Jina's Client uses by default) or both; "
      "with.port lists their ports in the same order.",
      "protocol: [http, grpc]", &set_protocols);
}

// with.KEY of row I of the gateway's settings table (flowline/serve_settings.hpp) into its ServeSettings
// member; the parser checks the minimum (the key's `minimum`), this the maximum.
template <std::size_t I>
Result set_setting(FlowConfig& f, ExecutorConfig*, const boost::json::value& v) {
  const ServeSetting& row = serve_settings()[I];
  return std::visit(
      [&](const auto& member) -> Result {
        auto& field = f.serve.*member.given;
        using Given = typename std::decay_t<decltype(field)>::value_type;
        if constexpr (std::is_same_v<Given, std::string>) {
          field = std::string(v.get_string());
        } else if constexpr (std::is_same_v<Given, bool>) {
          field = v.get_bool();
        } else {
          if (static_cast<double>(v.get_int64()) > row.maximum)
            return fmt::format("expected at most {} {}, got {}", row.maximum, row.key.substr(row.key.rfind('.') + 1),
                               v.get_int64());
          field = Given(v.get_int64());
        }
        return std::nullopt;
      },
      row.field);
}

// The schema key of row I: Jina's keys by hand, the others from the row (help, default, example, bounds;
// a flow-level key says which option overrides it, with.gateway says so for all of its keys).
template <std::size_t I>
void add_setting_key(std::vector<SchemaKey>& keys) {
  const ServeSetting& row = serve_settings()[I];
  if (row.key.empty()) return;
  if (row.key_by_hand) return keys.push_back(jina_key(row.key));
  const bool gateway = row.key.starts_with("gateway.");
  if (gateway && keys.back().path != "with.gateway" && !keys.back().path.starts_with("with.gateway.")) {
    keys.push_back(key("with.gateway", V::Map, 0, "map", "{}",
                       "Limits of `flowline serve` (the keys below); each --option of the same name overrides its key.",
                       "gateway: {max_documents: 1024, request_timeout_ms: 5000}", nullptr));
  }
  std::string help(row.help);
  if (!gateway && !row.flag.empty()) help += fmt::format(" {} overrides it.", row.flag);
  const bool text = row.unit == ServeUnit::Text;
  keys.push_back(key(fmt::format("with.{}", row.key), text ? V::String : V::Int, row.minimum, text ? "string" : "",
                     serve_default(row), std::move(help), std::string(row.example), &set_setting<I>));
}

// The keys `flowline serve` reads (ServeSettings), one per row of the settings table that has one, in its
// order. The command line overrides each.
std::vector<SchemaKey> serve_keys() {
  std::vector<SchemaKey> keys;
  [&]<std::size_t... I>(std::index_sequence<I...>) { (add_setting_key<I>(keys), ...); }
  (std::make_index_sequence<serve_settings().size()>());
  return keys;
}

template <std::chrono::milliseconds RemoteOptions::*field>
Result set_remote_millis(FlowConfig&, ExecutorConfig* e, const boost::json::value& v) {
  e->remote.*field = std::chrono::milliseconds(v.get_int64());
  return std::nullopt;
}

// The keys of a Python executor (Jina's `uses: Class` with `py_modules:`; docs/python.md), after `uses`.
std::vector<SchemaKey> python_executor_keys() {
  return {
      key("executors[].py_modules", V::StringOrList, 0, "string or list of strings", "[]",
          "Python files (relative to the flow file) that define the class `uses` names, a flowline.Executor or "
          "an unmodified Jina 3 Executor: the flow runs each replica in a worker process of its own, restarted "
          "when it crashes (see docs/python.md).",
          "py_modules: [executors.py]",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->py_modules = strings(v);
            if (e->py_modules.empty()) return std::string("name at least one Python file");
            return std::nullopt;
          }),
      key("executors[].python", V::String, 0, "string", "FLOWLINE_PYTHON, else the build's Python, else python3",
          "The Python interpreter that runs a py_modules executor's workers (one with jina for a Jina 3 class).",
          "python: .venv-clients/bin/python",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->python = v.get_string();
            return std::nullopt;
          }),
      key("executors[].shared_memory", V::String, 0, "bytes, a size (64MiB, 512KiB, 1GiB) or off",
          "FLOWLINE_SHARED_MEMORY_BYTES, else 64MiB",
          "A py_modules executor's shared memory for tensors: the segment each of its worker connections gets; a "
          "request's tensors of 16 KiB or more cross through it instead of the socket (docs/python.md). 0 or off: "
          "none. At least 64KiB, at most 16GiB; its pages take memory as tensors fill them, per worker.",
          "shared_memory: 256MiB",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            const detail::SharedMemorySize size = detail::parse_shared_memory(v.get_string());
            if (!size.problem.empty()) return size.problem;
            e->shared_memory = size.bytes;
            return std::nullopt;
          }),
  };
}

// The keys of one executor.
std::vector<SchemaKey> executor_keys() {
  return {
      key("executors[].name", V::String, 0, "string", "(required)", "Unique name of this executor in the flow.",
          "name: encoder",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->name = v.get_string();
            return std::nullopt;
          }),
      key("executors[].uses", V::String, 0, "string", "(required)",
          "Registered executor type (see `flowline executors`).", "uses: SentenceEncoder",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->uses = v.get_string();
            return std::nullopt;
          }),
      key("executors[].with", V::Special, 0, "map", "{}",
          "Parameters of the executor type, checked against its declaration (types, choices, bounds, required, "
          "defaults). Relative paths (parameters of type path) are relative to the flow file's folder.",
          "with: {device: cuda, batch_size: 64}", nullptr),
      key("executors[].replicas", V::IntOrAuto, 1, "", "1",
          "Instances of this executor, each on its own thread, all fed from one queue. auto: as many per GPU "
          "as the executor type says runs it best (SentenceEncoder: 4; see its section below or `flowline "
          "executors`), one per CPU device, at most the type's limit.",
          "replicas: 2",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->auto_replicas = v.is_string();
            if (e->auto_replicas) return std::nullopt;  // resolved by validation, which knows the devices
            if (v.get_int64() > 1 << 20) return fmt::format("expected at most {} replicas", 1 << 20);
            e->replicas = static_cast<int>(v.get_int64());
            return std::nullopt;
          }),
      key("executors[].shards", V::Int, 1, "", "1",
          "Parts the executor's data is split into, for types that can be sharded (VectorIndex): each shard "
          "has `replicas` replicas and its own data (an index's workspace gets a folder per shard). Documents "
          "are routed to one shard by their id (VectorIndex: /index, /update, /delete); other requests go to "
          "every shard and their answers merge (/search: the best matches of all). With `devices`, shard i runs "
          "on devices[i % n]; with `hosts`, host i serves shard i (one host per shard).",
          "shards: 2",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            if (v.get_int64() > 1024) return std::string("expected at most 1024 shards");
            e->shards = static_cast<int>(v.get_int64());
            return std::nullopt;
          }),
      key("executors[].device", V::String, 0, "string", "cpu", "Device of the executor: cpu, cuda, cuda:N or auto.",
          "device: cuda:0",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->device = v.get_string();
            return std::nullopt;
          }),
      key("executors[].devices", V::StringOrList, 0, "list of strings, or all", "[]",
          "Devices the replicas are spread over, round-robin (replica i on devices[i % n]); `all`: every "
          "visible GPU. Replaces `device`.",
          "devices: [cuda:0, cuda:1]",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->devices = strings(v);
            if (e->devices.empty()) return std::string("name at least one device, or all");
            return std::nullopt;
          }),
      key("executors[].needs", V::StringOrList, 0, "string or list of strings", "the previous executor",
          "Executors whose output this one takes; several means a join (documents merged by id). [] takes the "
          "client's requests directly.",
          "needs: [encoder, tagger]",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->needs = strings(v);
            return std::nullopt;
          }),
      key("executors[].batching", V::Map, 0, "map", "{}", "Server-side dynamic batching (the keys below).",
          "batching: {max_batch_size: 256, max_delay_ms: 5}", nullptr),
      key("executors[].batching.max_batch_size", V::Int, 0, "", "0",
          "Merge waiting requests into batches of up to this many documents; 0 turns merging off.",
          "max_batch_size: 256",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->batching.max_batch_size = static_cast<std::size_t>(v.get_int64());
            return std::nullopt;
          }),
      key("executors[].batching.max_delay_ms", V::Number, 0, "", "under load",
          "How long a worker waits for more requests to fill a batch; 0: never. Not given: only while another "
          "replica runs a batch, up to 1/8 of the recent batch time (at most 1 ms).",
          "max_delay_ms: 2",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->batching.max_delay =
                std::chrono::microseconds(static_cast<std::int64_t>(v.to_number<double>() * 1000.0));
            return std::nullopt;
          }),
  };
}

// The keys of an executor that runs on other machines (`hosts:`, Jina's host/port/external, `remote:`).
std::vector<SchemaKey> remote_executor_keys() {
  return {
      key("executors[].hosts", V::StringOrList, 0, "list of host:port", "[]",
          "Executor servers that run this executor (`flowline serve FLOW --executor NAME --port P` on each), as "
          "HOST:PORT. Each host is served by remote.in_flight replicas of this flow, all fed from the executor's "
          "one queue; a host that is lost has its batches re-queued to the others and rejoins when it is back. "
          "replicas, device(s) and with are then the server's settings (see docs/remote-executors.md).",
          "hosts: [gpu-a:9000, gpu-b:9000]",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->hosts = strings(v);
            if (e->hosts.empty()) return std::string("name at least one host");
            for (const auto& h : e->hosts) {
              const auto colon = h.rfind(':');
              const std::string port = colon == std::string::npos ? "" : h.substr(colon + 1);
              const bool digits = !port.empty() && port.size() <= 5 &&
                                  std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
              if (colon == 0 || !digits || std::stoi(port) < 1 || std::stoi(port) > 65535)
                return fmt::format("'{}': expected HOST:PORT with a port from 1 to 65535", h);
            }
            return std::nullopt;
          }),
      key("executors[].host", V::String, 0, "string", "", "Jina's external executor: its host (with port).",
          "host: 10.0.0.5",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->hosts = {std::string(v.get_string())};
            return std::nullopt;
          }),
      key("executors[].port", V::Int, 1, "", "", "Jina's external executor: its port (with host).", "port: 9000",
          [](FlowConfig&, ExecutorConfig*, const boost::json::value& v) -> Result {
            if (v.get_int64() > 65535) return fmt::format("expected a port of at most 65535, got {}", v.get_int64());
            return std::nullopt;
          }),
      key("executors[].external", V::Bool, 0, "bool", "false",
          "Accepted for Jina compatibility: an executor with host and port runs elsewhere.", "external: true",
          [](FlowConfig&, ExecutorConfig*, const boost::json::value&) -> Result { return std::nullopt; }),
      key("executors[].remote", V::Map, 0, "map", "{}", "How this flow talks to the executor's hosts (the keys below).",
          "remote: {in_flight: 8, timeout_ms: 10000}", nullptr),
      key("executors[].remote.in_flight", V::Int, 1, "", "4",
          "Requests in flight per host (replicas of this flow sharing the host's connection).", "in_flight: 8",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            if (v.get_int64() > 1024) return fmt::format("expected at most 1024, got {}", v.get_int64());
            e->remote.in_flight = static_cast<std::size_t>(v.get_int64());
            return std::nullopt;
          }),
      key("executors[].remote.connections", V::Int, 1, "", "1",
          "Connections to each host, each with `in_flight` replicas and its own failover. Behind a load "
          "balancer (a Kubernetes Service in front of several pods) each connection may reach another server.",
          "connections: 4",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            if (v.get_int64() > 64) return fmt::format("expected at most 64, got {}", v.get_int64());
            e->remote.connections = static_cast<std::size_t>(v.get_int64());
            return std::nullopt;
          }),
      key("executors[].remote.timeout_ms", V::Int, 1, "", "60000",
          "A request unanswered this long means the host is lost: its batches go to the other hosts.",
          "timeout_ms: 10000", &set_remote_millis<&RemoteOptions::timeout>),
      key("executors[].remote.connect_timeout_ms", V::Int, 1, "", "5000", "Connecting and the handshake.",
          "connect_timeout_ms: 2000", &set_remote_millis<&RemoteOptions::connect_timeout>),
      key("executors[].remote.retry_max_ms", V::Int, 1, "", "2000",
          "A lost host is retried after 100 ms, doubling up to this.", "retry_max_ms: 1000",
          &set_remote_millis<&RemoteOptions::retry_max>),
      key("executors[].remote.give_up_ms", V::Int, 1, "", "60000",
          "When no replica of the executor has been reachable this long, waiting requests fail with an error "
          "naming the hosts.",
          "give_up_ms: 30000", &set_remote_millis<&RemoteOptions::give_up>),
      key("executors[].remote.max_frame_bytes", V::Int, 1024, "", "268435456",
          "Larger frames (a request or an answer) close the connection.", "max_frame_bytes: 67108864",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            if (v.get_int64() > 0xFFFFFFFFLL) return std::string("expected at most 4294967295");
            e->remote.max_frame_bytes = static_cast<std::size_t>(v.get_int64());
            return std::nullopt;
          }),
  };
}

// The remote keys on which servers a flow may use, and how it joins them.
std::vector<SchemaKey> remote_membership_keys() {
  return {
      key("executors[].remote.token", V::String, 0, "string", "",
          "The token the executor servers were started with (--token-file); use ${{ ENV.NAME }}.",
          "token: ${{ ENV.FLOWLINE_TOKEN }}",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->remote.token = v.get_string();
            return std::nullopt;
          }),
      key("executors[].remote.start_degraded", V::Bool, 0, "bool", "false",
          "Start even when hosts cannot be reached (they join when they come up); else start fails naming them.",
          "start_degraded: true",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            e->remote.start_degraded = v.get_bool();
            return std::nullopt;
          }),
      key("executors[].remote.discovery", V::String, 0, "none | dns", "none",
          "dns: each entry of `hosts:` is every address its name resolves to (a Kubernetes headless Service's "
          "ready pods, a Compose service's containers), each server with its own connections and failover. The "
          "name is looked up again every discovery_interval_ms: new servers take work, gone ones finish what "
          "they have and are dropped.",
          "discovery: dns",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            const std::string_view s = v.get_string();
            if (s == "none")
              e->remote.discovery = RemoteOptions::Discovery::None;
            else if (s == "dns")
              e->remote.discovery = RemoteOptions::Discovery::Dns;
            else
              return fmt::format("expected none or dns, got '{}'", s);
            return std::nullopt;
          }),
      key("executors[].remote.discovery_interval_ms", V::Int, 100, "", "5000",
          "How often remote.discovery: dns looks the names up again.", "discovery_interval_ms: 2000",
          &set_remote_millis<&RemoteOptions::discovery_interval>),
      key("executors[].remote.max_servers", V::Int, 1, "", "16",
          "remote.discovery: dns uses at most this many servers per name (each has `connections` x `in_flight` "
          "replica threads here, made at start).",
          "max_servers: 32",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            if (v.get_int64() > 256) return fmt::format("expected at most 256, got {}", v.get_int64());
            e->remote.max_servers = static_cast<std::size_t>(v.get_int64());
            return std::nullopt;
          }),
      key("executors[].remote.local_replicas", V::Int, 0, "", "0",
          "Replicas of `uses` in this process besides the hosts, fed from the same queue.", "local_replicas: 1",
          [](FlowConfig&, ExecutorConfig* e, const boost::json::value& v) -> Result {
            if (v.get_int64() > 1024) return fmt::format("expected at most 1024, got {}", v.get_int64());
            e->remote.local_replicas = static_cast<int>(v.get_int64());
            return std::nullopt;
          }),
  };
}

}  // namespace

const std::vector<SchemaKey>& flow_schema() {
  static const std::vector<SchemaKey> schema = [] {
    std::vector<SchemaKey> all = flow_keys();
    // The serving keys belong with the other flow-wide options, before `plugins`.
    const auto plugins = std::find_if(all.begin(), all.end(), [](const SchemaKey& k) { return k.path == "plugins"; });
    std::vector<SchemaKey> serve = serve_keys();
    all.insert(plugins, std::make_move_iterator(serve.begin()), std::make_move_iterator(serve.end()));
    for (auto& k : executor_keys()) all.push_back(std::move(k));
    const auto uses =
        std::find_if(all.begin(), all.end(), [](const SchemaKey& k) { return k.path == "executors[].uses"; });
    std::vector<SchemaKey> python = python_executor_keys();
    all.insert(uses + 1, std::make_move_iterator(python.begin()), std::make_move_iterator(python.end()));
    for (auto& k : remote_executor_keys()) all.push_back(std::move(k));
    for (auto& k : remote_membership_keys()) all.push_back(std::move(k));
    return all;
  }();
  return schema;
}

}  // namespace flowline
