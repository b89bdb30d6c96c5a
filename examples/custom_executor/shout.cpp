// A custom executor as a plugin: upper-cases texts and appends a suffix.
//
//   client ──► shout (Shout, from libshout.so) ──► responses
//
// It declares its parameter and endpoint in spec(), binds them in its constructor, and registers itself
// with FLOWLINE_PLUGIN. See docs/plugins.md.
#include <flowline/plugin.hpp>

#include <cctype>

namespace {

class Shout : public flowline::Executor {
 public:
  static flowline::ExecutorSpec spec() {
    return {"Shout",
            "Upper-case texts and add a suffix (example plugin)",
            {flowline::ParamSpec::optional("suffix", flowline::ParamType::String, "!", "appended to each text")},
            {"/shout"}};
  }
  explicit Shout(const flowline::ExecutorContext& context) : Executor(context) {
    suffix_ = params().get<std::string>("suffix");
    bind("/shout", &Shout::shout);
    bind_default(&Shout::shout);
  }

 private:
  void shout(flowline::DocumentArray& docs) {
    for (auto& d : docs) {
      for (auto& c : d.text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      d.text += suffix_;
    }
  }
  std::string suffix_;
};

}  // namespace

FLOWLINE_PLUGIN(registry) { registry.add<Shout>(); }
