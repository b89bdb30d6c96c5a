// gRPC load generator for flowline's gateway speaking Jina's protocol (and for Jina's own gateway): S
// bidirectional jina.JinaRPC/Call streams, each with up to --window requests of --docs-per-request text
// documents unanswered, for a fixed time; prints requests/s, docs/s and latency quantiles. A load without
// Python's cost, to tell the server's ceiling from the Jina client's (bench/serve_grpc.py runs both).
//
//   build/bench/grpc_load --target 127.0.0.1:PORT [--streams 8] [--window 8] [--docs-per-request 100]
//       [--duration 10] [--warmup 1] [--endpoint /] [--texts FILE] [--json out.json]
//
// Every request carries the same --docs-per-request documents: the first lines of --texts (one text per
// line, repeated when there are fewer), or made-up short sentences without it.
//
// Contract: every stream opens at start; answers arriving in the first --warmup seconds are not counted;
// then --duration seconds are measured and answers inside that window count. Per stream one thread writes
// (blocking on the window and on HTTP/2 flow control) and one reads; latency runs from a request's write to
// its answer (answers come in request order). An answer whose header status is ERROR, or with a different
// number of documents than sent, is an error; a stream that ends with a status other than OK is reported.
#include "jina.grpc.pb.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string target;
  int streams = 8;
  int window = 8;
  int docs = 100;
  double duration = 10;
  double warmup = 1;
  std::string endpoint = "/";
  std::string texts;  // a file, one text per line
  std::string json;
};

struct StreamResult {
  std::uint64_t answers = 0, errors = 0;
  std::vector<double> latency_ms;
  std::string status;  // how the stream ended, when not OK
};

std::vector<std::string> read_texts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("--texts: cannot open '{}'", path));
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) texts.push_back(line);
  }
  if (texts.empty()) throw std::runtime_error(fmt::format("--texts: '{}' holds no text", path));
  return texts;
}

jina::DataRequestProto make_request(const Options& o) {
  const std::vector<std::string> texts = o.texts.empty() ? std::vector<std::string>() : read_texts(o.texts);
  jina::DataRequestProto r;
  r.mutable_header()->set_exec_endpoint(o.endpoint);
  auto* docs = r.mutable_data()->mutable_docs();
  for (int i = 0; i < o.docs; ++i) {
    auto& data = *docs->add_docs()->mutable_data();
    data["id"].set_text(fmt::format("doc-{}", i));
    data["id"].set_type("id");
    data["text"].set_text(texts.empty() ? fmt::format("sentence number {} is a short piece of text used for testing", i)
                                        : texts[static_cast<std::size_t>(i) % texts.size()]);
  }
  return r;
}

void run_stream(jina::JinaRPC::Stub& stub, const Options& o, const jina::DataRequestProto& request,
                Clock::time_point measure_from, Clock::time_point end, StreamResult& out) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + (end - Clock::now()) + std::chrono::seconds(30));
  auto stream = stub.Call(&context);
  std::mutex mutex;
  std::condition_variable room;
  std::deque<Clock::time_point> sent;  // write times of the unanswered requests, in order
  std::atomic<bool> done{false};
  std::thread writer([&] {
    while (Clock::now() < end) {
      {
        std::unique_lock lock(mutex);
        room.wait(lock, [&] { return sent.size() < static_cast<std::size_t>(o.window) || done; });
        if (done) break;
        sent.push_back(Clock::now());
      }
      if (!stream->Write(request)) break;
    }
    stream->WritesDone();
  });
  jina::DataRequestProto answer;
  while (stream->Read(&answer)) {
    const auto now = Clock::now();
    Clock::time_point at;
    {
      std::lock_guard lock(mutex);
      at = sent.front();
      sent.pop_front();
    }
    room.notify_one();
    const bool ok =
        answer.header().status().code() == jina::StatusProto::SUCCESS && answer.data().docs().docs_size() == o.docs;
    if (now >= measure_from && now < end) {
      if (ok) {
        out.answers++;
        out.latency_ms.push_back(std::chrono::duration<double, std::milli>(now - at).count());
      } else {
        out.errors++;
      }
    }
  }
  {
    std::lock_guard lock(mutex);
    done = true;
  }
  room.notify_all();
  writer.join();
  const grpc::Status status = stream->Finish();
  if (!status.ok()) out.status = fmt::format("{}: {}", static_cast<int>(status.error_code()), status.error_message());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("Jina-protocol gRPC load: streams of DataRequestProto to jina.JinaRPC/Call");
  app.add_option("--target", o.target, "HOST:PORT of the gateway")->required();
  app.add_option("--streams", o.streams, "concurrent streams (one connection each)")->check(CLI::Range(1, 1024));
  app.add_option("--window", o.window, "unanswered requests per stream")->check(CLI::Range(1, 1024));
  app.add_option("--docs-per-request", o.docs, "text documents per request")->check(CLI::Range(1, 100000));
  app.add_option("--duration", o.duration, "measured seconds");
  app.add_option("--warmup", o.warmup, "seconds before measuring");
  app.add_option("--endpoint", o.endpoint, "exec_endpoint of the requests");
  app.add_option("--texts", o.texts, "the documents' texts: a file, one per line")->check(CLI::ExistingFile);
  app.add_option("--json", o.json, "write the figures as JSON here too");
  CLI11_PARSE(app, argc, argv);

  jina::DataRequestProto request;
  try {
    request = make_request(o);
  } catch (const std::exception& e) {
    fmt::print(stderr, "grpc_load: {}\n", e.what());
    return 2;
  }
  const auto start = Clock::now();
  const auto measure_from =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.warmup));
  const auto end =
      measure_from + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration));
  std::vector<StreamResult> results(static_cast<std::size_t>(o.streams));
  std::vector<std::thread> threads;
  for (int s = 0; s < o.streams; ++s) {
    threads.emplace_back([&, s] {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(-1);
      args.SetInt("flowline.bench.stream", s);  // a channel (connection) per stream
      auto channel = grpc::CreateCustomChannel(o.target, grpc::InsecureChannelCredentials(), args);
      auto stub = jina::JinaRPC::NewStub(channel);
      run_stream(*stub, o, request, measure_from, end, results[static_cast<std::size_t>(s)]);
    });
  }
  for (auto& t : threads) t.join();

  std::uint64_t answers = 0, errors = 0;
  std::vector<double> latency;
  for (const auto& r : results) {
    answers += r.answers;
    errors += r.errors;
    latency.insert(latency.end(), r.latency_ms.begin(), r.latency_ms.end());
    if (!r.status.empty()) fmt::print(stderr, "grpc_load: a stream ended with {}\n", r.status);
  }
  std::sort(latency.begin(), latency.end());
  auto quantile = [&](double q) {
    return latency.empty() ? 0.0 : latency[std::min(latency.size() - 1, static_cast<std::size_t>(q * latency.size()))];
  };
  const double rps = static_cast<double>(answers) / o.duration;
  const std::string figures = fmt::format(
      R"({{"streams":{},"window":{},"docs_per_request":{},"seconds":{},"requests":{},"errors":{},)"
      R"("requests_per_s":{:.1f},"docs_per_s":{:.1f},"p50_ms":{:.2f},"p99_ms":{:.2f}}})",
      o.streams, o.window, o.docs, o.duration, answers, errors, rps, rps * o.docs, quantile(0.5), quantile(0.99));
  fmt::print("{}\n", figures);
  if (!o.json.empty()) {
    if (std::FILE* f = std::fopen(o.json.c_str(), "w")) {
      std::fputs(figures.c_str(), f);
      std::fclose(f);
    }
  }
  return errors == 0 ? 0 : 1;
}
