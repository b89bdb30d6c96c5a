// Compatibility of `flowline serve` with software it did not write: Jina's own Python client, the openai,
// cohere and huggingface_hub packages and a real Prometheus server, each against the launcher run as a child process on
// a loopback port it picks itself (--port 0 --ready-file). The Python clients live in .venv-clients
// (scripts/setup-clients.sh) and Prometheus is Debian's package; without them the tests skip, except under CI=true,
// where they fail.
#include "child_process.hpp"
#include "ci.hpp"
#include "flowline/gateway.hpp"
#include "http_call.hpp"
#include "test_support.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <thread>

using namespace flowline;
using testing::ChildProcess;
using testing::describe_status;
using testing::eventually;
using testing::running_in_ci;
using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

const fs::path kSource(FLOWLINE_SOURCE_DIR);
const fs::path kClientsPython = kSource / ".venv-clients/bin/python";
const fs::path kClientScripts = kSource / "tests/gateway/clients";
const fs::path kModel = kSource / "models/all-MiniLM-L6-v2";
const fs::path kGoldens = kSource / "tests/data/goldens";
constexpr int kDim = 384;

// ---- prerequisites: skip where they are missing, fail under CI ----------------------------------------------

std::optional<fs::path> on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (std::size_t start = 0; start <= dirs.size();) {
    const auto end = std::min(dirs.find(':', start), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(start, end - start)) / program;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return std::nullopt;
}

// What the Python client tests need and this machine lacks, as a sentence; empty when nothing is missing.
std::string missing_for_python_clients() {
  std::string missing;
  if (::access(kClientsPython.c_str(), X_OK) != 0)
    missing += fmt::format("{} does not exist (run scripts/setup-clients.sh)", kClientsPython.string());
  if (!fs::exists(kModel / "model.safetensors"))
    missing +=
        fmt::format("{}{} is not there (scripts/setup.sh puts it there)", missing.empty() ? "" : "; ", kModel.string());
  return missing;
}

std::string why_not_skipped() {
  return "; CI=true is set, so this fails instead of skipping (scripts/run-tests.sh sets all of it up)";
}

}  // namespace

// Skips the test case with `missing` as the reason, or fails it under CI=true. A macro: FLOWLINE_SKIP returns
// from the test case itself on Catch2 v2.
#define SKIP_OR_FAIL_WHEN_MISSING(missing)                     \
  do {                                                         \
    const std::string missing_ = (missing);                    \
    if (!missing_.empty()) {                                   \
      if (running_in_ci()) FAIL(missing_ + why_not_skipped()); \
      FLOWLINE_SKIP(missing_);                                 \
    }                                                          \
  } while (false)

namespace {

// `flowline serve FLOW --port 0 --ready-file FILE`, waited for until the ready file holds the port.
class Server {
 public:
  // With `grpc`, also Jina's gRPC on a free port (--grpc-port 0), which the ready file's second line gives.
  Server(const fs::path& flow, const fs::path& dir, bool grpc = false)
      : process_(arguments(flow, dir, grpc), dir / "serve.log") {
    const fs::path ready = dir / "port";
    port_ = static_cast<std::uint16_t>(testing::wait_for_port(process_, ready, 120s));
    INFO("flowline serve's output:\n" << process_.log());
    if (!process_.running()) FAIL("flowline serve ended before it was ready (" << process_.ended() << ")");
    if (port_ == 0) FAIL("flowline serve did not write its ready file " << ready << " within 120 s");
    if (grpc) {
      const std::string text = testing::read_text(ready);
      grpc_port_ = static_cast<std::uint16_t>(std::stoi(text.substr(text.find('\n') + 1)));
    }
  }
  std::uint16_t port() const { return port_; }
  std::uint16_t grpc_port() const { return grpc_port_; }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  std::string log() const { return process_.log(); }
  // SIGTERM: the server drains and must exit 0 within 30 s.
  void stop_and_check_clean_exit() {
    const int status = process_.stop(30s);
    INFO("flowline serve's output:\n" << process_.log());
    INFO("flowline serve on SIGTERM: " << describe_status(status)
                                       << (process_.was_killed() ? " (SIGKILL after 30 s)" : ""));
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

 private:
  static std::vector<std::string> arguments(const fs::path& flow, const fs::path& dir, bool grpc) {
    std::vector<std::string> args{FLOWLINE_LAUNCHER,      "serve", flow.string(), "--port", "0", "--ready-file",
                                  (dir / "port").string()};
    if (grpc) args.insert(args.end(), {"--grpc-port", "0"});
    return args;
  }

  ChildProcess process_;
  std::uint16_t port_ = 0;
  std::uint16_t grpc_port_ = 0;
};

// A loopback TCP port that was free a moment ago: bound with port 0, read back, closed.
std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  REQUIRE(ok);
  return ntohs(addr.sin_port);
}

// ---- HTTP -------------------------------------------------------------------------------------------------

using Reply = testing::HttpReply;
using testing::http_call;

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

// ---- the reference embeddings (sentence-transformers' own numbers) ------------------------------------------

// Writes {"text": [384 floats], ...} for the golden texts at `rows` of tests/data/goldens: the texts of
// embedding_texts.jsonl and the float32 [N, 384] tensor "embeddings" that scripts/make_goldens.py wrote with
// sentence-transformers. The safetensors file is read here, not through flowline's reader.
void write_reference(const fs::path& path, const std::vector<std::size_t>& rows) {
  std::vector<std::string> texts;
  std::ifstream lines(kGoldens / "embedding_texts.jsonl");
  for (std::string line; std::getline(lines, line);) texts.emplace_back(json::parse(line).at("text").as_string());
  const std::string file = testing::read_text(kGoldens / "embeddings.safetensors");
  REQUIRE(file.size() > 8);
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, file.data(), 8);  // little-endian, as this machine
  REQUIRE(file.size() >= 8 + header_size);
  const json::value header = json::parse(file.substr(8, header_size));
  const json::object& entry = header.at("embeddings").as_object();
  REQUIRE(entry.at("dtype").as_string() == "F32");
  const auto& shape = entry.at("shape").as_array();
  REQUIRE(shape.at(0).to_number<std::size_t>() == texts.size());
  REQUIRE(shape.at(1).to_number<int>() == kDim);
  const std::size_t begin = 8 + header_size + entry.at("data_offsets").as_array().at(0).to_number<std::size_t>();
  REQUIRE(begin + texts.size() * kDim * sizeof(float) <= file.size());
  json::object reference;
  for (const std::size_t row : rows) {
    REQUIRE(row < texts.size());
    json::array values;
    for (int j = 0; j < kDim; ++j) {
      float v = 0;
      std::memcpy(&v, file.data() + begin + (row * kDim + j) * sizeof(float), sizeof v);
      values.push_back(static_cast<double>(v));
    }
    reference[texts[row]] = std::move(values);
  }
  testing::write_text(path, json::serialize(reference));
}

// A flow with the real all-MiniLM-L6-v2 on the CPU, as flows/encode.yml has it.
fs::path write_encoder_flow(const fs::path& dir) {
  const fs::path flow = dir / "flow.yml";
  testing::write_text(flow, fmt::format("executors:\n"
                                        "  - name: encoder\n"
                                        "    uses: SentenceEncoder\n"
                                        "    device: cpu\n"
                                        "    with:\n"
                                        "      model: '{}'\n"
                                        "      batch_size: 64\n",
                                        kModel.string()));
  return flow;
}

// Runs one of tests/gateway/clients/*.py with the clients venv's python against `server`; loopback never
// goes through a proxy. The script's own watchdog (--timeout) bounds it.
testing::ProcessResult run_client_script(const std::string& script, const Server& server, const std::string& args) {
  return testing::run_process(
      fmt::format("NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost '{}' '{}' --url {} --timeout 120 {}",
                  kClientsPython.string(), (kClientScripts / script).string(), server.url(), args));
}

// Golden rows posted by the client scripts: a title line, the longest paragraph (past the 256-token limit, so
// truncated) and a hard case with accents and ligatures.
const std::vector<std::size_t> kReferenceRows{0, 84, 502};

// Serves the encoder flow, runs tests/gateway/clients/CLIENT_client_test.py against it with the goldens as
// the reference plus `extra_args`, and requires the script to pass and the server to exit cleanly.
void check_python_client(const std::string& client, const std::string& extra_args) {
  const std::string name = client + "_client_test";
  const auto dir = testing::scratch_dir("clients " + client);
  write_reference(dir / "reference.json", kReferenceRows);
  Server server(write_encoder_flow(dir), dir);
  const auto r = run_client_script(
      name + ".py", server,
      fmt::format("--expect-dim {} {} --reference '{}'", kDim, extra_args, (dir / "reference.json").string()));
  INFO(name << ".py (exit code " << r.exit_code << "):\n" << r.out << r.err);
  INFO("flowline serve's output:\n" << server.log());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, testing::contains(name + ": PASSED"));
  server.stop_and_check_clean_exit();
}

// Runs tests/gateway/clients/jina_grpc_client_test.py against `server`'s gRPC port with `args` and requires
// it to pass.
void check_grpc_client(const Server& server, const std::string& args) {
  const auto r = testing::run_process(fmt::format(
      "NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost '{}' '{}' --url grpc://127.0.0.1:{} --expect-dim {} "
      "{}",
      kClientsPython.string(), (kClientScripts / "jina_grpc_client_test.py").string(), server.grpc_port(), kDim, args));
  INFO("jina_grpc_client_test.py (exit code " << r.exit_code << "):\n" << r.out << r.err);
  INFO("flowline serve's output:\n" << server.log());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, testing::contains("jina_grpc_client_test: PASSED"));
}

}  // namespace

TEST_CASE("Jina's own Python HTTP client posts to flowline serve and gets the encoder's embeddings back",
          "[gateway][clients][jina]") {
  SKIP_OR_FAIL_WHEN_MISSING(missing_for_python_clients());
  check_python_client("jina", "--require-openapi");
}

TEST_CASE("Jina's own Python client indexes, searches, filters, deletes and updates through an index flow",
          "[gateway][clients][jina][index]") {
  SKIP_OR_FAIL_WHEN_MISSING(missing_for_python_clients());
  const auto dir = testing::scratch_dir("clients jina search");
  const fs::path flow = dir / "flow.yml";
  testing::write_text(flow, fmt::format("executors:\n"
                                        "  - name: encoder\n"
                                        "    uses: SentenceEncoder\n"
                                        "    device: cpu\n"
                                        "    with: {{model: '{}'}}\n"
                                        "  - name: index\n"
                                        "    uses: VectorIndex\n"
                                        "    with: {{workspace: '{}'}}\n",
                                        kModel.string(), (dir / "workspace").string()));
  Server server(flow, dir);
  const auto r = run_client_script(
      "jina_search_test.py", server,
      fmt::format("--expect-dim {} --corpus '{}'", kDim, testing::corpus_file("alice-in-wonderland.txt").string()));
  INFO("jina_search_test.py (exit code " << r.exit_code << "):\n" << r.out << r.err);
  INFO("flowline serve's output:\n" << server.log());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, testing::contains("jina_search_test: PASSED"));
  server.stop_and_check_clean_exit();
}

TEST_CASE("Jina's own Python client speaks gRPC to flowline serve: streams, unary, parameters, errors and limits",
          "[gateway][clients][jina][grpc]") {
  SKIP_OR_FAIL_WHEN_MISSING(missing_for_python_clients());
  if (!Gateway::grpc_available()) FLOWLINE_SKIP("this build has no gRPC front (gRPC C++ was not found)");
  const auto dir = testing::scratch_dir("clients jina grpc");
  write_reference(dir / "reference.json", kReferenceRows);
  const fs::path flow = dir / "flow.yml";
  testing::write_text(flow, fmt::format("plugins: ['{}/libflowline_testing_executors.so']\n"
                                        "executors:\n"
                                        "  - name: failer\n"
                                        "    uses: FailIf\n"
                                        "    with: {{contains: FAIL}}\n"
                                        "  - name: encoder\n"
                                        "    uses: SentenceEncoder\n"
                                        "    device: cpu\n"
                                        "    with: {{model: '{}', batch_size: 64}}\n",
                                        FLOWLINE_TEST_PLUGIN_DIR, kModel.string()));
  Server server(flow, dir, /*grpc=*/true);
  check_grpc_client(
      server, fmt::format("--timeout 240 --reference '{}' --fail-marker FAIL", (dir / "reference.json").string()));
  // The same requests are in /metrics under the route label "grpc", and none is left in flight.
  const Reply metrics = http_call(server.port(), http::verb::get, "/metrics");
  CHECK_THAT(metrics.body, testing::contains("flowline_http_requests_total{route=\"grpc\",status=\"200\"}"));
  CHECK_THAT(metrics.body, testing::contains("flowline_http_in_flight_requests 0"));
  server.stop_and_check_clean_exit();
}

TEST_CASE("flowline serve's gRPC front refuses Jina's client without the bearer token and answers it with one",
          "[gateway][clients][jina][grpc]") {
  SKIP_OR_FAIL_WHEN_MISSING(missing_for_python_clients());
  if (!Gateway::grpc_available()) FLOWLINE_SKIP("this build has no gRPC front (gRPC C++ was not found)");
  const auto dir = testing::scratch_dir("clients jina grpc token");
  const fs::path flow = write_encoder_flow(dir);
  // The token comes from FLOWLINE_TOKEN, which the child inherits.
  ::setenv("FLOWLINE_TOKEN", "s3cret-grpc-token", 1);
  Server server(flow, dir, /*grpc=*/true);
  ::unsetenv("FLOWLINE_TOKEN");
  check_grpc_client(server, "--timeout 120 --token s3cret-grpc-token");
  server.stop_and_check_clean_exit();
}

TEST_CASE("the openai package's embeddings.create works against flowline serve, float and base64",
          "[gateway][clients][openai]") {
  SKIP_OR_FAIL_WHEN_MISSING(missing_for_python_clients());
  check_python_client("openai", "--expect-tokens");
}

TEST_CASE("Cohere's Python package and requests rerank through flowline serve in CrossEncoder's order",
          "[gateway][clients][rerank]") {
  SKIP_OR_FAIL_WHEN_MISSING(missing_for_python_clients());
  const fs::path tiny = kSource / "tests/data/tiny-models";
  const auto dir = testing::scratch_dir("clients rerank");
  const fs::path flow = dir / "flow.yml";
  testing::write_text(flow, fmt::format("executors:\n"
                                        "  - name: reranker\n"
                                        "    uses: Reranker\n"
                                        "    device: cpu\n"
                                        "    with: {{model: '{}'}}\n",
                                        (tiny / "bert-cross-encoder").string()));
  Server server(flow, dir);
  const auto r =
      run_client_script("rerank_client_test.py", server,
                        fmt::format("--pairs '{}' --scores '{}'", (tiny / "bert-cross-encoder.pairs.jsonl").string(),
                                    (tiny / "bert-cross-encoder.pairs.safetensors").string()));
  INFO("rerank_client_test.py (exit code " << r.exit_code << "):\n" << r.out << r.err);
  INFO("flowline serve's output:\n" << server.log());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, testing::contains("rerank_client_test: PASSED"));
  server.stop_and_check_clean_exit();
}

TEST_CASE("huggingface_hub's InferenceClient tags text through flowline serve of flows/ner.yml as the pipeline does",
          "[gateway][clients][token]") {
  SKIP_OR_FAIL_WHEN_MISSING(::access(kClientsPython.c_str(), X_OK) == 0
                                ? ""
                                : kClientsPython.string() + " does not exist (run scripts/setup-clients.sh)");
  const fs::path tiny = kSource / "tests/data/tiny-models";
  const auto dir = testing::scratch_dir("clients token classification");
  // The shipped flow as it is: its tiny tagger, and its TSV writer's file moved into the scratch folder.
  ::setenv("FLOWLINE_OUT_DIR", dir.c_str(), 1);
  Server server(kSource / "flows/ner.yml", dir);
  ::unsetenv("FLOWLINE_OUT_DIR");
  const auto r =
      run_client_script("token_classification_client_test.py", server,
                        fmt::format("--goldens '{}'", (tiny / "bert-token-classifier.entities.jsonl").string()));
  INFO("token_classification_client_test.py (exit code " << r.exit_code << "):\n" << r.out << r.err);
  INFO("flowline serve's output:\n" << server.log());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, testing::contains("token_classification_client_test: PASSED"));
  server.stop_and_check_clean_exit();
}

TEST_CASE("Jina's client over HTTP and gRPC: limit 5.0 and top_n 5.0 are integers, 5.5 and \"3\" are refused by name",
          "[gateway][clients][jina][params]") {
  SKIP_OR_FAIL_WHEN_MISSING(missing_for_python_clients());
  if (!Gateway::grpc_available()) FLOWLINE_SKIP("this build has no gRPC front (gRPC C++ was not found)");
  const fs::path tiny = kSource / "tests/data/tiny-models";
  const auto dir = testing::scratch_dir("clients params");
  const fs::path flow = dir / "flow.yml";
  testing::write_text(flow, fmt::format("executors:\n"
                                        "  - name: index\n"
                                        "    uses: VectorIndex\n"
                                        "    with: {{dim: 4}}\n"
                                        "  - name: reranker\n"
                                        "    uses: Reranker\n"
                                        "    device: cpu\n"
                                        "    with: {{model: '{}'}}\n",
                                        (tiny / "bert-cross-encoder").string()));
  Server server(flow, dir, /*grpc=*/true);
  const auto r = run_client_script("jina_params_test.py", server,
                                   fmt::format("--expect-dim 4 --grpc-url grpc://127.0.0.1:{}", server.grpc_port()));
  INFO("jina_params_test.py (exit code " << r.exit_code << "):\n" << r.out << r.err);
  INFO("flowline serve's output:\n" << server.log());
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, testing::contains("jina_params_test: PASSED"));
  server.stop_and_check_clean_exit();
}

namespace {

// ---- Prometheus --------------------------------------------------------------------------------------------

// Writes prometheus.yml: one job scraping 127.0.0.1:target/metrics every second.
fs::path write_prometheus_config(const fs::path& dir, const std::string& job, std::uint16_t target) {
  const fs::path config = dir / "prometheus.yml";
  testing::write_text(config, fmt::format("global:\n"
                                          "  scrape_interval: 1s\n"
                                          "  scrape_timeout: 1s\n"
                                          "  evaluation_interval: 1s\n"
                                          "scrape_configs:\n"
                                          "  - job_name: {}\n"
                                          "    metrics_path: /metrics\n"
                                          "    static_configs:\n"
                                          "      - targets: ['127.0.0.1:{}']\n",
                                          job, target));
  return config;
}

// A Prometheus server on a loopback port of its own, with its storage in `dir`, scraping flowline serve.
class Prometheus {
 public:
  Prometheus(const fs::path& binary, const fs::path& dir, const std::string& job, std::uint16_t target)
      : port_(free_port()),
        process_({binary.string(), "--config.file=" + write_prometheus_config(dir, job, target).string(),
                  "--storage.tsdb.path=" + (dir / "prometheus-data").string(),
                  fmt::format("--web.listen-address=127.0.0.1:{}", port_), "--log.level=warn"},
                 dir / "prometheus.log") {
    const bool ready = eventually(30s, [&] {
      return !process_.running() || http_call(port_, http::verb::get, "/-/ready", {}, 2s).status == 200;
    });
    INFO("Prometheus's output:\n" << process_.log());
    if (!process_.running()) FAIL("prometheus ended at start (" << process_.ended() << ")");
    if (!ready) FAIL("prometheus did not answer GET /-/ready with 200 within 30 s on port " << port_);
  }
  // GET /api/v1/PATH: its "data", after checking the answer is 200 with "status": "success".
  json::value api(const std::string& path) {
    const Reply reply = http_call(port_, http::verb::get, "/api/v1/" + path);
    INFO("GET /api/v1/" << path << " from Prometheus: " << reply.status << " " << reply.error << reply.body);
    REQUIRE(reply.status == 200);
    const json::value answer = json::parse(reply.body);
    REQUIRE(answer.as_object().at("status") == "success");
    return answer.as_object().at("data");
  }
  // The value of the instant query's only sample; none while the query has no sample.
  std::optional<double> value(const std::string& promql) {
    const json::array result = api("query?query=" + url_encode(promql)).as_object().at("result").as_array();
    if (result.empty()) return std::nullopt;
    INFO("Prometheus's answer to " << promql << ": " << json::serialize(result));
    REQUIRE(result.size() == 1);
    return std::stod(std::string(result[0].as_object().at("value").as_array().at(1).as_string()));
  }
  // The active target of `job` from /api/v1/targets, or null when Prometheus has none (yet).
  json::value target(const std::string& job) {
    const json::value targets = api("targets?state=active");
    for (const auto& t : targets.as_object().at("activeTargets").as_array())
      if (t.as_object().at("labels").as_object().at("job") == json::value(job)) return t;
    return nullptr;
  }
  // The names of the metrics Prometheus holds from `job`, flowline's only.
  std::vector<std::string> metric_names(const std::string& job) {
    const json::value names =
        api("label/__name__/values?match%5B%5D=" + url_encode(fmt::format("{{job=\"{}\"}}", job)));
    std::vector<std::string> out;
    for (const auto& name : names.as_array())
      if (name.as_string().starts_with("flowline_")) out.emplace_back(name.as_string());
    return out;
  }
  std::string log() const { return process_.log(); }
  void stop() { process_.stop(10s); }

 private:
  std::uint16_t port_;
  ChildProcess process_;
};

// Polls `promql` until its value is `want` (at least `want` with at_least) or `bound` has passed; fails
// naming the query, the last value Prometheus had and its scrape target's state.
void wait_for_value(Prometheus& prometheus, const std::string& job, const std::string& promql, double want,
                    std::chrono::seconds bound, bool at_least = false) {
  std::optional<double> last;
  const bool reached = eventually(bound, [&] {
    last = prometheus.value(promql);
    return last && (at_least ? *last >= want : *last == want);
  });
  if (reached) return;
  const json::value target = prometheus.target(job);
  std::string names;
  for (const auto& name : prometheus.metric_names(job)) names += (names.empty() ? "" : ", ") + name;
  const std::string log = prometheus.log();
  FAIL(fmt::format(
      "after {} s, Prometheus's {} {} (want {}{}); the metrics it has from the job: {}; its scrape "
      "target: {}{}",
      bound.count(), promql, last ? fmt::format("is {}", *last) : "has no sample", at_least ? "at least " : "", want,
      names.empty() ? "none" : names, target.is_null() ? "none yet" : json::serialize(target),
      log.empty() ? "" : "\nPrometheus's output:\n" + log));
}

// Posts `n` Jina requests of two documents each to POST /default; each must answer 200.
void post_jina_requests(const Server& server, int n) {
  for (int i = 0; i < n; ++i) {
    const Reply reply = http_call(server.port(), http::verb::post, "/default",
                                  fmt::format(R"({{"data": [{{"text": "request {} one"}}, {{"text": "two"}}]}})", i));
    INFO(reply.error << reply.body);
    REQUIRE(reply.status == 200);
  }
}

}  // namespace

TEST_CASE("a real Prometheus server scrapes flowline serve's /metrics every second", "[gateway][clients][prometheus]") {
  const std::optional<fs::path> binary = on_path("prometheus");
  SKIP_OR_FAIL_WHEN_MISSING(
      binary ? "" : "prometheus is not on PATH (Debian's package `prometheus`; scripts/setup.sh installs it)");
  const auto dir = testing::scratch_dir("clients prometheus");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: stats, uses: TextStats}\n");
  Server server(dir / "flow.yml", dir);
  post_jina_requests(server, 3);
  const std::string job = "flowline_serve";
  Prometheus prometheus(*binary, dir, job, server.port());
  const auto of_job = [&](const std::string& metric, const std::string& labels) {
    return fmt::format("{}{{job=\"{}\"{}}}", metric, job, labels);
  };
  // The first scrape comes after target discovery (about 5 s), the next ones every second.
  wait_for_value(prometheus, job, of_job("up", ""), 1, 30s);
  wait_for_value(prometheus, job, of_job("flowline_http_requests_total", ",route=\"jina\",status=\"200\""), 3, 30s);
  wait_for_value(prometheus, job, of_job("flowline_http_documents_total", ",route=\"jina\""), 6, 5s);
  wait_for_value(prometheus, job, of_job("flowline_http_request_duration_seconds_count", ",route=\"jina\""), 3, 5s);
  // Prometheus's own scrapes are counted too, once answered.
  wait_for_value(prometheus, job, of_job("flowline_http_requests_total", ",route=\"metrics\",status=\"200\""), 1, 10s,
                 true);
  // Later requests show up in the next scrapes.
  post_jina_requests(server, 4);
  wait_for_value(prometheus, job, of_job("flowline_http_requests_total", ",route=\"jina\",status=\"200\""), 7, 10s);

  const json::value target = prometheus.target(job);
  INFO("Prometheus's scrape target: " << json::serialize(target));
  REQUIRE(target.is_object());
  CHECK(target.as_object().at("health") == "up");
  CHECK(target.as_object().at("lastError") == "");
  CHECK(target.as_object().at("scrapeUrl") == json::value(fmt::format("{}/metrics", server.url())));
  prometheus.stop();
  server.stop_and_check_clean_exit();
}
