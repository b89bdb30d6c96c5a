// Executors for tests and benchmarks only, never part of flowline::core (register_testing_executors):
//   SetTags    sets fixed tags (and optionally who processed the document)
//   Delay      sleeps per batch and per document, optionally only in one replica
//   FailIf     throws when a document's text contains a marker
#include "testing_executors.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"

#include <fmt/format.h>

#include <chrono>
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

}  // namespace

void register_testing_executors(Registry& registry, const std::string& origin) {
  registry.add<SetTags>(origin);
  registry.add<Delay>(origin);
  registry.add<FailIf>(origin);
}

}  // namespace flowline::testing
