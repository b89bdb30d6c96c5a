// The node budget and depth limit of a flow file, counted over yaml-cpp's parse events before any tree is
// built: a 1 KB file of nested anchors cannot make the reader walk a billion nodes.
#include "flow_budget.hpp"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/parser.h>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace flowline::detail {

namespace {

// Thrown from the event handler to stop the parse at the first bound broken.
struct OverBudget {
  Diagnostic diagnostic;
};

class BudgetCounter final : public YAML::EventHandler {
 public:
  BudgetCounter(const std::string& file, const FlowFileLimits& limits) : file_(file), limits_(limits) {}

  void OnDocumentStart(const YAML::Mark&) override {  // yaml-cpp numbers anchors anew in each document
    sizes_.clear();
    names_.clear();
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { leaf(mark, anchor, 1, 0); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor, const std::string& value) override {
    leaf(mark, anchor, 1, value.size());
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto name = names_.find(anchor);
    const std::string alias = name == names_.end() ? std::string("?") : name->second;
    for (const auto& open : stack_) {
      if (open.anchor == anchor) {
        // yaml-cpp would build a cyclic node, which every walk of the tree follows forever.
        fail(mark, fmt::format("alias '*{}' is inside the node it names (a cycle)", alias));
      }
    }
    const auto it = sizes_.find(anchor);
    const Size size = it == sizes_.end() ? Size{1, 0} : it->second;
    // The alias's expansion is what the reader walks; check it here, where the message can point.
    if (size.nodes > limits_.max_nodes || total_.nodes + size.nodes > limits_.max_nodes) {
      fail(mark, fmt::format("alias '*{}' would expand to more than {} nodes (a flow file may hold at most {} "
                             "nodes once its aliases are expanded)",
                             alias, limits_.max_nodes, limits_.max_nodes));
    }
    if (total_.bytes + size.bytes > max_text_bytes()) {
      fail(mark, fmt::format("alias '*{}' would expand to more than {} bytes of text (twice the file size limit)",
                             alias, max_text_bytes()));
    }
    leaf(mark, 0, size.nodes, size.bytes);
  }

  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value style) override {
    open(mark, anchor, style);
  }
  void OnSequenceEnd() override { close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value style) override {
    open(mark, anchor, style);
  }
  void OnMapEnd() override { close(); }
  void OnAnchor(const YAML::Mark&, const std::string& name) override { pending_name_ = name; }

 private:
  // What a node costs the reader once its aliases are expanded.
  struct Size {
    std::size_t nodes = 0, bytes = 0;  // bytes: of scalar text
  };
  struct Open {
    YAML::anchor_t anchor;
    Size size;  // so far, itself included
    YAML::Mark mark;
  };

  // A node that is not a container (or an alias, counted as what it expands to).
  void leaf(const YAML::Mark& mark, YAML::anchor_t anchor, std::size_t nodes, std::size_t bytes) {
    add(mark, Size{nodes, bytes});
    name(anchor);
    if (anchor) sizes_[anchor] = Size{nodes, bytes};
    if (!stack_.empty()) grow(stack_.back().size, Size{nodes, bytes});
  }

  void grow(Size& into, const Size& more) const {
    into.nodes = std::min(into.nodes + more.nodes, limits_.max_nodes + 1);
    into.bytes = std::min(into.bytes + more.bytes, max_text_bytes() + 1);
  }

  std::size_t max_text_bytes() const { return 2 * limits_.max_bytes; }

  // Deep nesting is reported where it starts: the outermost open flow collection ([ or {), where such
  // nesting is written, else the outermost open container.
  void open(const YAML::Mark& mark, YAML::anchor_t anchor, YAML::EmitterStyle::value style) {
    add(mark, Size{1, 0});
    name(anchor);
    if (stack_.size() >= limits_.max_depth) {
      const YAML::Mark start = first_flow_ ? stack_[*first_flow_].mark : stack_.front().mark;
      fail(start, fmt::format("nesting deeper than {} levels from here (level {} at {}:{}); a flow file may nest at "
                              "most {} levels",
                              limits_.max_depth, stack_.size() + 1, mark.line + 1, mark.column + 1, limits_.max_depth));
    }
    if (style == YAML::EmitterStyle::Flow && !first_flow_) first_flow_ = stack_.size();
    stack_.push_back(Open{anchor, Size{1, 0}, mark});
  }

  void close() {
    const Open done = stack_.back();
    stack_.pop_back();
    if (first_flow_ && *first_flow_ == stack_.size()) first_flow_.reset();
    if (done.anchor) sizes_[done.anchor] = done.size;
    if (!stack_.empty()) grow(stack_.back().size, done.size);
  }

  void add(const YAML::Mark& mark, const Size& size) {
    grow(total_, size);
    if (total_.nodes > limits_.max_nodes) {
      fail(mark, fmt::format("more than {} nodes (a flow file may hold at most {} nodes once its aliases are expanded)",
                             limits_.max_nodes, limits_.max_nodes));
    }
  }

  void name(YAML::anchor_t anchor) {
    if (anchor && !pending_name_.empty()) names_[anchor] = pending_name_;
    pending_name_.clear();
  }

  [[noreturn]] void fail(const YAML::Mark& mark, std::string message) {
    throw OverBudget{Diagnostic{SourceLocation{file_, mark.line + 1, mark.column + 1}, std::move(message)}};
  }

  const std::string& file_;
  const FlowFileLimits& limits_;
  Size total_;
  std::vector<Open> stack_;
  std::optional<std::size_t> first_flow_;  // the stack index of the outermost open flow collection
  std::map<YAML::anchor_t, Size> sizes_;
  std::map<YAML::anchor_t, std::string> names_;
  std::string pending_name_;
};

}  // namespace

std::optional<Diagnostic> check_flow_budget(std::string_view yaml_text, const std::string& file,
                                            const FlowFileLimits& limits) {
  std::istringstream in{std::string(yaml_text)};
  BudgetCounter counter(file, limits);
  try {
    YAML::Parser parser(in);
    while (parser.HandleNextDocument(counter)) {
    }
  } catch (const OverBudget& over) {
    return over.diagnostic;
  } catch (const YAML::Exception&) {
    // A syntax error: the reader reports it, with its place.
  }
  return std::nullopt;
}

void check_flow_size(std::uintmax_t bytes, const std::filesystem::path& file, const FlowFileLimits& limits) {
  if (bytes <= limits.max_bytes) return;
  throw ConfigError(
      {Diagnostic{SourceLocation{file.string(), 1, 1},
                  fmt::format("the flow file is {:.1f} MiB ({} bytes); flow files may be at most {:.1f} MiB ({} bytes; "
                              "--max-flow-bytes or FLOWLINE_MAX_FLOW_BYTES raises the limit)",
                              static_cast<double>(bytes) / (1 << 20), bytes,
                              static_cast<double>(limits.max_bytes) / (1 << 20), limits.max_bytes)}});
}

void check_flow_bounds(std::string_view yaml_text, const std::filesystem::path& file) {
  const FlowFileLimits limits = flow_file_limits();
  check_flow_size(yaml_text.size(), file, limits);
  if (auto over = check_flow_budget(yaml_text, file.string(), limits)) throw ConfigError({std::move(*over)});
}

}  // namespace flowline::detail
