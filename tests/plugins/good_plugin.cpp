// A plugin with one executor, Upper, which upper-cases ASCII text on "/upper" and by default.
#include <flowline/plugin.hpp>

#include <cctype>

namespace {

class Upper : public flowline::Executor {
 public:
  static flowline::ExecutorSpec spec() {
    return {"Upper",
            "Upper-case ASCII letters (test plugin)",
            {flowline::ParamSpec::optional("suffix", flowline::ParamType::String, "", "appended to each text")},
            {"/upper"}};
  }
  explicit Upper(const flowline::ExecutorContext& context) : Executor(context) {
    suffix_ = params().get<std::string>("suffix");
    bind("/upper", &Upper::upper);
    bind_default(&Upper::upper);
  }

 private:
  void upper(flowline::DocumentArray& docs) {
    for (auto& d : docs) {
      for (auto& c : d.text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      d.text += suffix_;
    }
  }
  std::string suffix_;
};

}  // namespace

FLOWLINE_PLUGIN(registry) { registry.add<Upper>("plugin"); }
