// Parsing flow YAML into a FlowConfig: ${{ ENV.NAME:-default }} substitution, YAML typing of scalars, and
// one loop over flow_schema() that checks key names and reads every value into its target.
#include "flow_budget.hpp"
#include "flow_config_internal.hpp"

#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>

namespace flowline {

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

// Scanners for scalars, linear in the text's length (std::regex recursed once per character and overflowed the
// stack on a multi-megabyte scalar).
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }

std::size_t skip_spaces(std::string_view text, std::size_t at) {
  while (at < text.size() && is_space(text[at])) ++at;
  return at;
}

std::size_t skip_digits(std::string_view text, std::size_t at) {
  while (at < text.size() && is_digit(text[at])) ++at;
  return at;
}

// `${{ ENV.NAME }}` or `${{ ENV.NAME:-default }}` starting at text[at], with optional spaces around the parts;
// the default runs to the first '}' less its trailing spaces.
struct EnvReference {
  std::size_t length = 0;
  std::string_view name;
  std::optional<std::string_view> fallback;
};

std::optional<EnvReference> env_reference_at(std::string_view text, std::size_t at) {
  if (text.compare(at, 3, "${{") != 0) return std::nullopt;
  std::size_t i = skip_spaces(text, at + 3);
  if (text.compare(i, 4, "ENV.") != 0) return std::nullopt;
  i += 4;
  const std::size_t name_start = i;
  if (i >= text.size() || !is_name_start(text[i])) return std::nullopt;
  while (i < text.size() && (is_name_start(text[i]) || is_digit(text[i]))) ++i;
  EnvReference ref;
  ref.name = text.substr(name_start, i - name_start);
  i = skip_spaces(text, i);
  if (text.compare(i, 2, ":-") == 0) {
    const std::size_t start = skip_spaces(text, i + 2);
    const std::size_t close = text.find('}', start);
    if (close == std::string_view::npos) return std::nullopt;
    std::size_t end = close;
    while (end > start && is_space(text[end - 1])) --end;
    ref.fallback = text.substr(start, end - start);
    i = close;
  }
  if (text.compare(i, 2, "}}") != 0) return std::nullopt;
  ref.length = i + 2 - at;
  return ref;
}

// YAML 1.2 core schema numbers: [-+]?[0-9]+ is an integer; [-+]?(.[0-9]+|[0-9]+(.[0-9]*)?)([eE][-+]?[0-9]+)?
// a float.
enum class NumberKind { None, Integer, Float };

NumberKind number_kind(std::string_view text) {
  std::size_t i = (!text.empty() && (text[0] == '-' || text[0] == '+')) ? 1 : 0;
  const std::size_t int_end = skip_digits(text, i);
  bool is_float = false;
  std::size_t end = int_end;
  if (end < text.size() && text[end] == '.') {
    const std::size_t frac_end = skip_digits(text, end + 1);
    if (int_end == i && frac_end == end + 1) return NumberKind::None;  // "." or "-." alone
    end = frac_end;
    is_float = true;
  } else if (int_end == i) {
    return NumberKind::None;
  }
  if (end < text.size() && (text[end] == 'e' || text[end] == 'E')) {
    std::size_t e = end + 1;
    if (e < text.size() && (text[e] == '-' || text[e] == '+')) ++e;
    const std::size_t exp_end = skip_digits(text, e);
    if (exp_end == e) return NumberKind::None;
    end = exp_end;
    is_float = true;
  }
  if (end != text.size()) return NumberKind::None;
  return is_float ? NumberKind::Float : NumberKind::Integer;
}

// Keys allowed under `prefix` ("" for the top level, "with", "executors[]", "executors[].batching").
std::vector<const SchemaKey*> schema_children(const std::string& prefix) {
  std::vector<const SchemaKey*> out;
  const std::string lead = prefix.empty() ? "" : prefix + ".";
  for (const auto& key : flow_schema()) {
    if (key.path.compare(0, lead.size(), lead) != 0) continue;
    const std::string rest = key.path.substr(lead.size());
    if (!rest.empty() && rest.find('.') == std::string::npos && rest.find('[') == std::string::npos)
      out.push_back(&key);
  }
  return out;
}

std::vector<std::string> schema_keys(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto* key : schema_children(prefix))
    out.push_back(key->path.substr(prefix.empty() ? 0 : prefix.size() + 1));
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

  // The scalar's text with ${{ ENV.NAME }} and ${{ ENV.NAME:-default }} substituted. The default is used
  // when the variable is unset or empty; an unset variable without a default is an error.
  std::string scalar(const YAML::Node& node) {
    const std::string& raw = node.Scalar();
    if (raw.find("${{") == std::string::npos) return raw;
    std::string out;
    std::size_t last = 0;
    for (std::size_t at = raw.find("${{"); at != std::string::npos; at = raw.find("${{", at)) {
      const auto ref = env_reference_at(raw, at);
      if (!ref) {
        ++at;
        continue;
      }
      out.append(raw, last, at - last);
      const std::string name(ref->name);
      const char* value = std::getenv(name.c_str());
      if (ref->fallback && (value == nullptr || *value == '\0')) {
        out += *ref->fallback;
      } else if (value != nullptr) {
        out += value;
      } else {
        error(node, fmt::format("environment variable '{}' is not set (used as ${{{{ ENV.{} }}}}; "
                                "${{{{ ENV.{}:-default }}}} gives it a default)",
                                name, name, name));
      }
      at += ref->length;
      last = at;
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
    if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
    if (text == "true" || text == "True" || text == "TRUE") return true;
    if (text == "false" || text == "False" || text == "FALSE") return false;
    switch (number_kind(text)) {
      case NumberKind::Integer: {
        errno = 0;
        const long long value = std::strtoll(text.c_str(), nullptr, 10);
        if (errno == ERANGE) return boost::json::value(text);
        return static_cast<std::int64_t>(value);
      }
      case NumberKind::Float:
        return std::strtod(text.c_str(), nullptr);  // out of range: ±inf or 0, as YAML's float type reads it
      case NumberKind::None:
        break;
    }
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
      error(item.first,
            fmt::format("{}unknown key '{}'{}; expected one of: {}", context, key,
                        hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint), fmt::join(allowed, ", ")));
    }
  }

  // `alternative`: what else the key accepts, for the message (" or auto").
  std::optional<std::int64_t> integer(const YAML::Node& node, const std::string& what, std::int64_t minimum,
                                      std::string_view alternative = "") {
    boost::json::value v = to_json(node);
    if (!node.IsScalar() || !v.is_int64()) {
      error(node, fmt::format("{}: expected an integer >= {}{}, got {}", what, minimum, alternative,
                              node.IsScalar() ? fmt::format("'{}'", node.Scalar()) : std::string("a collection")));
      return std::nullopt;
    }
    if (v.get_int64() < minimum) {
      error(node, fmt::format("{}: expected an integer >= {}{}, got {}", what, minimum, alternative, v.get_int64()));
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

  // The value of `node` read as `key` says (int64, double, string or array of strings), or nullopt after
  // reporting why not.
  std::optional<boost::json::value> read(const YAML::Node& node, const SchemaKey& key, const std::string& what) {
    auto list = [&](bool allow_single) {
      boost::json::array array;
      for (auto& s : string_list(node, what, allow_single)) array.emplace_back(s);
      return boost::json::value(std::move(array));
    };
    switch (key.value) {
      case SchemaValue::Int:
        if (auto n = integer(node, what, static_cast<std::int64_t>(key.minimum))) return boost::json::value(*n);
        return std::nullopt;
      case SchemaValue::IntOrAuto:
        if (node.IsScalar() && node.Scalar() == "auto") return boost::json::value("auto");
        if (auto n = integer(node, what, static_cast<std::int64_t>(key.minimum), " or auto"))
          return boost::json::value(*n);
        return std::nullopt;
      case SchemaValue::Number:
        if (auto d = number(node, what, key.minimum)) return boost::json::value(*d);
        return std::nullopt;
      case SchemaValue::String:
        if (auto s = string(node, what)) return boost::json::value(*s);
        return std::nullopt;
      case SchemaValue::Bool: {
        const boost::json::value v = to_json(node);
        if (node.IsScalar() && v.is_bool()) return v;
        error(node, fmt::format("{}: expected true or false, got {}", what,
                                node.IsScalar() ? fmt::format("'{}'", node.Scalar()) : std::string("a collection")));
        return std::nullopt;
      }
      case SchemaValue::StringList:
        return list(false);
      case SchemaValue::StringOrList:
        return list(true);
      case SchemaValue::Map:
      case SchemaValue::Special:
        break;
    }
    return std::nullopt;
  }

  // Reads the keys of `map` that flow_schema() lists under `prefix` into `config` (executor keys into
  // `executor`), recursing into nested maps. `context` starts every message. Special keys are left to
  // the caller; unknown keys are reported by check_keys().
  void read_map(const YAML::Node& map, const std::string& prefix, const std::string& context, FlowConfig& config,
                ExecutorConfig* executor) {
    for (const SchemaKey* key : schema_children(prefix)) {
      const YAML::Node node = map[key->path.substr(prefix.empty() ? 0 : prefix.size() + 1)];
      if (!node || key->value == SchemaValue::Special) continue;
      const std::string rel = executor ? key->path.substr(std::string("executors[].").size()) : key->path;
      auto& locations = executor ? executor->locations : config.locations;
      locations[rel] = at(node);
      if (key->value == SchemaValue::Map) {
        const auto children = schema_keys(key->path);
        if (!node.IsMap()) {
          if (!node.IsNull())
            error(node, fmt::format("{}{}: expected a map ({})", context, rel, fmt::join(children, ", ")));
          continue;
        }
        check_keys(node, children, context + rel + ": ");
        read_map(node, key->path, context, config, executor);
        continue;
      }
      if (node.IsSequence()) {
        for (std::size_t i = 0; i < node.size(); ++i) locations[fmt::format("{}.{}", rel, i)] = at(node[i]);
      }
      const auto value = read(node, *key, context + rel);
      if (!value || !key->assign) continue;
      if (auto problem = key->assign(config, executor, *value))
        error(node, fmt::format("{}{}: {}", context, rel, *problem));
    }
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
  const auto name = node["name"];
  if (name && name.IsScalar()) context = fmt::format("executor '{}': ", reader.scalar(name));
  reader.check_keys(node, schema_keys("executors[]"), context);
  reader.read_map(node, "executors[]", name && name.IsScalar() ? context : fallback_name + ".", config, &executor);
  if (!name) reader.error(node, fallback_name + ": missing required key 'name'");
  const bool remote = node["hosts"] || node["host"];
  if (!node["uses"] && !remote)
    reader.error(node, context + "missing required key 'uses' (or 'hosts' for a remote executor)");
  if (node["hosts"] && node["host"])
    reader.error(node["host"], context + "give either hosts or host and port, not both");
  if (node["host"] && !node["port"])
    reader.error(node["host"], context + "host: needs a port (or write hosts: [HOST:PORT])");
  if (node["port"] && !node["host"])
    reader.error(node["port"], context + "port: needs a host (Jina's external executor)");
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
  if (node["devices"] && node["device"])
    reader.error(node["devices"], context + "give either device or devices, not both");
  if (executor.hosts.size() == 1 && executor.hosts[0].find(':') == std::string::npos && node["port"]) {
    executor.hosts[0] = fmt::format("{}:{}", executor.hosts[0], reader.scalar(node["port"]));  // Jina's host + port
  }
  config.executors.push_back(std::move(executor));
}

}  // namespace

namespace detail {

bool parse_collect(std::string_view yaml_text, const std::filesystem::path& file_name, FlowConfig& config,
                   std::vector<Diagnostic>& diagnostics) {
  check_flow_bounds(yaml_text, file_name);  // before yaml-cpp builds a tree
  YamlReader reader(file_name.string());
  config.source = file_name;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::ParserException& e) {
    diagnostics.push_back(
        Diagnostic{SourceLocation{reader.file(), e.mark.line + 1, e.mark.column + 1}, "invalid YAML: " + e.msg});
    return false;
  }
  if (!root.IsMap()) {
    diagnostics.push_back(Diagnostic{SourceLocation{reader.file(), root.IsNull() ? 0 : reader.at(root).line,
                                                    root.IsNull() ? 0 : reader.at(root).column},
                                     "a flow file must be a map with an 'executors' list"});
    return false;
  }
  reader.check_keys(root, schema_keys(""), "");
  reader.read_map(root, "", "", config, nullptr);
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

}  // namespace detail

FlowConfig parse_flow_config(std::string_view yaml_text, const std::filesystem::path& file_name) {
  FlowConfig config;
  std::vector<Diagnostic> diagnostics;
  detail::parse_collect(yaml_text, file_name, config, diagnostics);
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

}  // namespace flowline
