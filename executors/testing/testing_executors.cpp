// Small executors for tests, benchmarks and trying flows out without a model:
//   NoOp       passes documents through
//   TextStats  counts characters, words and lines into tags
//   SetTags    sets fixed tags (and optionally who processed the document)
//   Delay      sleeps per batch and per document, optionally differently per replica
//   FailIf     throws when a document's text contains a marker
#include "../builtin.hpp"

#include "flowline/error.hpp"
#include "flowline/executor.hpp"

#include <fmt/format.h>

#include <chrono>
#include <thread>

namespace flowline::builtin {
namespace {

class NoOp : public Executor {
 public:
  static ExecutorSpec spec() { return ExecutorSpec{"NoOp", "Pass documents through unchanged", {}, {}}; }
  explicit NoOp(const ExecutorContext& context) : Executor(context) {
    bind_default([](DocumentArray&, const RequestInfo&) {});
  }
};

class TextStats : public Executor {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{"TextStats", "Count characters (code points), words and lines of each text into tags", {}, {}};
  }
  explicit TextStats(const ExecutorContext& context) : Executor(context) { bind_default(&TextStats::count); }

 private:
  void count(DocumentArray& docs) {
    for (auto& doc : docs) {
      std::int64_t chars = 0, words = 0, lines = doc.text.empty() ? 0 : 1;
      bool in_word = false;
      for (char ch : doc.text) {
        const auto c = static_cast<unsigned char>(ch);
        chars += (c & 0xC0) != 0x80;
        lines += c == '\n';
        const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
        if (!space && !in_word) ++words;
        in_word = !space;
      }
      doc.tags["chars"] = chars;
      doc.tags["words"] = words;
      doc.tags["lines"] = lines;
    }
  }
};

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
         ParamSpec::optional("slow_replica", ParamType::Int, -1, "only this replica sleeps (-1: all)"),
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
    sleeps_ = slow < 0 || slow == runtime().replica;
    bind_default(&Delay::wait);
  }

 private:
  void wait(DocumentArray& docs) {
    if (sleeps_) {
      const double ms = batch_ms_ + doc_ms_ * static_cast<double>(docs.size());
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
    }
    if (record_) {
      for (auto& doc : docs) doc.tags["replica"] = runtime().replica;
    }
  }
  double batch_ms_ = 0, doc_ms_ = 0;
  bool sleeps_ = true;
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

void register_testing_executors(Registry& registry) {
  registry.add<NoOp>("built-in");
  registry.add<TextStats>("built-in");
  registry.add<SetTags>("built-in");
  registry.add<Delay>("built-in");
  registry.add<FailIf>("built-in");
}

}  // namespace flowline::builtin
