// Python classes as executors of flows in this process (flowline.Executor, python/flowline/_executors.py).
//
// _register_python_executor adds a Registry entry per class: its spec (the endpoints of its @requests
// handlers, its __init__ keywords as parameters of any JSON type) and a factory that builds a
// PythonExecutor. Replica threads are C++ threads: every touch of a Python object here takes the GIL
// (construction, each batch, close, destruction); the flow's own calls from Python release it first
// (module.cpp), so a handler never waits on the thread that posted.
#include "bindings.hpp"

#include "flowline/error.hpp"
#include "flowline/registry.hpp"

#include <fmt/format.h>
#include <nanobind/stl/string.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace flowline::python {
namespace {

// The message of the Python exception being handled, with the traceback's last frame (file:line in
// function): what a failed request's error carries.
std::string describe(nb::python_error& e) {
  std::string where;
  nb::handle tb = e.traceback();
  if (tb.ptr() != nullptr) {
    nb::object frame = nb::borrow(tb);
    while (!nb::getattr(frame, "tb_next").is_none()) frame = nb::getattr(frame, "tb_next");
    nb::object code = frame.attr("tb_frame").attr("f_code");
    where = fmt::format(" ({}:{} in {})", nb::cast<std::string>(code.attr("co_filename")),
                        nb::cast<int>(frame.attr("tb_lineno")), nb::cast<std::string>(code.attr("co_name")));
  }
  return fmt::format("{}: {}{}", nb::cast<std::string>(e.type().attr("__name__")),
                     nb::cast<std::string>(nb::str(e.value())), where);
}

// A handler's flowline.RequestError (python/flowline/_executors.py) is the request's own fault: it fails as
// flowline::RequestError (422 at a gateway, status 2 on the wire) with its message alone. Called holding the GIL.
[[noreturn]] void rethrow(nb::python_error& e) {
  nb::object request_error = nb::module_::import_("flowline._executors").attr("RequestError");
  if (e.matches(request_error)) throw RequestError(nb::cast<std::string>(nb::str(e.value())));
  throw Error(describe(e));
}

struct PythonType {
  nb::object cls;
  std::map<std::string, std::string> handlers;  // endpoint ("*": the default) -> method name
  nb::object call;                              // _executors._call
};

class PythonExecutor final : public Executor {
 public:
  PythonExecutor(const ExecutorContext& context, std::shared_ptr<PythonType> type) : Executor(context) {
    nb::gil_scoped_acquire gil;
    type_ = std::move(type);
    nb::dict kwargs;
    for (const auto& [name, value] : params().values()) {
      if (!value.is_null()) kwargs[nb::str(name.data(), name.size())] = json_to_python(value);
    }
    nb::dict runtime;
    runtime["name"] = context.runtime.name;
    runtime["replica"] = context.runtime.replica;
    runtime["replicas"] = context.runtime.replicas;
    runtime["device"] = context.runtime.device.str();
    kwargs["runtime"] = runtime;
    try {
      instance_ = type_->cls(**kwargs);
    } catch (nb::python_error& e) {
      throw Error(describe(e));
    }
    for (const auto& [endpoint, method] : type_->handlers) {
      Handler handler = [this, method = method](DocumentArray& docs, const RequestInfo& request) {
        run(method, docs, request);
      };
      if (endpoint == kDefaultEndpoint) {
        bind_default(std::move(handler));
      } else {
        bind(endpoint, std::move(handler));
      }
    }
  }

  ~PythonExecutor() override {
    nb::gil_scoped_acquire gil;
    instance_.reset();
    type_.reset();
  }

  void close() override {
    nb::gil_scoped_acquire gil;
    try {
      instance_.attr("close")();
    } catch (nb::python_error& e) {
      throw Error(describe(e));
    }
  }

 private:
  void run(const std::string& method, DocumentArray& docs, const RequestInfo& request) {
    nb::gil_scoped_acquire gil;
    nb::list list;
    for (Document& d : docs) list.append(nb::cast(std::move(d)));
    try {
      nb::object out = type_->call(instance_, method, list, json_to_python(boost::json::value(request.parameters)),
                                   nb::str(request.endpoint.data(), request.endpoint.size()));
      DocumentArray result;
      std::size_t i = 0;
      for (nb::handle item : out) result.push_back(document_from_python(item, i++));
      docs = std::move(result);
    } catch (nb::python_error& e) {
      restore(docs, list);
      rethrow(e);
    } catch (nb::builtin_exception& e) {
      restore(docs, list);
      throw Error(fmt::format("the handler's result: {}", e.what()));
    }
  }

  // A failed handler hands its documents back as it left them (as a C++ handler does): the flow runs a
  // failed merged batch again request by request, and the requests that did not fail need their documents.
  static void restore(DocumentArray& docs, const nb::list& list) {
    if (list.size() != docs.size()) return;  // the handler changed the list's length: the count check fails it
    for (std::size_t i = 0; i < docs.size(); ++i) {
      if (nb::isinstance<Document>(list[i])) docs[i] = nb::cast<const Document&>(list[i]);
    }
  }

  std::shared_ptr<PythonType> type_;
  nb::object instance_;
};

// Classes by name, so that a class defined again under the same name (a notebook cell run twice) builds
// its new definition; the spec stays the first one's, and a different spec is refused. Never destroyed:
// the registry keeps the types to the end of the process, and a Python reference must not be dropped by a
// C++ static destructor after the interpreter has finalised.
std::mutex types_mutex;
auto& types = *new std::map<std::string, std::shared_ptr<PythonType>>();
auto& spec_keys = *new std::map<std::string, std::string>();

void register_python_executor(const std::string& name, nb::object cls, const std::string& help, nb::dict handlers,
                              nb::list params, nb::object call) {
  auto type = std::make_shared<PythonType>();
  type->cls = std::move(cls);
  type->call = std::move(call);
  ExecutorSpec spec;
  spec.name = name;
  spec.help = help;
  spec.default_endpoint = false;
  std::string key;
  for (auto [endpoint, method] : handlers) {
    const auto e = nb::cast<std::string>(endpoint);
    type->handlers[e] = nb::cast<std::string>(method);
    if (e == kDefaultEndpoint) {
      spec.default_endpoint = true;
    } else {
      spec.endpoints.push_back(e);
    }
    key += e + ";";
  }
  for (nb::handle p : params) {
    ParamSpec param;
    param.name = nb::cast<std::string>(p[0]);
    param.type = ParamType::Json;
    param.required = nb::cast<bool>(p[1]);
    param.default_value = python_to_json(p[2], fmt::format("{}.__init__'s default of {}", name, param.name));
    param.help = "a keyword of __init__";
    key += param.name + (param.required ? "!" : "") + ",";
    spec.params.push_back(std::move(param));
  }
  std::lock_guard lock(types_mutex);
  if (auto known = spec_keys.find(name); known != spec_keys.end()) {
    if (known->second != key) {
      throw Error(
          fmt::format("Python executor '{}' is defined again with other endpoints or __init__ keywords; "
                      "a flow's executor types are fixed once defined: give it another name",
                      name));
    }
    types[name] = type;
    return;
  }
  spec_keys[name] = key;
  types[name] = type;
  Registry::global().add(
      spec,
      [name](const ExecutorContext& context) -> std::unique_ptr<Executor> {
        std::shared_ptr<PythonType> current;
        {
          std::lock_guard lock(types_mutex);
          current = types.at(name);
        }
        return std::make_unique<PythonExecutor>(context, std::move(current));
      },
      "python");
}

}  // namespace

void bind_executors(nb::module_& m) {
  m.def("_register_python_executor", &register_python_executor, nb::arg("name"), nb::arg("cls"), nb::arg("help"),
        nb::arg("handlers"), nb::arg("params"), nb::arg("call"));
}

}  // namespace flowline::python
