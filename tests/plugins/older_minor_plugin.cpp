// A plugin of this major plugin API version built for its first minor version (4.0): it declares no request
// parameters, reads its request's parameters itself, and must load and run on this flowline unchanged.
#include <flowline/plugin.hpp>

namespace {
class OldStyle : public flowline::Executor {
 public:
  static flowline::ExecutorSpec spec() { return {"OldStyle", "an executor of plugin API 4.0", {}, {"/tag"}}; }
  explicit OldStyle(const flowline::ExecutorContext& c) : Executor(c) {
    bind("/tag", [](flowline::DocumentArray& docs, const flowline::RequestInfo& request) {
      const auto* v = request.parameters.if_contains("value");  // unchecked: as 4.0 handlers read them
      for (auto& d : docs) d.tags["value"] = v ? *v : boost::json::value("none");
    });
    bind_default([](flowline::DocumentArray&, const flowline::RequestInfo&) {});
  }
};
}  // namespace

FLOWLINE_PLUGIN_EXPORT int flowline_plugin_api_version() { return FLOWLINE_PLUGIN_API_VERSION_MAJOR * 1000; }
FLOWLINE_PLUGIN_EXPORT void flowline_plugin_register(flowline::Registry& registry) { registry.add<OldStyle>(); }
