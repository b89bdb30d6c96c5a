// Executors for tests and benchmarks only, never part of flowline::core (register_testing_executors):
//   SetTags    sets fixed tags (and optionally who processed the document)
//   Delay      sleeps per batch and per document, optionally only in one replica
//   FailIf     throws when a document's text contains a marker
//   LateSink   a resumable sink that says what it holds twice while starting, the second time late (`flowline
//              run --resume`'s fallback: the input read again from its start), and logs what it is handed
#include "testing_executors.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"
#include "flowline/resumable_sink.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace flowline::testing {
namespace {

class SetTags : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{
        "SetTags",
        "Set fixed tags on every document; optionally record the executor and replica that processed it",
        {ParamSpec::optional("tags", ParamType::Json, boost::json::object{}, "a map of tags to set"),
         ParamSpec::optional("record_replica", ParamType::Bool, false,
                             "set tags 'executor', 'replica' and 'device' to who processed the document")},
        {},
    };
  }
  explicit SetTags(const ExecutorContext& context) : Executor(context) {
    const auto tags = params().get<boost::json::value>("tags");
    if (!tags.is_object()) throw Error("parameter 'tags': expected a map");
    tags_ = tags.get_object();
    record_ = params().get<bool>("record_replica");
    bind_default(&SetTags::apply);
  }

 private:
  void apply(DocumentArray& docs) {
    for (auto& doc : docs) {
      for (const auto& [k, v] : tags_) doc.tags[k] = v;
      if (record_) {
        doc.tags["executor"] = runtime().name;
        doc.tags["replica"] = runtime().replica;
        doc.tags["device"] = runtime().device.str();
      }
    }
  }
  boost::json::object tags_;
  bool record_ = false;
};

class Delay : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{
        "Delay",
        "Sleep per batch and per document (a slow executor for tests and benchmarks)",
        {ParamSpec::optional("batch_ms", ParamType::Double, 0.0, "sleep per batch, in milliseconds"),
         ParamSpec::optional("doc_ms", ParamType::Double, 0.0, "sleep per document, in milliseconds"),
         ParamSpec::optional("slow_replica", ParamType::Int, -1, "only this replica sleeps batch_ms (-1: all)"),
         ParamSpec::optional("others_batch_ms", ParamType::Double, 0.0,
                             "sleep per batch of the replicas other than slow_replica, in milliseconds"),
         ParamSpec::optional("record_replica", ParamType::Bool, false,
                             "set tag 'replica' to the replica that processed the document")},
        {},
    };
  }
  explicit Delay(const ExecutorContext& context) : Executor(context) {
    batch_ms_ = params().get<double>("batch_ms");
    doc_ms_ = params().get<double>("doc_ms");
    record_ = params().get<bool>("record_replica");
    const int slow = params().get<int>("slow_replica");
    if (slow >= 0 && slow != runtime().replica) {
      batch_ms_ = params().get<double>("others_batch_ms");
      doc_ms_ = 0;
    }
    bind_default(&Delay::wait);
  }

 private:
  void wait(DocumentArray& docs) {
    const double ms = batch_ms_ + doc_ms_ * static_cast<double>(docs.size());
    if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
    if (record_) {
      for (auto& doc : docs) doc.tags["replica"] = runtime().replica;
    }
  }
  double batch_ms_ = 0, doc_ms_ = 0;
  bool record_ = false;
};

class FailIf : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{
        "FailIf",
        "Throw when a document's text contains a marker (for testing error handling)",
        {ParamSpec::optional("contains", ParamType::String, "FAIL", "the marker"),
         ParamSpec::optional("fail_in_constructor", ParamType::Bool, false, "throw while starting instead")},
        {},
    };
  }
  explicit FailIf(const ExecutorContext& context) : Executor(context) {
    if (params().get<bool>("fail_in_constructor")) throw Error("asked to fail in the constructor");
    marker_ = params().get<std::string>("contains");
    bind_default(&FailIf::check);
  }

 private:
  void check(DocumentArray& docs) {
    for (const auto& doc : docs) {
      if (doc.text.find(marker_) != std::string::npos) {
        throw Error(fmt::format("document {} contains '{}'", doc.id, marker_));
      }
    }
  }
  std::string marker_;
};

class LateSink : public Executor {
 public:
  static ExecutorSpec spec() {
    ExecutorSpec spec{
        "LateSink",
        "A resumable sink that keeps nothing: under --resume it says it holds `first` ({documents, last_id}) as it "
        "starts, then, `late_ms` later and still starting, `then` (a sink that publishes late); appends each "
        "request's resume point and document ids to `log` as a JSON line",
        {ParamSpec::optional("first", ParamType::Json, boost::json::object{}, "{documents, last_id} held first"),
         ParamSpec::optional("then", ParamType::Json, nullptr, "{documents, last_id} held late, or null"),
         ParamSpec::optional("late_ms", ParamType::Double, 0.0, "how long after `first` it says `then`"),
         ParamSpec::required_param("log", ParamType::String, "the file the requests are logged to")},
        {},
    };
    for (auto& p : resumable_sink_params()) spec.params.push_back(std::move(p));
    return spec;
  }
  explicit LateSink(const ExecutorContext& context)
      : Executor(context), progress_(params(), runtime().name), log_(params().get<std::string>("log")) {
    if (!progress_.resuming()) {
      progress_.held({});
    } else {
      progress_.held(point(params().get<boost::json::value>("first")));
      const auto then = params().get<boost::json::value>("then");
      if (!then.is_null()) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(params().get<double>("late_ms")));
        progress_.held(point(then));
      }
    }
    bind_default(&LateSink::take);
  }

 private:
  static SinkPoint point(const boost::json::value& v) {
    const auto* o = v.if_object();
    if (o == nullptr || !o->contains("documents") || !o->contains("last_id"))
      throw Error("LateSink: a point is {documents, last_id}");
    return {o->at("documents").to_number<std::uint64_t>(), std::string(o->at("last_id").as_string()), 0};
  }
  void take(DocumentArray& docs, const RequestInfo& request) {
    boost::json::array ids;
    for (const auto& doc : docs) ids.emplace_back(doc.id);
    const auto* from = request.parameters.if_contains(kResumeFromParam);
    const boost::json::object line{{"resume_from", from ? *from : boost::json::value(nullptr)}, {"ids", ids}};
    std::ofstream(log_, std::ios::app) << boost::json::serialize(line) << '\n';
  }
  SinkProgress progress_;
  std::string log_;
};

}  // namespace

void register_testing_executors(Registry& registry, const std::string& origin) {
  registry.add<SetTags>(origin);
  registry.add<Delay>(origin);
  registry.add<FailIf>(origin);
  registry.add<LateSink>(origin);
}

}  // namespace flowline::testing
