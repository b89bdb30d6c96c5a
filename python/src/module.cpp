// flowline._flowline: the extension module under the Python package `flowline` (python/flowline/__init__.py).
//
// Flow wraps flowline::Flow. Its methods convert their Python arguments while holding the GIL, release it
// for everything the C++ flow does (loading, starting, posting, closing), and take it back to build the
// results, so several Python threads may post at once and run in parallel inside the flow. flowline::Error
// becomes flowline.FlowError (ConfigError, a subclass, for a bad flow file or override); a Python argument
// of the wrong type a TypeError naming it.
#include "bindings.hpp"

#include "flowline/error.hpp"
#include "flowline/flow_stats_json.hpp"
#include "flowline/executor_server.hpp"
#include "flowline/flow.hpp"
#include "flowline/io.hpp"
#include "flowline/model_folder.hpp"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace flowline::python {
namespace {

std::string fspath(nb::handle path) { return nb::cast<std::string>(nb::module_::import_("os").attr("fspath")(path)); }

PyObject* flow_error_type = nullptr;
PyObject* config_error_type = nullptr;

// encode()'s input: the texts of a Python list (every item a str, checked before), converted into documents as
// the flow reads them, on the posting thread with the GIL taken for the conversion alone. A text that does not
// convert (a lone surrogate has no UTF-8) ends the input there and leaves `error`; the flow answers what it read.
// Made, used and destroyed on one thread, which holds the GIL at its construction and destruction.
class TextSource : public DocumentSource {
 public:
  explicit TextSource(nb::list texts) : texts_(std::move(texts)), size_(nb::len(texts_)) {}
  std::size_t read(DocumentArray& out, std::size_t max) override {
    if (!error.empty() || next_ >= size_) return 0;
    nb::gil_scoped_acquire gil;
    const std::size_t first = next_, end = std::min(size_, next_ + max);
    for (; next_ < end; ++next_) {
      Py_ssize_t length = 0;
      const char* utf8 = PyUnicode_AsUTF8AndSize(texts_[next_].ptr(), &length);
      if (utf8 == nullptr) {
        error = fmt::format("sentences[{}]: {}", next_, nb::python_error().what());
        break;
      }
      out.push_back(Document(std::string(utf8, static_cast<std::size_t>(length))));
    }
    return next_ - first;
  }
  std::string error;

 private:
  nb::list texts_;
  std::size_t size_;
  std::size_t next_ = 0;
};

// encode()'s output: each answer's embeddings copied, in input order, into one CPU tensor of a row per text, on
// the posting thread as the answers arrive (Flow::post calls take() in input order); the documents are dropped
// with the answer. What goes wrong is kept, not thrown (take() runs inside the flow's post), and result() raises it.
class EmbeddingRows {
 public:
  explicit EmbeddingRows(std::size_t texts) : texts_(texts) {}
  void take(Response&& r) {
    if (!r.ok()) {
      if (!failed_) failed_.emplace(r.error_executor, r.error);
    } else if (problem_.empty()) {
      for (std::size_t i = 0; i < r.docs.size(); ++i) copy(r.docs[i].embedding, row_ + i);
    }
    row_ += r.docs.size();
  }
  // Holds the GIL: the [N, D] array, None for no text; raises FlowError for a failed request, ValueError for a
  // text without an embedding.
  nb::object result() {
    if (failed_) throw *failed_;
    if (!problem_.empty()) throw nb::value_error(problem_.c_str());
    if (row_ != texts_) throw Error(fmt::format("the flow answered {} documents for {} texts", row_, texts_));
    if (!matrix_.defined()) return nb::none();
    return tensor_to_numpy(matrix_);
  }

 private:
  void copy(const at::Tensor& e, std::size_t row) {
    if (!e.defined()) {
      problem_ =
          fmt::format("sentences[{}]: the encoder gave it no embedding (an empty text has none in flowline)", row);
      return;
    }
    if (row >= texts_) return;  // more documents than texts: result() says so
    if (!matrix_.defined()) {
      std::vector<std::int64_t> shape{static_cast<std::int64_t>(texts_)};
      shape.insert(shape.end(), e.sizes().begin(), e.sizes().end());
      matrix_ = at::empty(shape, e.options().device(at::kCPU));
      row_bytes_ = static_cast<std::size_t>(e.numel()) * e.element_size();
    }
    if (e.sizes() != matrix_.sizes().slice(1) || e.scalar_type() != matrix_.scalar_type()) {
      problem_ = fmt::format("sentences[{}]: an embedding of shape {} and dtype {}, where the first was {} and {}", row,
                             c10::str(e.sizes()), c10::toString(e.scalar_type()), c10::str(matrix_.sizes().slice(1)),
                             c10::toString(matrix_.scalar_type()));
      return;
    }
    if (e.is_cpu() && e.is_contiguous()) {
      std::memcpy(static_cast<std::uint8_t*>(matrix_.data_ptr()) + row * row_bytes_, e.data_ptr(), row_bytes_);
    } else {
      matrix_.select(0, static_cast<std::int64_t>(row)).copy_(e);
    }
  }

  std::size_t texts_;
  std::size_t row_ = 0;  // documents answered so far
  std::size_t row_bytes_ = 0;
  at::Tensor matrix_;
  std::optional<ExecutorError> failed_;
  std::string problem_;
};

// A started flowline::Flow owned by a Python object. Flow's own post() and close() are thread-safe; this
// adds only the refusal to post once closed (Flow would start again).
class PythonFlow {
 public:
  // Starting and destroying a flow run with the GIL released: Python executors' replica threads take it
  // (executors.cpp), so a thread holding it while it waits for them would never see them finish.
  explicit PythonFlow(FlowConfig config) {
    nb::gil_scoped_release released;
    auto flow = std::make_unique<Flow>(std::move(config));
    try {
      flow->start();
    } catch (...) {
      flow.reset();
      throw;
    }
    flow_ = std::move(flow);
    std::lock_guard lock(open_mutex);
    open_flows.insert(this);
  }
  ~PythonFlow() {
    {
      std::lock_guard lock(open_mutex);
      open_flows.erase(this);
    }
    nb::gil_scoped_release released;
    flow_.reset();
  }

  // Closes every flow still open: flowline/__init__.py registers it with atexit, so that a flow left open
  // completes its outputs and joins its threads before the interpreter finalises.
  static void close_all() {
    std::vector<PythonFlow*> flows;
    {
      std::lock_guard lock(open_mutex);
      flows.assign(open_flows.begin(), open_flows.end());
    }
    for (PythonFlow* f : flows) f->close(true);
  }
  PythonFlow(const PythonFlow&) = delete;
  PythonFlow& operator=(const PythonFlow&) = delete;

  static std::unique_ptr<PythonFlow> load(const std::filesystem::path& path, nb::handle overrides) {
    std::vector<std::string> sets;
    if (!overrides.is_none()) {
      if (!nb::isinstance<nb::dict>(overrides)) {
        throw nb::type_error("overrides: expected a dict of 'executor.parameter': value, as --set takes");
      }
      for (auto [key, value] : nb::borrow<nb::dict>(overrides)) {
        if (!nb::isinstance<nb::str>(key)) throw nb::type_error("overrides: keys must be str ('executor.parameter')");
        sets.push_back(nb::cast<std::string>(key) + "=" + yaml_scalar(value));
      }
    }
    FlowConfig config;
    {
      nb::gil_scoped_release released;
      config = load_flow_config(path);
      for (const auto& s : sets) set_executor_parameter(config, s);
      if (!sets.empty()) validate_flow_config(config);
    }
    return std::make_unique<PythonFlow>(std::move(config));
  }

  static std::unique_ptr<PythonFlow> from_text(const std::string& yaml, const std::filesystem::path& file) {
    FlowConfig config;
    {
      nb::gil_scoped_release released;
      config = load_flow_config_text(yaml, file);
    }
    return std::make_unique<PythonFlow>(std::move(config));
  }

  DocumentArray run(const std::string& endpoint, DocumentArray docs, nb::handle parameters, nb::handle request_size) {
    const PostOptions options = post_options(parameters, request_size);
    nb::gil_scoped_release released;
    return flow_->post(endpoint, std::move(docs), options);
  }

  // A flowline.DocumentList (python/flowline/_document_list.py: a list with docarray's bulk accessors).
  nb::object post(const std::string& endpoint, nb::handle inputs, nb::handle parameters, nb::handle request_size) {
    DocumentArray docs = documents_from_inputs(inputs);
    DocumentArray results = run(endpoint, std::move(docs), parameters, request_size);
    nb::list out;
    for (Document& d : results) out.append(nb::cast(std::move(d)));
    return nb::module_::import_("flowline._document_list").attr("DocumentList")(out);
  }

  // The texts' embeddings as one [N, D] numpy array (the SentenceEncoder's fast path: no Python document per
  // text). Streamed: the flow asks TextSource for each request's texts on this thread, which converts them then
  // (taking the GIL for that alone), and each answer's embeddings are copied into the result as it arrives and its
  // documents dropped, so converting, encoding and collecting overlap instead of running one after another (all
  // texts converted, then encoded, then stacked: 0.7 of `flowline run`'s speed on an H200). A text that gets no
  // embedding is a ValueError naming it.
  nb::object encode(const std::string& endpoint, nb::handle texts, nb::handle parameters, nb::handle request_size) {
    nb::list items = nb::isinstance<nb::list>(texts) ? nb::borrow<nb::list>(texts)
                                                     : nb::steal<nb::list>(PySequence_List(texts.ptr()));
    if (!items.is_valid()) throw nb::python_error();
    const std::size_t n = nb::len(items);
    for (std::size_t i = 0; i < n; ++i) {
      if (!nb::isinstance<nb::str>(items[i])) {
        throw nb::type_error(
            fmt::format("sentences[{}]: expected a str, not {}", i, nb::type_name(items[i].type()).c_str()).c_str());
      }
    }
    const PostOptions options = post_options(parameters, request_size);
    TextSource source(items);
    EmbeddingRows rows(n);
    {
      nb::gil_scoped_release released;
      flow_->post(
          endpoint, source, [&rows](Response&& r) { rows.take(std::move(r)); }, options);
    }
    if (!source.error.empty()) throw nb::value_error(source.error.c_str());
    return rows.result();
  }

  void close(bool complete) {
    closed_ = true;
    nb::gil_scoped_release released;
    flow_->close(complete ? RunOutcome::Complete : RunOutcome::Incomplete);
  }
  bool closed() const { return closed_; }
  Flow& flow() { return *flow_; }

  // Flow::stats() as plain Python values, in the form `run --stats-json` writes (flowline::stats_json): each
  // replica's documents, batches, errors, batch times, GPU memory and metrics, each executor's batch times over
  // its replicas, remote hosts, devices, the process's peak RSS.
  nb::dict stats() const {
    FlowStats s;
    {
      nb::gil_scoped_release released;
      s = flow_->stats();
    }
    return nb::borrow<nb::dict>(json_to_python(stats_json(s)));
  }

 private:
  PostOptions post_options(nb::handle parameters, nb::handle request_size) const {
    PostOptions options;
    if (!parameters.is_none()) options.parameters = python_to_json_object(parameters, "parameters");
    if (!request_size.is_none()) {
      const long long n = nb::cast<long long>(request_size);
      if (n < 1) throw nb::value_error(fmt::format("request_size: expected an int >= 1, not {}", n).c_str());
      options.request_size = static_cast<std::size_t>(n);
    }
    if (closed_) throw Error("flowline.Flow: post() after close(): the flow is closed");
    return options;
  }

  static std::string yaml_scalar(nb::handle value) {
    if (PyBool_Check(value.ptr())) return value.ptr() == Py_True ? "true" : "false";
    if (nb::hasattr(value, "__fspath__")) return fspath(value);
    return nb::cast<std::string>(nb::str(value));
  }

  static DocumentArray documents_from_inputs(nb::handle inputs) {
    if (nb::isinstance<nb::str>(inputs) || nb::isinstance<nb::dict>(inputs) || nb::isinstance<Document>(inputs)) {
      DocumentArray one;
      one.push_back(document_from_python(inputs, 0));
      return one;
    }
    if (!nb::hasattr(inputs, "__iter__")) {
      throw nb::type_error(fmt::format("inputs: expected a list of str, dict or flowline.Document, not {}",
                                       nb::type_name(inputs.type()).c_str())
                               .c_str());
    }
    DocumentArray docs;
    std::size_t i = 0;
    for (nb::handle item : inputs) docs.push_back(document_from_python(item, i++));
    return docs;
  }

  static inline std::mutex open_mutex;
  static inline std::set<PythonFlow*> open_flows;

  std::unique_ptr<Flow> flow_;
  std::atomic<bool> closed_{false};
};

// One executor of a PythonFlow served over flowline's binary protocol (python -m flowline.worker). The
// Python object keeps its flow alive (keep_alive); stop() and the destructor release the GIL, since
// answering what is in flight may need Python executors' handlers.
class PythonServer {
 public:
  PythonServer(PythonFlow& flow, const std::string& executor, const std::string& host, int port)
      : server_(flow.flow(), executor) {
    if (port < 0 || port > 65535) throw nb::value_error(fmt::format("port: {} is no TCP port", port).c_str());
    ExecutorServerOptions options;
    options.host = host;
    options.port = static_cast<std::uint16_t>(port);
    nb::gil_scoped_release released;
    server_.start(options);
  }
  ~PythonServer() { stop(); }
  PythonServer(const PythonServer&) = delete;
  PythonServer& operator=(const PythonServer&) = delete;
  int port() const { return server_.port(); }
  void stop() {
    nb::gil_scoped_release released;
    server_.stop();
  }

 private:
  ExecutorServer server_;
};

void register_errors(nb::module_& m) {
  flow_error_type = PyErr_NewExceptionWithDoc("flowline.FlowError", "flowline's C++ side refused or failed",
                                              PyExc_RuntimeError, nullptr);
  config_error_type = PyErr_NewExceptionWithDoc("flowline.ConfigError",
                                                "a flow file or override is wrong (every problem, with file:line:col)",
                                                flow_error_type, nullptr);
  m.attr("FlowError") = nb::handle(flow_error_type);
  m.attr("ConfigError") = nb::handle(config_error_type);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      PyErr_SetString(config_error_type, e.what());
    } catch (const Error& e) {
      PyErr_SetString(flow_error_type, e.what());
    }
  });
}

}  // namespace

// The spdlog level `name` names, or nothing (spdlog's from_str reads an unknown name as "off").
std::optional<spdlog::level::level_enum> log_level_named(const std::string& name) {
  const auto parsed = spdlog::level::from_str(name);
  if (parsed == spdlog::level::off && name != "off") return std::nullopt;
  return parsed;
}

constexpr const char* kLogLevels = "trace, debug, info, warn, error, critical or off";

void set_log_level(const std::string& level) {
  const auto parsed = log_level_named(level);
  if (!parsed) throw nanobind::value_error(fmt::format("log level '{}': expected {}", level, kLogLevels).c_str());
  spdlog::set_level(*parsed);
}

// At import: FLOWLINE_LOG_LEVEL's level, else warnings and errors only.
void set_log_level_from_environment() {
  const char* given = std::getenv("FLOWLINE_LOG_LEVEL");
  if (given == nullptr || *given == '\0') return spdlog::set_level(spdlog::level::warn);
  const auto parsed = log_level_named(given);
  if (!parsed) {
    throw nanobind::value_error(
        fmt::format("FLOWLINE_LOG_LEVEL='{}' in the environment: expected {}", given, kLogLevels).c_str());
  }
  spdlog::set_level(*parsed);
}

}  // namespace flowline::python

NB_MODULE(_flowline, m) {
  using flowline::python::PythonFlow;
  namespace nb = nanobind;
  m.doc() = "flowline's C++ library: Flow and Document (the package flowline wraps these)";
  // Executor types defined in Python stay in the process-wide registry, and flows left open at exit are
  // closed by atexit but not freed: nanobind would report both as leaks at exit.
  nb::set_leak_warnings(false);
  // flowline's log (spdlog's default logger) goes to standard error, where Python's own warnings go; standard
  // output stays the program's. Warnings and errors only, as Python's logging and the flowline launcher show by
  // default; flowline.set_log_level() (or FLOWLINE_LOG_LEVEL, read here) shows more.
  auto logger = std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  spdlog::set_default_logger(std::move(logger));
  flowline::python::set_log_level_from_environment();
  m.def("set_log_level", &flowline::python::set_log_level, nb::arg("level"),
        "The level of flowline's log on standard error: trace, debug, info, warn, error, critical or off");
  flowline::python::register_errors(m);
  m.def("_close_all_flows", &PythonFlow::close_all);
  m.def(
      "_locate_model",
      [](const std::string& written) {
        const auto where = flowline::locate_model(written, std::filesystem::absolute(written));
        return std::make_pair(where.folder.string(), where.problem);
      },
      nb::arg("model"),
      "(folder, problem): the folder a `model` parameter names, as the executors find it (a path, else a name "
      "ORG/NAME in the local Hugging Face cache); problem is empty when it was found");
  flowline::python::bind_documents(m);
  flowline::python::bind_executors(m);
  nb::class_<flowline::python::PythonServer>(m, "_ExecutorServer")
      .def_prop_ro("port", &flowline::python::PythonServer::port)
      .def("stop", &flowline::python::PythonServer::stop);
  nb::class_<PythonFlow>(m, "Flow")
      .def_static(
          "load",
          [](nb::handle path, nb::handle overrides) {
            return PythonFlow::load(flowline::python::fspath(path), overrides);
          },
          nb::arg("path"), nb::arg("overrides") = nb::none(),
          "Loads, validates and starts a YAML flow; overrides are the launcher's --set: "
          "{'encoder.model': DIR}.")
      .def_static(
          "from_yaml",
          [](const std::string& yaml, nb::handle file) {
            return PythonFlow::from_text(yaml, flowline::python::fspath(file));
          },
          nb::arg("yaml"), nb::arg("file"),
          "A flow from YAML text; `file` names it in messages and anchors its relative paths.")
      .def("post", &PythonFlow::post, nb::arg("endpoint"), nb::arg("inputs"), nb::arg("parameters") = nb::none(),
           nb::arg("request_size") = nb::none(),
           "Posts the inputs (str, dict in Jina's JSON shape or flowline.Document, one or a list) and returns "
           "the resulting Documents in order. Raises FlowError for the first request an executor failed.")
      .def("_encode", &PythonFlow::encode, nb::arg("endpoint"), nb::arg("texts"), nb::arg("parameters") = nb::none(),
           nb::arg("request_size") = nb::none())
      .def("close", &PythonFlow::close, nb::arg("complete") = true,
           "Waits for posts in flight, closes the executors and joins their threads. Idempotent.")
      .def_prop_ro("closed", &PythonFlow::closed)
      .def("stats", &PythonFlow::stats,
           "What the replicas have done (Flow::stats()): {'replicas': [...], 'executors': [...], 'host_peak_rss_mb'}.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "_serve",
          [](PythonFlow& flow, const std::string& executor, const std::string& host, int port) {
            return std::make_unique<flowline::python::PythonServer>(flow, executor, host, port);
          },
          nb::arg("executor"), nb::arg("host") = "127.0.0.1", nb::arg("port") = 0, nb::keep_alive<0, 1>(),
          "Serves one executor of this flow to other flows (their `hosts:`) until stop(); port 0: a free one.")
      .def(
          "__exit__", [](PythonFlow& self, nb::handle type, nb::handle, nb::handle) { self.close(type.is_none()); },
          nb::arg("type").none(), nb::arg("value").none(), nb::arg("traceback").none());
}
