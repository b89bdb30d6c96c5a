// The HTTP gateway in one process: a Flow behind flowline::Gateway on a loopback port the system picks,
// spoken to over real sockets by a small blocking HTTP client (Beast). Jina's, OpenAI's and TEI's shapes,
// batching across clients, every limit, readiness and the drain on stop().
#include "gateway_fixtures.hpp"

#include "child_process.hpp"
#include "routes.hpp"
#include "flowline/executor_server.hpp"
#include "flowline/io.hpp"
#include "flowline/models/tokenizer.hpp"

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <thread>

using namespace gateway_test;

TEST_CASE("the gateway answers Jina's routes with every document, in order, in Jina's shape", "[gateway]") {
  Served served(fake_encoder_flow());
  Client client(served.port());

  const Reply r = client.post("/encode", jina_body(250, R"("header":{"request_id":"req-7"})"));
  REQUIRE(r.status == 200);
  const json::object out = r.json().as_object();
  const json::array& data = out.at("data").as_array();
  REQUIRE(data.size() == 250);  // Jina itself returns only the first 100
  for (std::size_t i = 0; i < data.size(); ++i) {
    const json::object& doc = data[i].as_object();
    CHECK(doc.at("text") == json::value(fmt::format("doc {}", i)));
    const json::array& embedding = doc.at("embedding").as_array();
    REQUIRE(embedding.size() == 3);
    CHECK(embedding[0].to_number<double>() == static_cast<double>(fmt::format("doc {}", i).size()));
    CHECK(embedding[1].to_number<double>() == 0.5);
  }
  CHECK(out.at("header").at("request_id") == "req-7");
  CHECK(out.at("parameters").as_object().empty());

  // /post names the endpoint in the body; one document as an object; a client's id comes back.
  const Reply post = client.post("/post", R"({"data":{"id":"mine","text":"abc"},"execEndpoint":"/encode"})");
  REQUIRE(post.status == 200);
  const json::value doc = post.json().at("data").at(0);
  CHECK(doc.at("id") == "mine");
  CHECK(doc.at("embedding").at(0).to_number<double>() == 3.0);
  CHECK(client.post("/default", jina_body(2)).status == 200);
  // Jina's own client sends the endpoint as header.exec_endpoint (and exec_endpoint) to /post.
  const Reply header_named =
      client.post("/post", R"({"data":[{"text":"abcd"}],"header":{"exec_endpoint":"/encode","request_id":"r"}})");
  REQUIRE(header_named.status == 200);
  CHECK(header_named.json().at("data").at(0).at("embedding").at(0).to_number<double>() == 4.0);
  CHECK(client.get("/").body == "{}");
  CHECK(client.get("/dry_run").json().at("code") == 0);
  const json::value openapi = client.get("/openapi.json").json();
  CHECK(openapi.at("paths").as_object().contains("/encode"));
  CHECK(openapi.at("paths").as_object().contains("/default"));
}

TEST_CASE("the gateway answers Jina's validation errors as Jina does: 422 naming the field", "[gateway]") {
  Served served(delay_flow(0));
  Client client(served.port());
  Reply r = client.post("/default", R"({"data":[{"text":123}]})");
  CHECK(r.status == 422);
  CHECK(r.json().at("detail").at(0).at("loc") == json::array{"body", "data", 0, "text"});
  r = client.post("/default", R"({"parameters":{}})");
  CHECK(r.status == 422);
  CHECK(r.json().at("detail").at(0).at("type") == "missing");
  r = client.post("/default", R"({"data":[{"text":"a"})");
  CHECK(r.status == 422);
  CHECK_THAT(r.body, testing::contains("invalid JSON at byte 21"));
  r = client.post("/default", R"({"data":[],"parameters":"x"})");
  CHECK(r.status == 422);
  // A number beyond a double's range would be echoed as "Infinity", which is not JSON (found by fuzzing).
  r = client.post("/default", R"({"data":[{"text":"a","tags":{"x":-1e400}}]})");
  CHECK(r.status == 422);
  CHECK_THAT(r.body, testing::contains("data[0].tags.x: a number beyond the range of a double"));
  CHECK(r.json().at("detail").at(0).at("loc") == json::array{"body", "data", 0, "tags", "x"});
  // An embedding value float32 cannot hold was answered as "inf" in a numeric array; both are refused.
  r = client.post("/default", R"({"data":[{"text":"a","embedding":[0.5,1e300]}]})");
  CHECK(r.status == 422);
  CHECK_THAT(r.body, testing::contains("data[0].embedding[1]: 1E300 is beyond float32's range"));
  CHECK(r.json().at("detail").at(0).at("loc") == json::array{"body", "data", 0, "embedding", 1});
  r = client.post("/default", R"({"data":[{"text":"a"},{"text":"b","embedding":[-1e400]}]})");
  CHECK(r.status == 422);
  CHECK_THAT(r.body, testing::contains("data[1].embedding[0]: a number beyond the range of a double"));
  CHECK(client.post("/default", R"({"data":[{"text":"a","embedding":[3.4e38,-3.4e38]}]})").status == 200);
  CHECK(client.post("/v1/embeddings", R"({"input":"a","dimensions":1e999})").status == 400);
  CHECK(client.post("/nowhere", jina_body(1)).status == 404);
  CHECK(client.get("/default").status == 405);
  // The connection survives all of that.
  CHECK(client.post("/default", jina_body(1)).status == 200);
}

TEST_CASE("the gateway serves OpenAI embeddings as floats and as little-endian float32 base64", "[gateway]") {
  Served served(fake_encoder_flow());
  Client client(served.port());

  Reply r = client.post("/v1/embeddings", R"({"input":["hello","hi"],"model":"m"})");
  REQUIRE(r.status == 200);
  json::value out = r.json();
  CHECK(out.at("object") == "list");
  CHECK(out.at("model") == "m");
  CHECK(out.at("data").as_array().size() == 2);
  CHECK(out.at("data").at(1).at("index") == 1);
  CHECK(numbers(out.at("data").at(1).at("embedding")) == std::vector<double>{2.0, 0.5, -2.0});
  CHECK(out.at("usage").at("prompt_tokens") == 7);  // the encoder's tokens tags, summed

  r = client.post("/v1/embeddings", R"({"input":"hello","encoding_format":"base64"})");
  REQUIRE(r.status == 200);
  const std::string b64(r.json().at("data").at(0).at("embedding").as_string());
  // Decode by hand: 3 floats = 12 bytes = 16 base64 characters.
  REQUIRE(b64.size() == 16);
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes;
  for (std::size_t i = 0; i < b64.size(); i += 4) {
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) v = (v << 6) | static_cast<std::uint32_t>(kAlphabet.find(b64[i + k]));
    bytes.push_back(static_cast<unsigned char>(v >> 16));
    bytes.push_back(static_cast<unsigned char>(v >> 8));
    bytes.push_back(static_cast<unsigned char>(v));
  }
  float values[3];
  std::memcpy(values, bytes.data(), sizeof values);
  CHECK(values[0] == 5.0f);
  CHECK(values[1] == 0.5f);
  CHECK(values[2] == -2.0f);

  CHECK(client.post("/v1/embeddings", R"({"input":[[1,2,3]]})").status == 400);
  CHECK(client.post("/v1/embeddings", R"({"model":"m"})").status == 400);
  // `dimensions`: the model's size as it is; fewer values truncated and normalised again (Matryoshka, as
  // sentence-transformers' truncate_dim and TEI); more refused; not a positive integer refused.
  r = client.post("/v1/embeddings", R"({"input":"hello","dimensions":3})");
  REQUIRE(r.status == 200);
  CHECK(numbers(r.json().at("data").at(0).at("embedding")) == std::vector<double>{5.0, 0.5, -2.0});
  r = client.post("/v1/embeddings", R"({"input":"hello","dimensions":2.0})");
  REQUIRE(r.status == 200);
  const auto two = numbers(r.json().at("data").at(0).at("embedding"));
  REQUIRE(two.size() == 2);
  CHECK(std::abs(two[0] - 5.0 / std::sqrt(25.25)) < 1e-6);
  CHECK(std::abs(two[1] - 0.5 / std::sqrt(25.25)) < 1e-6);
  r = client.post("/v1/embeddings", R"({"input":"hello","dimensions":4})");
  CHECK(r.status == 400);
  CHECK_THAT(r.body, testing::contains("'dimensions' (4) is larger than the model's embeddings (3)"));
  for (const char* bad : {"0", "-1", "2.5", "\"2\"", "true"}) {
    r = client.post("/v1/embeddings", fmt::format(R"({{"input":"hello","dimensions":{}}})", bad));
    CHECK(r.status == 400);
    CHECK_THAT(r.body, testing::contains("'dimensions': expected a positive integer"));
  }

  // TEI's /embed.
  r = client.post("/embed", R"({"inputs":["abc","de"]})");
  REQUIRE(r.status == 200);
  REQUIRE(r.json().as_array().size() == 2);
  CHECK(numbers(r.json().at(0)) == std::vector<double>{3.0, 0.5, -2.0});
  CHECK(numbers(r.json().at(1)) == std::vector<double>{2.0, 0.5, -2.0});
  CHECK(client.post("/embed", R"({"inputs":"abc","normalize":false})").status == 400);
  r = client.post("/embed", R"({"inputs":["abc"],"dimensions":1})");
  REQUIRE(r.status == 200);
  CHECK(numbers(r.json().at(0)) == std::vector<double>{1.0});
  // An empty text has nothing to embed (the encoder passes a document without text through untouched):
  // refused by name, never answered with the embedding of "".
  r = client.post("/v1/embeddings", R"({"input":["a",""]})");
  CHECK(r.status == 400);
  CHECK_THAT(r.body, testing::contains("'input[1]' is an empty string: there is no text to embed"));
  r = client.post("/embed", R"({"inputs":""})");
  CHECK(r.status == 400);
  CHECK_THAT(r.body, testing::contains("'inputs' is an empty string: there is no text to embed"));
}

TEST_CASE("concurrent small requests from many clients share the executor's batches", "[gateway]") {
  {
    std::lock_guard lock(FakeEncoder::mutex());
    FakeEncoder::batches().clear();
  }
  Served served(fake_encoder_flow(BatchingOptions{.max_batch_size = 256, .max_delay = 50ms}));
  constexpr int kClients = 16;
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      Client client(served.port());
      for (int i = 0; i < 5; ++i) ok += client.post("/encode", jina_body(4)).status == 200;
    });
  }
  for (auto& t : clients) t.join();
  CHECK(ok == kClients * 5);
  std::lock_guard lock(FakeEncoder::mutex());
  const auto& batches = FakeEncoder::batches();
  CHECK(std::accumulate(batches.begin(), batches.end(), std::size_t{0}) == kClients * 5 * 4);
  // 4 documents per request; a batch larger than that merged requests of different clients.
  CHECK(*std::max_element(batches.begin(), batches.end()) >= 16);
}

TEST_CASE("the gateway enforces its limits with a status that names each", "[gateway]") {
  SECTION("body size: 413") {
    Served served(delay_flow(0), GatewayOptions{.max_body_bytes = 1000});
    Client client(served.port());
    const Reply r = client.post("/default", jina_body(100));
    CHECK(r.status == 413);
    CHECK_THAT(r.body, testing::contains("larger than 1000 bytes"));
    CHECK(client.closed_by_server(2000ms));
  }
  SECTION("documents per request: 413 naming the limit") {
    Served served(delay_flow(0), GatewayOptions{.max_documents = 10});
    Client client(served.port());
    const Reply r = client.post("/default", jina_body(11));
    CHECK(r.status == 413);
    CHECK_THAT(r.body, testing::contains("the limit is 10"));
    CHECK(client.post("/default", jina_body(10)).status == 200);
    CHECK(client.post("/v1/embeddings", R"({"input":["a","a","a","a","a","a","a","a","a","a","a"]})").status == 413);
  }
  SECTION("JSON depth: 400") {
    Served served(delay_flow(0), GatewayOptions{.max_json_depth = 8});
    Client client(served.port());
    const Reply r = client.post("/default", std::string(20, '[') + std::string(20, ']'));
    CHECK(r.status == 400);
    CHECK_THAT(r.body, testing::contains("deeper than 8 levels"));
  }
  SECTION("malformed HTTP: 400, then the connection closes") {
    Served served(delay_flow(0));
    Client client(served.port());
    const Reply r = client.raw("POST /default HTTP/1.1\r\nContent-Length: banana\r\n\r\n");
    CHECK(r.status == 400);
    CHECK_THAT(r.body, testing::contains("malformed HTTP request"));
    CHECK(client.closed_by_server(2000ms));
  }
  SECTION("requests in flight: 503 with Retry-After") {
    Served served(delay_flow(400), GatewayOptions{.max_in_flight = 1});
    std::thread slow([&] { CHECK(Client(served.port()).post("/default", jina_body(1)).status == 200); });
    std::this_thread::sleep_for(100ms);
    const Reply r = Client(served.port()).post("/default", jina_body(1));
    CHECK(r.status == 503);
    CHECK(r.retry_after == "1");
    CHECK(Client(served.port()).get("/health").status == 200);  // the probes still answer
    slow.join();
    CHECK(served.gateway->stats().rejected_busy == 1);
  }
  SECTION("request time: 504, and the connection goes on") {
    Served served(delay_flow(600), GatewayOptions{.request_timeout = 100ms});
    Client client(served.port());
    const Reply r = client.post("/default", jina_body(1));
    CHECK(r.status == 504);
    CHECK_THAT(r.body, testing::contains("100 ms"));
    CHECK(client.get("/health").status == 200);
  }
  SECTION("bearer token: 401 without it, probes open") {
    Served served(delay_flow(0), GatewayOptions{.token = "s3cret"});
    Client client(served.port());
    CHECK(client.post("/default", jina_body(1)).status == 401);
    CHECK(client.post("/default", jina_body(1), "wrong").status == 401);
    CHECK(client.post("/default", jina_body(1), "s3cret").status == 200);
    CHECK(client.get("/health").status == 200);
    CHECK(client.get("/ready").status == 200);
    CHECK(client.get("/metrics").status == 401);
  }
  SECTION("an idle connection is closed") {
    Served served(delay_flow(0), GatewayOptions{.idle_timeout = 200ms});
    Client client(served.port());
    CHECK(client.closed_by_server(3000ms));
  }
}

TEST_CASE("the gateway binds loopback by default and says when the port is taken", "[gateway]") {
  Served served(delay_flow(0));
  Flow other = delay_flow(0);
  auto second = Gateway::attach_to(other);
  other.start();
  try {
    second->start(GatewayOptions{.port = served.port()});
    FAIL("a second gateway bound the same port");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), testing::contains(fmt::format("127.0.0.1:{}", served.port())));
  }
  other.close();
}

TEST_CASE("stopping the gateway answers the requests in flight and turns /ready to 503", "[gateway]") {
  Flow flow = delay_flow(500);
  auto gateway = Gateway::attach_to(flow);
  flow.start();
  gateway->start(GatewayOptions{.port = 0});
  const auto port = gateway->port();
  Client watcher(port);
  CHECK(watcher.get("/ready").status == 200);
  std::atomic<int> status{0};
  std::thread slow([&] { status = Client(port).post("/default", jina_body(3)).status; });
  std::this_thread::sleep_for(150ms);
  std::thread stopper([&] { gateway->stop(); });
  std::this_thread::sleep_for(100ms);
  const Reply ready = watcher.get("/ready");  // the watcher's connection is answered while draining
  CHECK(ready.status == 503);
  CHECK_THAT(ready.body, testing::contains("draining"));
  slow.join();
  stopper.join();
  CHECK(status == 200);
  flow.close();
  CHECK_THROWS(Client(port));  // nothing listens any more
}

TEST_CASE("/ready is 503 naming a remote executor none of whose hosts is reachable, and 200 once one is", "[gateway]") {
  const std::uint16_t port = testing::unused_loopback_port();
  Flow flow(load_flow_config_text(fmt::format("executors:\n"
                                              "  - name: mid\n"
                                              "    uses: NoOp\n"
                                              "    hosts: [127.0.0.1:{}]\n"
                                              "    remote: {{start_degraded: true, retry_max_ms: 200}}\n",
                                              port),
                                  "gateway.yml"));
  auto gateway = Gateway::attach_to(flow);
  flow.start();
  gateway->start(GatewayOptions{.port = 0});
  Client client(gateway->port());
  const Reply down = client.get("/ready");
  CHECK(down.status == 503);
  CHECK_THAT(down.body, testing::contains(fmt::format("no host of executor 'mid' is reachable (127.0.0.1:{}", port)));
  CHECK(client.get("/health").status == 200);  // alive all the same

  Flow served(executor_flow(load_flow_config_text("executors:\n  - {name: mid, uses: NoOp}\n", "s.yml"), "mid"));
  served.start();
  ExecutorServer server(served, "mid");
  ExecutorServerOptions options;
  options.port = port;
  server.start(options);
  CHECK(testing::eventually(5s, [&] { return client.get("/ready").status == 200; }));
  gateway->stop();
  flow.close();
  server.stop();
  served.close();
}

TEST_CASE("/metrics reports requests, batches and queues in Prometheus' text format", "[gateway]") {
  Served served(delay_flow(0));
  Client client(served.port());
  REQUIRE(client.post("/default", jina_body(5)).status == 200);
  client.post("/default", "{");
  const Reply r = client.get("/metrics");
  REQUIRE(r.status == 200);
  CHECK_THAT(r.body, testing::contains(R"(flowline_http_requests_total{route="jina",status="200"} 1)"));
  CHECK_THAT(r.body, testing::contains(R"(flowline_http_requests_total{route="jina",status="422"} 1)"));
  CHECK_THAT(r.body, testing::contains(R"(flowline_http_documents_total{route="jina"} 5)"));
  CHECK_THAT(r.body,
             testing::contains(R"(flowline_executor_documents_total{device="cpu",executor="slow",replica="0"} 5)"));
  CHECK_THAT(r.body, testing::contains("flowline_executor_batch_duration_seconds_bucket"));
  CHECK_THAT(r.body, testing::contains(R"(flowline_executor_queued_requests{executor="slow"} 0)"));
  CHECK_THAT(r.body, testing::contains("flowline_http_request_duration_seconds_count"));
  // Every front's answers by outcome: ok, or the refusal's kind.
  CHECK_THAT(r.body, testing::contains(R"(flowline_requests_total{front="http",outcome="ok",route="jina"} 1)"));
  CHECK_THAT(r.body,
             testing::contains(R"(flowline_requests_total{front="http",outcome="bad_request",route="jina"} 1)"));
}

TEST_CASE("every route of the route table is answered, listed in /openapi.json and counted under its label",
          "[gateway][routes]") {
  Served served(fake_encoder_flow());
  Client client(served.port());
  const json::value openapi = client.get("/openapi.json").json();
  const auto& paths = openapi.at("paths").as_object();
  for (const gateway::RouteRow& row : gateway::route_table()) {
    const std::string path(row.path);
    INFO(path);
    const char* verb = row.method == gateway::Method::Get ? "get" : "post";
    REQUIRE(paths.contains(path));
    CHECK(paths.at(path).as_object().contains(verb));
    // Answered by its handler, not 404, and the other method is 405.
    const Reply r = row.method == gateway::Method::Get ? client.get(path) : client.post(path, "{}");
    CHECK(r.status != 404);
    CHECK(r.status != 405);
    if (row.method == gateway::Method::Get) CHECK(client.post(path, "{}").status == 405);
  }
  CHECK(paths.contains("/rerank"));
  CHECK(paths.contains("/v1/rerank"));
  CHECK(paths.contains("/v2/rerank"));
  const std::string metrics = client.get("/metrics").body;
  for (const char* label :
       {"health", "ready", "info", "jina_post", "openai_embeddings", "tei_embed", "tei_rerank", "rerank"}) {
    CHECK_THAT(metrics, testing::contains(fmt::format("route=\"{}\"", label)));
  }
  CHECK_THAT(gateway_routes(), testing::contains("POST /v1/rerank"));
  CHECK_THAT(gateway_routes(), testing::contains("GET  /health"));
}

TEST_CASE("the flow file's serving settings configure the gateway, and settings applied after them win",
          "[gateway][config]") {
  (void)fake_encoder_flow();  // registers FakeEncoder
  FlowConfig config = parse_flow_config(
      "with:\n  port: 0\n  protocol: [http]\n  title: Mine\n"
      "  gateway: {max_documents: 2, request_timeout_ms: 1500, grpc_memory_bytes: 67108864}\n"
      "executors:\n  - {name: encoder, uses: FakeEncoder}\n",
      "serve.yml");
  GatewayOptions options;
  options.apply(config.serve);
  CHECK(options.port == 0);
  CHECK(options.title == "Mine");
  CHECK(options.max_documents == 2);
  CHECK(options.request_timeout == 1500ms);
  CHECK(options.grpc_memory_bytes == 64u << 20);
  CHECK(options.host == "127.0.0.1");  // not set: the default stays
  ServeSettings command_line;
  command_line.max_documents = 3;
  options.apply(command_line);
  CHECK(options.max_documents == 3);

  Served served(Flow(std::move(config)), options);
  Client client(served.port());
  CHECK(client.post("/encode", jina_body(3)).status == 200);
  const Reply r = client.post("/encode", jina_body(4));
  CHECK(r.status == 413);
  CHECK_THAT(r.body, testing::contains("the limit is 3"));
  CHECK_THAT(client.get("/openapi.json").body, testing::contains("\"title\":\"Mine\""));
  // gRPC's memory bound must hold two of the largest messages (whether or not this build has the gRPC front).
  CHECK_THROWS_WITH(Served(fake_encoder_flow(), GatewayOptions{.grpc_port = 0, .grpc_memory_bytes = 1000}),
                    testing::contains("grpc_memory_bytes (1000) must hold two messages of max_body_bytes"));

  CHECK_THROWS_WITH(parse_flow_config("with: {protocol: grpc}\nexecutors: [{name: e, uses: NoOp}]\n", "g.yml"),
                    testing::contains("g.yml:1:18: with.protocol: grpc needs its port"));
  CHECK_THROWS_WITH(parse_flow_config("with: {port: 65536}\nexecutors: [{name: e, uses: NoOp}]\n", "g.yml"),
                    testing::contains("expected a port from 0 to 65535, got '65536'"));
}

TEST_CASE("docs/serving.md's limits table is the one the settings table makes", "[gateway][config]") {
  const std::string docs = read_file(std::filesystem::path(FLOWLINE_SOURCE_DIR) / "docs/serving.md");
  const std::size_t begin = docs.find("| option | default | fronts | beyond it |");
  REQUIRE(begin != std::string::npos);
  const std::string table = docs.substr(begin, docs.find("\n\n", begin) + 1 - begin);
  // On a difference, paste gateway_limits_table() (the expansion Catch prints) into docs/serving.md.
  CHECK(table == gateway_limits_table());
  CHECK_THAT(table, testing::contains("| `--max-body-bytes` | 32 MiB | both | 413"));
  CHECK_THAT(table, testing::contains("| `--request-timeout` | 60,000 ms | both | 504"));
}

TEST_CASE("every flow-file key of the settings table is in the flow schema with the row's help, default and bounds",
          "[gateway][config]") {
  const auto& schema = flow_schema();
  const auto in_schema = [&](std::string_view path) {
    return std::find_if(schema.begin(), schema.end(), [&](const SchemaKey& k) { return k.path == path; });
  };
  for (const ServeSetting& setting : serve_settings()) {
    if (setting.key.empty()) continue;
    INFO(setting.key);
    const auto key = in_schema(fmt::format("with.{}", setting.key));
    REQUIRE(key != schema.end());
    if (setting.key_by_hand) continue;  // Jina's with.port list and with.protocol: read by their own code
    // A flow-level key (with.host) says which option overrides it; with.gateway says so for all of its keys.
    const bool flow_level = !setting.key.starts_with("gateway.") && !setting.flag.empty();
    CHECK(key->help ==
          fmt::format("{}{}", setting.help, flow_level ? fmt::format(" {} overrides it.", setting.flag) : ""));
    CHECK(key->example == setting.example);
    CHECK(key->default_value == serve_default(setting));
    CHECK(key->minimum == setting.minimum);
  }
  // And the other way: every with.gateway key is a row.
  for (const SchemaKey& key : schema) {
    if (!key.path.starts_with("with.gateway.")) continue;
    INFO(key.path);
    CHECK(std::any_of(serve_settings().begin(), serve_settings().end(),
                      [&](const ServeSetting& s) { return fmt::format("with.{}", s.key) == key.path; }));
  }
  // Every row with a flag or a key sets a member that apply() carries over.
  GatewayOptions options;
  ServeSettings all;
  all.max_stream_documents = 7;
  all.grpc_port = 12345;
  all.embeddings_endpoint = "/embed";
  options.apply(all);
  CHECK(options.max_stream_documents == 7);
  CHECK(options.grpc_port == std::optional<std::uint16_t>(12345));
  CHECK(options.embeddings_endpoint == "/embed");
}

// FakeEncoder under a model folder's name, with the parameters TEI's /info reads.
class FolderEncoder : public FakeEncoder {
 public:
  static ExecutorSpec spec() {
    return ExecutorSpec{"FolderEncoder",
                        "FakeEncoder with a model folder",
                        {ParamSpec::required_param("model", ParamType::String, "the model folder"),
                         ParamSpec::choice("dtype", {"fp32", "fp16"}, "fp32", "weights' type"),
                         ParamSpec::optional("batch_size", ParamType::Int, 64, "texts per pass")},
                        {"/encode"}};
  }
  using FakeEncoder::FakeEncoder;
};

TEST_CASE("TEI's /info describes the served model and the gateway's bounds in TEI's shape", "[gateway]") {
  static const bool registered = [] {
    Registry::global().add<FolderEncoder>();
    return true;
  }();
  (void)registered;
  const auto folder = testing::scratch_dir("tei_info") / "e5-small";
  testing::write_text(folder / "1_Pooling/config.json",
                      R"({"word_embedding_dimension": 3, "pooling_mode_cls_token": true})");
  testing::write_text(folder / "sentence_bert_config.json", R"({"max_seq_length": 256, "do_lower_case": false})");
  ExecutorConfig encoder{.name = "encoder", .uses = "FolderEncoder"};
  encoder.with = {{"model", folder.string()}, {"dtype", "fp16"}};
  encoder.replicas = 2;
  encoder.batching.max_batch_size = 32;
  Flow flow;
  flow.add(std::move(encoder));
  Served served(std::move(flow), GatewayOptions{.max_documents = 100, .max_in_flight = 7});
  Client client(served.port());
  const Reply r = client.get("/info");
  REQUIRE(r.status == 200);
  const json::value info = r.json();
  CHECK(info.at("model_id") == "e5-small");
  CHECK(info.at("model_sha").is_null());
  CHECK(info.at("model_dtype") == "float16");
  CHECK(info.at("model_type") == json::parse(R"({"embedding": {"pooling": "cls"}})"));
  CHECK(info.at("max_concurrent_requests") == 7);
  CHECK(info.at("max_input_length") == 256);
  CHECK(info.at("max_batch_tokens") == 64 * 256);  // batch_size's default x max_input_length
  CHECK(info.at("max_batch_requests") == 32);
  CHECK(info.at("max_client_batch_size") == 100);
  CHECK(info.at("auto_truncate") == true);
  CHECK(info.at("tokenization_workers") == 2);
  CHECK(info.at("version").is_string());
  // It is a row of the route table: listed in /openapi.json. A flow without a model is its last executor.
  CHECK(client.get("/openapi.json").json().at("paths").as_object().contains("/info"));
  Served plain(fake_encoder_flow());
  const Reply unnamed = Client(plain.port()).get("/info");
  REQUIRE(unnamed.status == 200);
  CHECK(unnamed.json().at("model_id") == "encoder");
  CHECK(unnamed.json().at("model_type") == json::parse(R"({"embedding": {"pooling": "mean"}})"));
}

TEST_CASE("the embeddings routes answer each input at its own index, or name the inputs a flow dropped", "[gateway]") {
  Served served(dropping_flow());
  Client client(served.port());
  // Reordered by the filter: each embedding still comes back at its input's index.
  Reply r = client.post("/v1/embeddings", R"({"input":["a","bbb","cc"]})");
  REQUIRE(r.status == 200);
  const json::value openai = r.json();
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(openai.at("data").at(i).at("index").as_int64() == static_cast<std::int64_t>(i));
    CHECK(openai.at("data").at(i).at("embedding").at(0).to_number<double>() == std::vector<double>{1, 3, 2}[i]);
  }
  r = client.post("/embed", R"({"inputs":["a","bbb","cc"]})");
  REQUIRE(r.status == 200);
  CHECK(numbers(r.json().at(1)) == std::vector<double>{3, 0.5, -2});
  // The middle input dropped: an error naming it, not the third input's vector at index 1.
  for (const char* route : {"/v1/embeddings", "/embed"}) {
    INFO(route);
    const std::string key = std::string(route) == "/embed" ? "inputs" : "input";
    r = client.post(route, R"({")" + key + R"(":["a","drop me","cc"]})");
    CHECK(r.status == 500);
    CHECK_THAT(r.body, testing::contains("the flow answered 2 of 3 inputs: no document came back for input 1 "));
    r = client.post(route, R"({")" + key + R"(":["drop","drop","x","drop"]})");
    CHECK_THAT(r.body, testing::contains("answered 1 of 4 inputs: no document came back for inputs 0, 1, 3 "));
  }
}

TEST_CASE("/openapi.json lists each endpoint's request parameters, and a request breaking one is a 422 naming it",
          "[gateway][params]") {
  Flow flow(FlowOptions{});
  flow.add({.name = "index", .uses = "VectorIndex", .with = {{"dim", 2}}});
  Served served(std::move(flow));
  Client client(served.port());
  const json::value openapi = client.get("/openapi.json").json();
  const json::value& parameters =
      openapi.at("components").at("schemas").at("search_input_model").at("properties").at("parameters");
  const json::value& limit = parameters.at("anyOf").at(0).at("properties").at("limit");
  CHECK(limit.at("type") == "integer");
  CHECK(limit.at("minimum").to_number<double>() == 1);
  CHECK_THAT(json::serialize(limit.at("description")), testing::contains("(index)"));
  CHECK(parameters.at("anyOf").at(0).at("properties").as_object().contains("filter"));

  REQUIRE(client.post("/index", R"({"data":[{"id":"a","embedding":[1,0]},{"id":"b","embedding":[0,1]}]})").status ==
          200);
  const Reply whole = client.post("/search", R"({"data":[{"embedding":[1,0]}],"parameters":{"limit":1.0}})");
  REQUIRE(whole.status == 200);
  CHECK(whole.json().at("data").at(0).at("matches").as_array().size() == 1);
  const Reply half = client.post("/search", R"({"data":[{"embedding":[1,0]}],"parameters":{"limit":1.5}})");
  CHECK(half.status == 422);
  CHECK_THAT(half.body, testing::contains("parameter 'limit': expected an integer from 1, got 1.5 (index on /search)"));
}

namespace {

// A flow of the SequenceClassifier on the tiny checkpoint (3 labels: negative, neutral, positive).
Flow classifier_flow() {
  Flow flow(FlowOptions{});
  const auto model = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models/bert-sequence-classifier";
  flow.add({.name = "classifier", .uses = "SequenceClassifier", .with = {{"model", model.string()}}});
  return flow;
}

// What the classifier gives in process for `text` (and `pair`), as [{"score", "label"}] best first.
json::array labels_in_process(Flow& flow, const std::string& text, const std::string& pair = "", bool raw = false) {
  DocumentArray docs;
  docs.push_back(Document(text));
  if (!pair.empty()) docs[0].tags["text_pair"] = pair;
  PostOptions options;
  options.parameters = {{"top_k", 0}, {"raw_scores", raw}};
  return flow.post("/classify", std::move(docs), options)[0].tags.at("labels").as_array();
}

void check_labels(const json::value& answer, const json::array& expected) {
  REQUIRE(answer.as_array().size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const json::object& got = answer.as_array()[i].as_object();
    CHECK(got.size() == 2);
    CHECK(got.at("label") == expected[i].at("label"));
    // The served request and the in-process one are batched differently (a batch of three inputs against one),
    // and float32 sums come out in another order: on this 2-core machine with two intra-op threads a raw score
    // of 1.19 differed by 1.4e-6 (with one thread, not at all). 1e-5 is float32 noise, not a changed model.
    const double want = expected[i].at("score").to_number<double>();
    CHECK(std::abs(got.at("score").to_number<double>() - want) <= 1e-5 * std::max(1.0, std::abs(want)));
  }
}

}  // namespace

TEST_CASE("TEI's /predict answers a SequenceClassifier's labels best first, one list per input of a batch",
          "[gateway][classify]") {
  Served served(classifier_flow());
  Client client(served.port());
  const std::string a = "Take some more tea, the March Hare said.", b = "I've had nothing yet.", c = "Alice replied.";
  const Reply one = client.post("/predict", json::serialize(json::object{{"inputs", a}}));
  REQUIRE(one.status == 200);
  check_labels(one.json(), labels_in_process(served.flow, a));
  CHECK(one.json().as_array().size() == 3);
  // TEI's /info describes the model as a classifier, with its labels.
  const json::value info = client.get("/info").json();
  CHECK(info.at("model_type").at("classifier").at("id2label").as_object().size() == 3);
  // A list of exactly two strings is one pair, as TEI reads it.
  const Reply pair = client.post("/predict", json::serialize(json::object{{"inputs", json::array{a, b}}}));
  REQUIRE(pair.status == 200);
  check_labels(pair.json(), labels_in_process(served.flow, a, b));
  const Reply batch = client.post(
      "/predict",
      json::serialize(json::object{{"inputs", json::array{json::array{a, b}, c, a}}, {"raw_scores", true}}));
  REQUIRE(batch.status == 200);
  REQUIRE(batch.json().as_array().size() == 3);
  check_labels(batch.json().as_array()[0], labels_in_process(served.flow, a, b, true));
  check_labels(batch.json().as_array()[1], labels_in_process(served.flow, c, "", true));
  check_labels(batch.json().as_array()[2], labels_in_process(served.flow, a, "", true));
  const Reply truncate = client.post("/predict", R"({"inputs":"x","truncate":false})");
  CHECK(truncate.status == 400);
  CHECK_THAT(truncate.body, testing::contains("'truncate'"));
  // An item of one string is a text: [["a"], ["b"]] is a batch of two texts.
  const Reply texts =
      client.post("/predict", json::serialize(json::object{{"inputs", json::array{json::array{a}, json::array{c}}}}));
  REQUIRE(texts.status == 200);
  check_labels(texts.json().as_array()[1], labels_in_process(served.flow, c));
  CHECK(client.post("/predict", R"({"inputs":[["a","b","c"]]})").status == 400);
  CHECK(client.post("/predict", R"({"inputs":[]})").status == 400);
}

TEST_CASE("Infinity's /classify answers labels and usage; a Jina body goes to the flow endpoint /classify",
          "[gateway][classify]") {
  Served served(classifier_flow());
  Client client(served.port());
  const std::string a = "Take some more tea.", b = "Alice replied in an offended tone.";
  const Reply r = client.post("/classify", json::serialize(json::object{{"input", json::array{a, b}}, {"model", "m"}}));
  REQUIRE(r.status == 200);
  const json::value body = r.json();
  const json::object& answer = body.as_object();
  CHECK(answer.at("object") == "list");
  CHECK(answer.at("model") == "m");
  REQUIRE(answer.at("data").as_array().size() == 2);
  check_labels(answer.at("data").as_array()[0], labels_in_process(served.flow, a));
  check_labels(answer.at("data").as_array()[1], labels_in_process(served.flow, b));
  const auto& usage = answer.at("usage").as_object();
  CHECK(usage.at("prompt_tokens").to_number<double>() > 2);
  CHECK(usage.at("total_tokens") == usage.at("prompt_tokens"));
  const Reply raw =
      client.post("/classify", json::serialize(json::object{{"input", json::array{a}}, {"raw_scores", true}}));
  REQUIRE(raw.status == 200);
  check_labels(raw.json().at("data").as_array()[0], labels_in_process(served.flow, a, "", true));
  // Jina's body: the flow endpoint, answered in Jina's shape with the labels as tags.
  const Reply jina = client.post("/classify", R"({"data":[{"text":"Take some more tea."}]})");
  REQUIRE(jina.status == 200);
  check_labels(jina.json().at("data").as_array()[0].at("tags").at("labels"), labels_in_process(served.flow, a));
  // Without a flow endpoint /classify, a Jina body is 404 and Infinity's shape fails naming the classifier.
  Served plain(fake_encoder_flow());
  Client other(plain.port());
  CHECK(other.post("/classify", R"({"data":[{"text":"x"}]})").status == 404);
}

TEST_CASE("TEI's /tokenize answers the served model's tokens with UTF-8 byte offsets, as its tokenizer gives them",
          "[gateway][tokenize]") {
  const auto folder = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models/bert-sequence-classifier";
  Served served(classifier_flow());
  Client client(served.port());
  const std::string text = "Caf\xc3\xa9 tea, Alice!";
  const Reply r = client.post("/tokenize", json::serialize(json::object{{"inputs", json::array{text, "x"}}}));
  REQUIRE(r.status == 200);
  const json::value answer = r.json();
  REQUIRE(answer.as_array().size() == 2);
  const auto tokenizer = models::Tokenizer::from_folder(folder);
  const models::Encoding e = tokenizer->encode_with_offsets(text);
  const auto bytes = models::byte_offsets(text, e.offsets);
  const json::array& tokens = answer.as_array()[0].as_array();
  REQUIRE(tokens.size() == e.ids.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    INFO(i);
    const json::object& t = tokens[i].as_object();
    CHECK(t.at("id").to_number<std::int64_t>() == e.ids[i]);
    CHECK(t.at("special").as_bool() == (e.special[i] != 0));
    if (e.special[i]) {
      CHECK(t.at("start").is_null());
      CHECK(t.at("stop").is_null());
      CHECK(std::string(t.at("text").as_string()) == tokenizer->id_to_token(e.ids[i]));  // TEI gives the token
      continue;
    }
    CHECK(t.at("start").to_number<std::size_t>() == bytes[i].start);
    CHECK(t.at("stop").to_number<std::size_t>() == bytes[i].end);
    CHECK(std::string(t.at("text").as_string()) == text.substr(bytes[i].start, bytes[i].end - bytes[i].start));
  }
  CHECK(tokens.front().at("special").as_bool());
  CHECK(std::string(tokens.front().at("text").as_string()) == "[CLS]");
  // Without the special tokens, the same tokens less the template's.
  const Reply plain =
      client.post("/tokenize", json::serialize(json::object{{"inputs", text}, {"add_special_tokens", false}}));
  REQUIRE(plain.status == 200);
  const json::value plain_answer = plain.json();
  const json::array& words = plain_answer.as_array()[0].as_array();
  CHECK(words.size() == e.ids.size() - tokenizer->special_tokens_count(false));
  for (const auto& t : words) CHECK_FALSE(t.at("special").as_bool());
  CHECK(client.post("/tokenize", R"({"inputs":"x","prompt_name":"query"})").status == 400);
  CHECK(client.post("/tokenize", R"({"inputs":[]})").status == 400);
  // A flow without a model folder has no tokenizer: 422 saying so.
  Served none(fake_encoder_flow());
  Client other(none.port());
  const Reply missing = other.post("/tokenize", R"({"inputs":"x"})");
  CHECK(missing.status == 422);
  CHECK_THAT(missing.body, testing::contains("no tokenizer"));
}
