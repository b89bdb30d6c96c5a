// flowline/flow_config.hpp — the declarative form of a Flow, from YAML or built in code, and its validator.
//
// A FlowConfig is plain data. validate_flow_config() checks it against a Registry (executor types exist,
// parameters match their declarations and get their defaults, `needs` form a DAG, devices exist) and
// reports every problem at once as a flowline::ConfigError whose diagnostics carry file:line:column when
// the config came from YAML. A Flow only ever runs a validated config.
//
// YAML form (every key is documented in docs/yaml-reference.md, generated from flow_schema()):
//
//   with:                      # flow-wide options
//     request_size: 100
//     port: 8080                 # for `flowline serve` (also host, protocol: http, title, gateway: {...})
//   plugins: [libmy_executor.so]
//   executors:
//     - name: splitter
//       uses: TextSplitter
//       with: {unit: paragraph}
//     - name: writer
//       uses: JsonlWriter
//       with: {path: out.jsonl}
//       needs: splitter        # default: the executor before it
//
// Scalars may use ${{ ENV.NAME }} to substitute an environment variable, or ${{ ENV.NAME:-default }} to
// fall back to `default` when it is unset or empty (as in shells); an unset variable without a default is
// an error. Relative paths in a flow file (plugins, and executor parameters declared ParamType::Path) are
// relative to the flow file's folder, resolved at load time; a flow built in code, and a value set with
// set_executor_parameter(), keeps them relative to the current directory.
#pragma once

#include "flowline/error.hpp"
#include "flowline/serve_settings.hpp"
#include "flowline/registry.hpp"

#include <boost/json/object.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowline {

// Server-side dynamic batching: small requests waiting for an executor are merged into one batch of up
// to max_batch_size documents, waiting at most max_delay for more to arrive. 0 turns merging off.
struct BatchingOptions {
  std::size_t max_batch_size = 0;
  // How long a replica that took a request waits for more to fill its batch. Unset (`max_delay_ms` not given):
  // only under load — while another replica of the executor is running a batch, up to an eighth of the
  // executor's recent batch time (at most 1 ms); with every other replica idle, at once. 0: never.
  std::optional<std::chrono::microseconds> max_delay;
};

// How a flow reaches an executor that runs on other machines (`hosts:`; docs/remote-executors.md). Each
// host is served by `connections` connections (one by default), each shared by `in_flight` replica threads
// of this flow, all fed from the executor's one queue, so a faster host takes more work.
struct RemoteOptions {
  std::size_t in_flight = 4;                         // requests in flight per connection (its replicas here)
  std::size_t connections = 1;                       // connections to each host; behind a load balancer
                                                     // (a Kubernetes Service) each may reach another server
  std::chrono::milliseconds timeout{60'000};         // a request unanswered this long: the host is lost
  std::chrono::milliseconds connect_timeout{5'000};  // connect and handshake
  std::chrono::milliseconds retry_max{2'000};        // reconnect backoff: 100 ms doubling up to this
  std::chrono::milliseconds give_up{60'000};         // no replica reachable this long: requests fail
  std::size_t max_frame_bytes = 256u << 20;          // larger frames close the connection
  std::string token;                                 // the executor server's token, when it asks for one
  bool start_degraded = false;                       // start when hosts are unreachable (they join when they come up)
  int local_replicas = 0;                            // replicas in this process beside the hosts (needs `uses`)
  // Each `hosts:` entry is one server (None), or every address its name resolves to (Dns: a Kubernetes
  // headless Service's pods), looked up again every discovery_interval, at most max_servers of them.
  enum class Discovery { None, Dns };
  Discovery discovery = Discovery::None;
  std::chrono::milliseconds discovery_interval{5'000};
  std::size_t max_servers = 16;
  // A request in flight on a connection that is lost: re-queued for another host (true), or failed with an
  // error (false: a flow's own Python workers, where the request may be what crashed the process).
  bool requeue_lost = true;
};

struct ExecutorConfig {
  std::string name;                               // unique in the flow
  std::string uses;                               // registered type name (optional with `hosts`)
  boost::json::object with;                       // parameters; validation fills in defaults
  std::optional<std::vector<std::string>> needs;  // unset: the executor before it (none for the first)
  int replicas = 1;                               // per shard
  // Shards (`shards: N`, for types whose spec has a ShardPlan): N parts of the executor's data, each
  // served by `replicas` replicas (or, with `hosts`, host i serves shard i); requests are routed by id or
  // sent to every shard and merged, as the plan says.
  int shards = 1;
  // replicas: auto. Validation sets `replicas` from the devices: ExecutorSpec::replicas_per_gpu on each GPU
  // of the pool, one on each CPU entry (capped at the spec's max_replicas).
  bool auto_replicas = false;
  std::string device = "cpu";  // cpu, cuda, cuda:N or auto
  // For replicas: the devices they are spread over, round-robin ({"all"}: every visible GPU). When set,
  // it replaces `device`.
  std::vector<std::string> devices;
  BatchingOptions batching;
  // Executor servers that run this executor (`flowline serve FLOW --executor NAME`), as "host:port". When
  // set, this flow runs the executor remotely: `replicas`, `device(s)` and `with` are the server's
  // settings, and only remote.local_replicas run here.
  std::vector<std::string> hosts;
  RemoteOptions remote;
  bool is_remote() const noexcept { return !hosts.empty(); }
  // A Python executor (Jina's form, docs/python.md): `uses` names a class that these files define (relative
  // to the flow file), run by `python` (empty: FLOWLINE_PYTHON, else the default). The flow starts one
  // worker process per replica and fills `hosts` with their addresses when it starts (python_workers.hpp).
  std::vector<std::string> py_modules;
  std::string python;
  bool is_python() const noexcept { return !py_modules.empty(); }
  // A Python executor's shared memory for tensors (`shared_memory:`, docs/python.md): the bytes of the memfd
  // segment each of its worker connections gets, 0 for none (tensors then cross in the frames). Unset: the
  // environment's FLOWLINE_SHARED_MEMORY_BYTES when the workers start, else 64 MiB. Validation refuses it on an
  // executor without py_modules (nothing shares memory with it).
  std::optional<std::size_t> shared_memory;

  // Where things were written (empty when built in code). Keys: "" for the entry itself, a field name
  // ("uses", "needs", ...) or "with.PARAM".
  std::map<std::string, SourceLocation> locations;
  SourceLocation location_of(const std::string& key) const;
};

struct FlowOptions {
  std::size_t request_size = 100;  // client side: documents per request
  std::string endpoint = "/";      // what `flowline run` posts to when its --endpoint is not given
  std::size_t max_in_flight = 64;  // requests posted but not yet answered, per post() call
  std::size_t queue_capacity = 0;  // requests waiting per executor; 0: max_in_flight
  // What each file an executor writes may hold, in bytes (RuntimeInfo::max_output_bytes); 0: no bound.
  // `flowline serve` sets it (--max-output-bytes): a served flow's writer grows with every client's request.
  std::uint64_t max_output_bytes = 0;
  // Whether the flow's documents are the user's own, named on a command line (RuntimeInfo::local_input_files):
  // `flowline run` sets it. Never for a flow that serves clients: a client's `uri` must not make the server read
  // its files (an executor reads local paths only under the folders its flow names, e.g. allowed_uri_roots).
  bool local_input_files = false;
};

struct FlowConfig {
  FlowOptions options;               // how the flow runs
  ServeSettings serve;               // how `flowline serve` serves it (the gateway's settings); the Flow ignores them
  std::vector<std::string> plugins;  // as written; resolved against the YAML file's folder
  std::vector<ExecutorConfig> executors;
  std::filesystem::path source;  // the YAML file, when there is one; its folder anchors relative paths
  std::map<std::string, SourceLocation> locations;  // flow-level keys: "with.request_size", "plugins.0"...
  SourceLocation location_of(const std::string& key) const;
};

// Parses YAML text into a FlowConfig (syntax, key names and value types; not the registry). `file_name`
// is used in messages and to resolve relative plugin paths. Throws ConfigError with every problem.
FlowConfig parse_flow_config(std::string_view yaml_text, const std::filesystem::path& file_name);

// Where a flow's devices are. Here: on this machine, so validation checks that every cuda device exists
// (loading CUDA). Elsewhere: on the machines a deployment will run the executors on (`flowline export`),
// so only their names are checked (cpu, cuda, cuda:N, auto, all).
enum class DeviceCheck { Here, Elsewhere };

// Reads and parses a flow file, loads the plugins it lists (and those in FLOWLINE_PLUGIN_PATH) into
// `registry`, then validates it. Every problem, from syntax to validation, is reported in one
// ConfigError, in file order.
FlowConfig load_flow_config(const std::filesystem::path& file, Registry& registry = Registry::global(),
                            DeviceCheck devices = DeviceCheck::Here);
// The same for YAML text; `file` names it in messages and anchors relative plugin paths.
FlowConfig load_flow_config_text(std::string_view yaml_text, const std::filesystem::path& file,
                                 Registry& registry = Registry::global(), DeviceCheck devices = DeviceCheck::Here);
// The same with command-line assignments (`--set`, see set_executor_parameter()) applied between parsing and
// validation, so that a value the command line replaces is never checked: a flow whose YAML names a model folder
// that is missing here runs with `--set encoder.model=DIR`. A bad assignment is one more problem of the ConfigError.
FlowConfig load_flow_config(const std::filesystem::path& file, const std::vector<std::string>& sets,
                            Registry& registry = Registry::global(), DeviceCheck devices = DeviceCheck::Here);

// Sets one executor parameter from the command line: "NAME.PARAM=VALUE", VALUE typed as a YAML plain
// scalar (42 is an int, auto a string). Messages about the value then name the assignment as their
// location. Throws ConfigError for bad syntax or an executor the flow does not have; the value itself is
// checked by validate_flow_config().
void set_executor_parameter(FlowConfig& config, std::string_view assignment);

// Validates `config` in place (see the file comment): fills in parameter defaults and, when the config
// came from a file (`source` set), makes relative Path parameters written in that file absolute against
// its folder (idempotent). Throws ConfigError with every problem.
void validate_flow_config(FlowConfig& config, const Registry& registry = Registry::global());

// A file an executor of the flow writes: a parameter its type declares ParamSpec::output_file(), with the
// value the validated config gives it (absolute when written in a flow file).
struct FlowOutput {
  std::string executor;   // "writer"
  std::string parameter;  // "path"
  std::filesystem::path path;
  SourceLocation location;  // where the value was written (empty when built in code or a default)
};
// Every file the executors of a validated `config` that run in this process write, in flow order; remote
// executors (`hosts:`) write on their own machines and are left out. Types unknown to `registry` are
// skipped (validation has refused them already).
std::vector<FlowOutput> flow_outputs(const FlowConfig& config, const Registry& registry = Registry::global());

// How the parser reads one schema key.
enum class SchemaValue {
  Map,           // a map of the keys below it
  Int,           // an integer >= minimum
  IntOrAuto,     // an integer >= minimum, or the string auto
  Number,        // a number >= minimum
  String,        // a scalar
  StringList,    // a list of scalars
  StringOrList,  // a scalar (a list of one) or a list of scalars
  Bool,          // true or false
  Special,       // read by its own code (the executor list, an executor's parameters)
};

// One key of the flow YAML schema: the single source for the parser and the generated reference. The
// parser loops over this table: it checks the key names of every map, reads each value as `value` says
// and hands it to `assign`, which stores it in its target and may return a problem with the value.
struct SchemaKey {
  using Assign = std::optional<std::string> (*)(FlowConfig& flow, ExecutorConfig* executor,
                                                const boost::json::value& value);
  std::string path;  // "with.request_size", "executors[].uses", ...
  std::string type;  // "int >= 1", "string", ...
  std::string default_value;
  std::string help;
  std::string example;
  SchemaValue value = SchemaValue::Special;
  double minimum = 0;       // Int, Number
  Assign assign = nullptr;  // executor is null for flow-level keys; the value is an int64, double, bool, string
                            // or array of strings as `value` says
};
const std::vector<SchemaKey>& flow_schema();

// The device of each replica: `devices` round-robin (replica i gets devices[i % n]; "all" expands to
// every visible GPU), else `device` for all. Throws flowline::Error when "all" finds no GPU.
std::vector<std::string> replica_devices(const ExecutorConfig& executor);

}  // namespace flowline
