// Parsing and validating flow configurations. The allowed keys come from flow_schema(), which also
// generates docs/yaml-reference.md, so the reference cannot drift from what the parser accepts.
#include "flowline/flow_config.hpp"
#include "flowline/device.hpp"
#include "flowline/error.hpp"
#include "flowline/io.hpp"
#include "flowline/plugin.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <functional>
#include <regex>
#include <set>
#include <tuple>

namespace flowline {

const std::vector<SchemaKey>& flow_schema() {
  static const std::vector<SchemaKey> schema = {
      {"jtype", "string", "Flow", "Accepted for Jina compatibility; must be 'Flow' when present.", "jtype: Flow"},
      {"with", "map", "{}", "Flow-wide options (the keys below).", "with: {request_size: 64}"},
      {"with.request_size", "int >= 1", "100",
       "Documents per request the client sends (Jina's request_size). The launcher's --request-size overrides it.",
       "request_size: 32"},
      {"with.max_in_flight", "int >= 1", "64",
       "Requests of one post inside the flow at once (Jina's prefetch); bounds memory on endless inputs.",
       "max_in_flight: 16"},
      {"with.queue_capacity", "int >= 0", "0",
       "Requests that may wait in front of each executor; 0 means max_in_flight.", "queue_capacity: 8"},
      {"plugins", "list of strings", "[]",
       "Shared libraries with executors: a path (relative to the flow file) or a name searched in "
       "FLOWLINE_PLUGIN_PATH as NAME, libNAME.so or NAME.so.",
       "plugins: [libmy_executors.so]"},
      {"executors", "list of maps", "(required)", "The executors, in order. Each is a map with the keys below.",
       "executors:\n  - name: splitter\n    uses: TextSplitter"},
      {"executors[].name", "string", "(required)", "Unique name of this executor in the flow.", "name: encoder"},
      {"executors[].uses", "string", "(required)",
       "Registered executor type (see `flowline executors`).", "uses: SentenceEncoder"},
      {"executors[].with", "map", "{}",
       "Parameters of the executor type, checked against its declaration (types, required, defaults).",
       "with: {device: cuda, batch_size: 64}"},
      {"executors[].replicas", "int >= 1", "1",
       "Instances of this executor, each on its own thread, all fed from one queue.", "replicas: 2"},
      {"executors[].device", "string", "cpu", "Device of the executor: cpu, cuda, cuda:N or auto.",
       "device: cuda:0"},
      {"executors[].devices", "list of strings, or all", "[]",
       "Devices the replicas are spread over, round-robin (replica i on devices[i % n]); `all`: every "
       "visible GPU. Replaces `device`.",
       "devices: [cuda:0, cuda:1]"},
      {"executors[].needs", "string or list of strings", "the previous executor",
       "Executors whose output this one takes; several means a join (documents merged by id). [] takes the "
       "client's requests directly.",
       "needs: [encoder, tagger]"},
      {"executors[].batching", "map", "{}", "Server-side dynamic batching (the keys below).",
       "batching: {max_batch_size: 256, max_delay_ms: 5}"},
      {"executors[].batching.max_batch_size", "int >= 0", "0",
       "Merge waiting requests into batches of up to this many documents; 0 turns merging off.",
       "max_batch_size: 256"},
      {"executors[].batching.max_delay_ms", "number >= 0", "0",
       "How long a worker waits for more requests to fill a batch.", "max_delay_ms: 2"},
  };
  return schema;
}

SourceLocation ExecutorConfig::location_of(const std::string& key) const {
  auto it = locations.find(key);
  if (it != locations.end()) return it->second;
  it = locations.find("");
  return it != locations.end() ? it->second : SourceLocation{};
}

SourceLocation FlowConfig::location_of(const std::string& key) const {
  auto it = locations.find(key);
  if (it != locations.end()) return it->second;
  return SourceLocation{source.string(), 0, 0};
}

namespace {

// Keys allowed under `prefix` ("" for the top level, "with", "executors[]", "executors[].batching").
std::vector<std::string> schema_keys(const std::string& prefix) {
  std::vector<std::string> out;
  const std::string lead = prefix.empty() ? "" : prefix + ".";
  for (const auto& key : flow_schema()) {
    if (key.path.compare(0, lead.size(), lead) != 0) continue;
    const std::string rest = key.path.substr(lead.size());
    if (!rest.empty() && rest.find('.') == std::string::npos && rest.find('[') == std::string::npos) out.push_back(rest);
  }
  return out;
}

class YamlReader {
 public:
  explicit YamlReader(std::string file) : file_(std::move(file)) {}

  SourceLocation at(const YAML::Node& node) const {
    const YAML::Mark mark = node.Mark();
    if (mark.line < 0) return SourceLocation{file_, 0, 0};
    return SourceLocation{file_, mark.line + 1, mark.column + 1};
  }
  void error(const SourceLocation& where, std::string message) {
    diagnostics_.push_back(Diagnostic{where, std::move(message)});
  }
  void error(const YAML::Node& node, std::string message) { error(at(node), std::move(message)); }
  std::vector<Diagnostic>& diagnostics() { return diagnostics_; }

  // The scalar's text with ${{ ENV.NAME }} substituted; an unset variable is an error.
  std::string scalar(const YAML::Node& node) {
    static const std::regex pattern(R"(\$\{\{\s*ENV\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\})");
    const std::string raw = node.Scalar();
    std::string out;
    auto begin = std::sregex_iterator(raw.begin(), raw.end(), pattern);
    std::size_t last = 0;
    for (auto it = begin; it != std::sregex_iterator(); ++it) {
      out.append(raw, last, static_cast<std::size_t>(it->position()) - last);
      const std::string name = (*it)[1].str();
      if (const char* value = std::getenv(name.c_str())) {
        out += value;
      } else {
        error(node, fmt::format("environment variable '{}' is not set (used as ${{{{ ENV.{} }}}})", name, name));
      }
      last = static_cast<std::size_t>(it->position() + it->length());
    }
    out.append(raw, last, std::string::npos);
    return out;
  }

  // A YAML node as JSON. Plain scalars are typed the YAML 1.2 core way (null, bool, int, float, string);
  // quoted scalars are always strings.
  boost::json::value to_json(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        return nullptr;
      case YAML::NodeType::Scalar: {
        const std::string text = scalar(node);
        if (node.Tag() == "!") return boost::json::value(text);
        return typed_scalar(text);
      }
      case YAML::NodeType::Sequence: {
        boost::json::array array;
        for (const auto& item : node) array.push_back(to_json(item));
        return array;
      }
      case YAML::NodeType::Map: {
        boost::json::object object;
        for (const auto& item : node) object[item.first.Scalar()] = to_json(item.second);
        return object;
      }
    }
    return nullptr;
  }

  static boost::json::value typed_scalar(const std::string& text) {
    static const std::regex int_pattern(R"([-+]?[0-9]+)");
    static const std::regex float_pattern(R"([-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?)");
    if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
    if (text == "true" || text == "True" || text == "TRUE") return true;
    if (text == "false" || text == "False" || text == "FALSE") return false;
    if (std::regex_match(text, int_pattern)) {
      try {
        return static_cast<std::int64_t>(std::stoll(text));
      } catch (const std::out_of_range&) {
        return boost::json::value(text);
      }
    }
    if (std::regex_match(text, float_pattern)) return std::stod(text);
    if (text == ".inf" || text == "+.inf") return std::numeric_limits<double>::infinity();
    if (text == "-.inf") return -std::numeric_limits<double>::infinity();
    if (text == ".nan") return std::numeric_limits<double>::quiet_NaN();
    return boost::json::value(text);
  }

  // Reports keys of `map` that `allowed` does not contain, with a "did you mean".
  void check_keys(const YAML::Node& map, const std::vector<std::string>& allowed, const std::string& context) {
    for (const auto& item : map) {
      const std::string key = item.first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      const std::string hint = closest_match(key, allowed);
      error(item.first, fmt::format("{}unknown key '{}'{}; expected one of: {}", context, key,
                                    hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint),
                                    fmt::join(allowed, ", ")));
    }
  }

  std::optional<std::int64_t> integer(const YAML::Node& node, const std::string& what, std::int64_t minimum) {
    boost::json::value v = to_json(node);
    if (!node.IsScalar() || !v.is_int64()) {
      error(node, fmt::format("{}: expected an integer >= {}, got {}", what, minimum,
                              node.IsScalar() ? fmt::format("'{}'", node.Scalar()) : std::string("a collection")));
      return std::nullopt;
    }
    if (v.get_int64() < minimum) {
      error(node, fmt::format("{}: expected an integer >= {}, got {}", what, minimum, v.get_int64()));
      return std::nullopt;
    }
    return v.get_int64();
  }

  std::optional<double> number(const YAML::Node& node, const std::string& what, double minimum) {
    boost::json::value v = to_json(node);
    const bool ok = node.IsScalar() && (v.is_int64() || v.is_double());
    const double d = v.is_int64() ? static_cast<double>(v.get_int64()) : v.is_double() ? v.get_double() : 0;
    if (!ok || !(d >= minimum)) {
      error(node, fmt::format("{}: expected a number >= {}, got '{}'", what, minimum,
                              node.IsScalar() ? node.Scalar() : std::string("a collection")));
      return std::nullopt;
    }
    return d;
  }

  std::optional<std::string> string(const YAML::Node& node, const std::string& what) {
    if (!node.IsScalar()) {
      error(node, fmt::format("{}: expected a string", what));
      return std::nullopt;
    }
    return scalar(node);
  }

  std::vector<std::string> string_list(const YAML::Node& node, const std::string& what, bool allow_single) {
    std::vector<std::string> out;
    if (node.IsScalar() && allow_single) {
      out.push_back(scalar(node));
    } else if (node.IsSequence()) {
      for (const auto& item : node) {
        if (auto s = string(item, what + " item")) out.push_back(*s);
      }
    } else if (!node.IsNull()) {
      error(node, fmt::format("{}: expected {}a list of strings", what, allow_single ? "a string or " : ""));
    }
    return out;
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
  std::vector<Diagnostic> diagnostics_;
};

void parse_executor(YamlReader& reader, const YAML::Node& node, std::size_t position, FlowConfig& config) {
  ExecutorConfig executor;
  executor.locations[""] = reader.at(node);
  if (!node.IsMap()) {
    reader.error(node, fmt::format("executors[{}]: expected a map with at least 'name' and 'uses'", position));
    return;
  }
  const std::string fallback_name = fmt::format("executors[{}]", position);
  std::string context = fallback_name + ": ";
  if (const auto name = node["name"]) {
    if (auto s = reader.string(name, fallback_name + ".name")) {
      executor.name = *s;
      context = fmt::format("executor '{}': ", executor.name);
    }
    executor.locations["name"] = reader.at(name);
  } else {
    reader.error(node, fallback_name + ": missing required key 'name'");
  }
  reader.check_keys(node, schema_keys("executors[]"), context);

  if (const auto uses = node["uses"]) {
    executor.locations["uses"] = reader.at(uses);
    if (auto s = reader.string(uses, context + "uses")) executor.uses = *s;
  } else {
    reader.error(node, context + "missing required key 'uses'");
  }
  if (const auto with = node["with"]) {
    executor.locations["with"] = reader.at(with);
    if (with.IsMap()) {
      for (const auto& item : with) {
        const std::string key = item.first.Scalar();
        executor.with[key] = reader.to_json(item.second);
        executor.locations["with." + key] = reader.at(item.first);
      }
    } else if (!with.IsNull()) {
      reader.error(with, context + "with: expected a map of parameters");
    }
  }
  if (const auto replicas = node["replicas"]) {
    executor.locations["replicas"] = reader.at(replicas);
    if (auto n = reader.integer(replicas, context + "replicas", 1)) executor.replicas = static_cast<int>(*n);
  }
  if (const auto device = node["device"]) {
    executor.locations["device"] = reader.at(device);
    if (auto s = reader.string(device, context + "device")) executor.device = *s;
  }
  if (const auto devices = node["devices"]) {
    executor.locations["devices"] = reader.at(devices);
    executor.devices = reader.string_list(devices, context + "devices", true);
    if (executor.devices.empty()) reader.error(devices, context + "devices: name at least one device, or all");
    if (node["device"]) reader.error(devices, context + "give either device or devices, not both");
  }
  if (const auto needs = node["needs"]) {
    executor.locations["needs"] = reader.at(needs);
    executor.needs = reader.string_list(needs, context + "needs", true);
  }
  if (const auto batching = node["batching"]) {
    executor.locations["batching"] = reader.at(batching);
    if (!batching.IsMap()) {
      reader.error(batching, context + "batching: expected a map (max_batch_size, max_delay_ms)");
    } else {
      reader.check_keys(batching, schema_keys("executors[].batching"), context + "batching: ");
      if (const auto size = batching["max_batch_size"]) {
        if (auto n = reader.integer(size, context + "batching.max_batch_size", 0)) {
          executor.batching.max_batch_size = static_cast<std::size_t>(*n);
        }
      }
      if (const auto delay = batching["max_delay_ms"]) {
        if (auto d = reader.number(delay, context + "batching.max_delay_ms", 0)) {
          executor.batching.max_delay = std::chrono::microseconds(static_cast<std::int64_t>(*d * 1000.0));
        }
      }
    }
  }
  config.executors.push_back(std::move(executor));
}

}  // namespace

namespace {

// Parses into `config`, appending problems to `diagnostics`. Returns false when the text is not YAML at
// all (nothing more can be checked then).
bool parse_collect(std::string_view yaml_text, const std::filesystem::path& file_name, FlowConfig& config,
                   std::vector<Diagnostic>& diagnostics) {
  YamlReader reader(file_name.string());
  config.source = file_name;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::ParserException& e) {
    diagnostics.push_back(Diagnostic{SourceLocation{reader.file(), e.mark.line + 1, e.mark.column + 1},
                                     "invalid YAML: " + e.msg});
    return false;
  }
  if (!root.IsMap()) {
    diagnostics.push_back(Diagnostic{SourceLocation{reader.file(), root.IsNull() ? 0 : reader.at(root).line,
                                                    root.IsNull() ? 0 : reader.at(root).column},
                                     "a flow file must be a map with an 'executors' list"});
    return false;
  }
  reader.check_keys(root, schema_keys(""), "");
  if (const auto jtype = root["jtype"]) {
    if (auto s = reader.string(jtype, "jtype"); s && *s != "Flow") {
      reader.error(jtype, fmt::format("jtype: expected 'Flow', got '{}'", *s));
    }
  }
  if (const auto with = root["with"]) {
    if (!with.IsMap()) {
      reader.error(with, "with: expected a map of flow options");
    } else {
      reader.check_keys(with, schema_keys("with"), "with: ");
      if (const auto n = with["request_size"]) {
        config.locations["with.request_size"] = reader.at(n);
        if (auto v = reader.integer(n, "with.request_size", 1)) config.options.request_size = static_cast<std::size_t>(*v);
      }
      if (const auto n = with["max_in_flight"]) {
        config.locations["with.max_in_flight"] = reader.at(n);
        if (auto v = reader.integer(n, "with.max_in_flight", 1)) config.options.max_in_flight = static_cast<std::size_t>(*v);
      }
      if (const auto n = with["queue_capacity"]) {
        config.locations["with.queue_capacity"] = reader.at(n);
        if (auto v = reader.integer(n, "with.queue_capacity", 0)) config.options.queue_capacity = static_cast<std::size_t>(*v);
      }
    }
  }
  if (const auto plugins = root["plugins"]) {
    config.plugins = reader.string_list(plugins, "plugins", false);
    if (plugins.IsSequence()) {
      for (std::size_t i = 0; i < plugins.size(); ++i) config.locations[fmt::format("plugins.{}", i)] = reader.at(plugins[i]);
    }
  }
  const auto executors = root["executors"];
  if (!executors) {
    reader.error(SourceLocation{reader.file(), 0, 0}, "missing required key 'executors'");
  } else if (!executors.IsSequence()) {
    reader.error(executors, "executors: expected a list of executors");
  } else {
    for (std::size_t i = 0; i < executors.size(); ++i) parse_executor(reader, executors[i], i, config);
  }
  diagnostics.insert(diagnostics.end(), reader.diagnostics().begin(), reader.diagnostics().end());
  return true;
}

void validate_collect(FlowConfig& config, const Registry& registry, std::vector<Diagnostic>& diagnostics) {
  auto error = [&](SourceLocation where, std::string message) {
    diagnostics.push_back(Diagnostic{std::move(where), std::move(message)});
  };
  if (config.options.request_size == 0) error(config.location_of("with.request_size"), "with.request_size: must be at least 1");
  if (config.options.max_in_flight == 0) error(config.location_of("with.max_in_flight"), "with.max_in_flight: must be at least 1");

  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const auto& e : config.executors) {
    if (e.name.empty()) {
      if (!e.locations.count("")) error(e.location_of("name"), "an executor has an empty name");
    } else if (!seen.insert(e.name).second) {
      error(e.location_of("name"), fmt::format("executor '{}': the name is used twice", e.name));
    } else if (e.name == "gateway") {
      error(e.location_of("name"), "executor 'gateway': the name is reserved");
    }
    names.push_back(e.name);
  }

  const auto devices = available_devices();
  for (std::size_t i = 0; i < config.executors.size(); ++i) {
    auto& e = config.executors[i];
    const std::string context = fmt::format("executor '{}': ", e.name);
    if (e.replicas < 1) error(e.location_of("replicas"), context + "replicas must be at least 1");
    auto check_device = [&](const std::string& device, const char* key) {
      if (auto problem = check_device_syntax(device)) {
        error(e.location_of(key), context + *problem);
      } else if (device.substr(0, 4) == "cuda") {
        const int index = device == "cuda" ? 0 : std::stoi(device.substr(5));
        if (index >= cuda_device_count()) {
          error(e.location_of(key), fmt::format("{}device '{}' does not exist; available: {}", context, device,
                                                fmt::join(devices, ", ")));
        }
      }
    };
    if (e.devices.empty()) {
      check_device(e.device, "device");
    } else if (e.devices.size() == 1 && e.devices[0] == "all") {
      if (cuda_device_count() == 0) {
        error(e.location_of("devices"), fmt::format("{}devices: all, but no GPU is visible; available: {}", context,
                                                    fmt::join(devices, ", ")));
      }
    } else {
      for (const auto& d : e.devices) check_device(d, "devices");
    }
    if (e.needs) {
      for (const auto& need : *e.needs) {
        if (need == e.name) {
          error(e.location_of("needs"), context + "an executor cannot need itself");
        } else if (!seen.count(need)) {
          const std::string hint = closest_match(need, names);
          error(e.location_of("needs"), fmt::format("{}needs unknown executor '{}'{}", context, need,
                                                    hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint)));
        }
      }
    }
    const Registry::Entry* entry = e.uses.empty() ? nullptr : registry.find(e.uses);
    if (!entry) {
      if (!e.uses.empty()) error(e.location_of("uses"), context + registry.unknown_message(e.uses));
      continue;
    }
    const ExecutorSpec& spec = entry->spec;
    if (spec.max_replicas > 0 && e.replicas > spec.max_replicas) {
      error(e.location_of("replicas"),
            fmt::format("{}{} runs with at most {} replica{} (it owns its output), got {}", context, spec.name,
                        spec.max_replicas, spec.max_replicas == 1 ? "" : "s", e.replicas));
    }
    std::vector<std::string> declared;
    for (const auto& p : spec.params) declared.push_back(p.name);
    for (auto& [key, value] : e.with) {
      const std::string name(key);
      auto p = std::find_if(spec.params.begin(), spec.params.end(), [&](const ParamSpec& s) { return s.name == name; });
      if (p == spec.params.end()) {
        const std::string hint = closest_match(name, declared);
        error(e.location_of("with." + name),
              fmt::format("{}unknown parameter '{}' for {}{}; its parameters: {}", context, name, spec.name,
                          hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint),
                          declared.empty() ? std::string("none") : fmt::format("{}", fmt::join(declared, ", "))));
        continue;
      }
      if (auto problem = check_param_value(p->type, value)) {
        error(e.location_of("with." + name), fmt::format("{}parameter '{}': {}", context, name, *problem));
      }
    }
    for (const auto& p : spec.params) {
      if (e.with.contains(p.name)) continue;
      if (p.required) {
        error(e.location_of(e.locations.count("with") ? "with" : ""),
              fmt::format("{}missing required parameter '{}' ({}: {})", context, p.name, to_string(p.type), p.help));
      } else {
        e.with[p.name] = p.default_value;
      }
    }
  }

  // The DAG must have no cycle. Needs only name executors defined earlier... or later, so check fully.
  std::map<std::string, std::vector<std::string>> edges;
  for (std::size_t i = 0; i < config.executors.size(); ++i) {
    const auto& e = config.executors[i];
    if (e.needs) {
      edges[e.name] = *e.needs;
    } else if (i > 0) {
      edges[e.name] = {config.executors[i - 1].name};
    }
  }
  std::map<std::string, int> state;  // 0 new, 1 on stack, 2 done
  std::vector<std::string> stack;
  std::function<bool(const std::string&)> visit = [&](const std::string& node) -> bool {
    state[node] = 1;
    stack.push_back(node);
    for (const auto& next : edges[node]) {
      if (!seen.count(next) || next == node) continue;  // unknown names and self-needs are reported above
      if (state[next] == 1) {
        auto start = std::find(stack.begin(), stack.end(), next);
        std::vector<std::string> cycle(start, stack.end());
        cycle.push_back(next);
        const auto& where = std::find_if(config.executors.begin(), config.executors.end(),
                                         [&](const ExecutorConfig& c) { return c.name == node; });
        error(where->location_of("needs"), fmt::format("executors form a cycle: {}", fmt::join(cycle, " -> ")));
        return true;
      }
      if (state[next] == 0 && visit(next)) return true;
    }
    stack.pop_back();
    state[node] = 2;
    return false;
  };
  for (const auto& e : config.executors) {
    if (state[e.name] == 0 && visit(e.name)) break;
  }
}

// File order: by line, then column; problems without a line first.
void sort_diagnostics(std::vector<Diagnostic>& diagnostics) {
  std::stable_sort(diagnostics.begin(), diagnostics.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return std::tie(a.where.line, a.where.column) < std::tie(b.where.line, b.where.column);
  });
}

}  // namespace

std::vector<std::string> replica_devices(const ExecutorConfig& executor) {
  std::vector<std::string> pool = executor.devices;
  if (pool.size() == 1 && pool[0] == "all") {
    pool.clear();
    for (int i = 0; i < cuda_device_count(); ++i) pool.push_back(fmt::format("cuda:{}", i));
    if (pool.empty()) throw Error(fmt::format("executor '{}': devices: all, but no GPU is visible", executor.name));
  }
  if (pool.empty()) pool.push_back(executor.device);
  std::vector<std::string> out;
  for (int r = 0; r < executor.replicas; ++r) out.push_back(pool[static_cast<std::size_t>(r) % pool.size()]);
  return out;
}

FlowConfig parse_flow_config(std::string_view yaml_text, const std::filesystem::path& file_name) {
  FlowConfig config;
  std::vector<Diagnostic> diagnostics;
  parse_collect(yaml_text, file_name, config, diagnostics);
  if (!diagnostics.empty()) throw ConfigError(std::move(diagnostics));
  return config;
}

void set_executor_parameter(FlowConfig& config, std::string_view assignment) {
  const SourceLocation where{fmt::format("--set {}", assignment), 0, 0};
  auto fail = [&](std::string message) { throw ConfigError({Diagnostic{where, std::move(message)}}); };
  const auto equals = assignment.find('=');
  const auto dot = assignment.substr(0, equals).find('.');
  if (equals == std::string_view::npos || dot == std::string_view::npos || dot == 0 || dot + 1 == equals) {
    fail("expected EXECUTOR.PARAMETER=VALUE, e.g. encoder.batch_size=128");
  }
  const std::string name(assignment.substr(0, dot)), param(assignment.substr(dot + 1, equals - dot - 1));
  for (auto& e : config.executors) {
    if (e.name != name) continue;
    e.with[param] = YamlReader::typed_scalar(std::string(assignment.substr(equals + 1)));
    e.locations["with." + param] = where;
    return;
  }
  std::vector<std::string> names;
  for (const auto& e : config.executors) names.push_back(e.name);
  fail(fmt::format("the flow has no executor '{}' (executors: {})", name, fmt::join(names, ", ")));
}

void validate_flow_config(FlowConfig& config, const Registry& registry) {
  std::vector<Diagnostic> diagnostics;
  validate_collect(config, registry, diagnostics);
  if (!diagnostics.empty()) {
    sort_diagnostics(diagnostics);
    throw ConfigError(std::move(diagnostics));
  }
}

FlowConfig load_flow_config_text(std::string_view yaml_text, const std::filesystem::path& file, Registry& registry) {
  FlowConfig config;
  std::vector<Diagnostic> diagnostics;
  if (!parse_collect(yaml_text, file, config, diagnostics)) throw ConfigError(std::move(diagnostics));
  const auto base_dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  for (std::size_t i = 0; i < config.plugins.size(); ++i) {
    try {
      load_plugin(resolve_plugin(config.plugins[i], base_dir), registry);
    } catch (const Error& e) {
      diagnostics.push_back(Diagnostic{config.location_of(fmt::format("plugins.{}", i)), e.what()});
    }
  }
  try {
    load_plugins_from_environment(registry);
  } catch (const Error& e) {
    diagnostics.push_back(Diagnostic{SourceLocation{}, e.what()});
  }
  validate_collect(config, registry, diagnostics);
  if (!diagnostics.empty()) {
    sort_diagnostics(diagnostics);
    throw ConfigError(std::move(diagnostics));
  }
  return config;
}

FlowConfig load_flow_config(const std::filesystem::path& file, Registry& registry) {
  std::string text;
  try {
    text = read_file(file);
  } catch (const InputError& e) {
    throw ConfigError({Diagnostic{SourceLocation{}, e.what()}});
  }
  return load_flow_config_text(text, file, registry);
}

}  // namespace flowline
