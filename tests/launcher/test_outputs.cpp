// No command silently replaces a complete output, and nothing a client sends overwrites what it did not
// name: `run` and `serve` refuse to start while a file their flow's writers (or --output) would replace
// exists, `profile` writes nowhere the flow names, a served flow's writer is bounded, and a tags-only
// /update through the shipped search flow keeps the document's vector. Real launcher processes throughout.
#include "../gateway/gateway_fixtures.hpp"
#include "child_process.hpp"

#include <fmt/format.h>

#include <csignal>

using namespace flowline;
using gateway_test::Client;
using testing::ChildProcess;
using namespace std::chrono_literals;
namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

testing::ProcessResult launch(const std::string& args) {
  return testing::run_process(fmt::format("'{}' {}", FLOWLINE_LAUNCHER, args));
}

// TextStats, then a JsonlWriter to `dir`/out.jsonl (line 4 of the file names the path).
fs::path writer_flow(const fs::path& dir) {
  testing::write_text(dir / "flow.yml",
                      "executors:\n  - {name: stats, uses: TextStats}\n  - name: writer\n    uses: JsonlWriter\n"
                      "    with: {path: out.jsonl}\n");
  testing::write_text(dir / "in.txt", "one line\nanother line\n");
  return dir / "flow.yml";
}

// `flowline serve` on a free port, stopped by the destructor.
class Server {
 public:
  Server(const fs::path& dir, const std::vector<std::string>& args)
      : process_(with_launcher(dir, args), dir / "serve.log") {
    port_ = static_cast<std::uint16_t>(testing::wait_for_port(process_, dir / "serve.port", 120s));
    INFO(process_.log());
    REQUIRE(port_ != 0);
  }
  std::uint16_t port() const { return port_; }
  ChildProcess& process() { return process_; }

 private:
  static std::vector<std::string> with_launcher(const fs::path& dir, std::vector<std::string> args) {
    args.insert(args.begin(), {FLOWLINE_LAUNCHER, "serve"});
    for (const char* a : {"--port", "0", "--ready-file"}) args.emplace_back(a);
    args.push_back((dir / "serve.port").string());
    return args;
  }
  ChildProcess process_;
  std::uint16_t port_ = 0;
};

}  // namespace

TEST_CASE("flowline run refuses to replace a writer's existing output, naming it, unless --overwrite", "[launcher]") {
  const auto dir = testing::scratch_dir("outputs run refuses");
  const fs::path flow = writer_flow(dir);
  testing::write_text(dir / "out.jsonl", "the main job's result\n");
  const auto refused = launch(fmt::format("run '{}' -i '{}'", flow.string(), (dir / "in.txt").string()));
  INFO(refused.err);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, testing::contains(fmt::format("{}:5:", flow.string())));
  CHECK_THAT(refused.err, testing::contains(fmt::format("executor 'writer' writes '{}' (path), which exists: this "
                                                        "run would replace it",
                                                        (dir / "out.jsonl").string())));
  CHECK_THAT(refused.err, testing::contains("--set writer.path=FILE"));
  CHECK(testing::read_text(dir / "out.jsonl") == "the main job's result\n");
  CHECK_FALSE(fs::exists(dir / "out.jsonl.partial"));

  const auto replaced = launch(fmt::format("run '{}' -i '{}' --overwrite", flow.string(), (dir / "in.txt").string()));
  INFO(replaced.err);
  REQUIRE(replaced.exit_code == 0);
  CHECK(read_jsonl(dir / "out.jsonl").size() == 2);
}

TEST_CASE("flowline run refuses an --output that exists unless --overwrite", "[launcher]") {
  const auto dir = testing::scratch_dir("outputs run output");
  testing::write_text(dir / "flow.yml", "executors:\n  - {name: stats, uses: TextStats}\n");
  testing::write_text(dir / "in.txt", "one line\n");
  testing::write_text(dir / "result.jsonl", "kept\n");
  const std::string args = fmt::format("run '{0}/flow.yml' -i '{0}/in.txt' -o '{0}/result.jsonl'", dir.string());
  const auto refused = launch(args);
  INFO(refused.err);
  CHECK(refused.exit_code == 2);
  CHECK_THAT(refused.err, testing::contains(fmt::format("--output '{}/result.jsonl' exists", dir.string())));
  CHECK(testing::read_text(dir / "result.jsonl") == "kept\n");
  const auto replaced = launch(args + " --overwrite");
  INFO(replaced.err);
  REQUIRE(replaced.exit_code == 0);
  CHECK(read_jsonl(dir / "result.jsonl").size() == 1);
}

TEST_CASE("flowline serve refuses to start when its flow's writer would replace an existing file", "[launcher]") {
  const auto dir = testing::scratch_dir("outputs serve refuses");
  const fs::path flow = writer_flow(dir);
  testing::write_text(dir / "out.jsonl", "the main job's result\n");
  const auto r = launch(fmt::format("serve '{}' --port 0", flow.string()));
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, testing::contains("executor 'writer' writes"));
  CHECK_THAT(r.err, testing::contains("pass --overwrite"));
  CHECK(testing::read_text(dir / "out.jsonl") == "the main job's result\n");
}

TEST_CASE("flowline profile writes nowhere the flow names: its writers' files go to scratch and are removed",
          "[launcher][profile]") {
  const auto dir = testing::scratch_dir("outputs profile");
  testing::write_text(dir / "flow.yml", fmt::format("executors:\n  - name: encoder\n    uses: SentenceEncoder\n"
                                                    "    with: {{model: '{}/tests/data/tiny-bert'}}\n"
                                                    "  - name: writer\n    uses: JsonlWriter\n"
                                                    "    with: {{path: out.jsonl}}\n",
                                                    FLOWLINE_SOURCE_DIR));
  testing::write_text(dir / "in.txt", "one line\nanother line\nand a third\n");
  testing::write_text(dir / "out.jsonl", "the main job's result\n");
  const auto r =
      launch(fmt::format("profile '{0}/flow.yml' -i '{0}/in.txt' --batch-sizes 1,2 --json "
                         "'{0}/profile.json' --plot ''",
                         dir.string()));
  INFO(r.err);
  INFO(r.out);
  REQUIRE(r.exit_code == 0);
  CHECK(testing::read_text(dir / "out.jsonl") == "the main job's result\n");
  CHECK_FALSE(fs::exists(dir / "out.jsonl.partial"));
  const auto runs = json::parse(testing::read_text(dir / "profile.json")).at("runs").as_array();
  REQUIRE(runs.size() == 2);
  for (const auto& run : runs) CHECK(run.at("documents").to_number<std::uint64_t>() == 3);
}

TEST_CASE("a served flow's writer refuses requests once its file holds --max-output-bytes", "[launcher]") {
  const auto dir = testing::scratch_dir("outputs serve bound");
  const fs::path flow = writer_flow(dir);
  constexpr std::uint64_t kBound = 4000;
  std::string refusal;
  std::uint64_t accepted_bytes = 0;
  {
    Server server(dir, {flow.string(), "--max-output-bytes", std::to_string(kBound)});
    Client client(server.port());
    const std::string body = fmt::format(R"({{"data": [{{"text": "{}"}}]}})", std::string(300, 'x'));
    for (int i = 0; i < 200 && refusal.empty(); ++i) {
      const auto reply = client.post("/post", body);
      if (reply.status == 200 && reply.body.find("--max-output-bytes") == std::string::npos) {
        accepted_bytes += 300;
      } else {
        refusal = reply.body;
      }
    }
    CHECK(client.post("/post", body).body.find("--max-output-bytes") != std::string::npos);  // and stays so
    server.process().stop(30s);
  }
  INFO(refusal);
  REQUIRE_FALSE(refusal.empty());
  CHECK_THAT(refusal, testing::contains(fmt::format("pass the {} bytes a served flow's output may hold", kBound)));
  CHECK(accepted_bytes >= kBound / 2);
  // Formatting runs behind the requests: the file may pass the bound by what was in flight, never by much.
  const auto written = fs::file_size(dir / "out.jsonl");
  CHECK(written >= kBound);
  CHECK(written < kBound + 20 * 400);
}

TEST_CASE("a tags-only /update through flows/search.yml changes the tags and keeps the document's vector",
          "[launcher][index]") {
  const fs::path root(FLOWLINE_SOURCE_DIR);
  if (!fs::exists(root / "models" / "all-MiniLM-L6-v2" / "config.json")) {
    FLOWLINE_SKIP("models/all-MiniLM-L6-v2 is not there (scripts/setup.sh puts it there)");
  }
  const auto dir = testing::scratch_dir("outputs tags-only update");
  Server server(
      dir, {(root / "flows" / "search.yml").string(), "--set", "encoder.device=cpu", "--set", "encoder.warmup=false",
            "--set", fmt::format("index.workspace={}", (dir / "workspace").string())});
  Client client(server.port());
  const std::string whale = "The whale rose from the sea and struck the boat.";
  const auto indexed = client.post(
      "/index",
      json::serialize(json::object{
          {"data", json::array{json::object{{"id", "whale"}, {"text", whale}},
                               json::object{{"id", "tea"}, {"text", "The Hatter poured the tea."}},
                               json::object{{"id", "queen"}, {"text", "Off with her head, said the Queen."}}}}}));
  REQUIRE(indexed.status == 200);
  const auto updated = client.post("/update", R"({"data": [{"id": "whale", "tags": {"book": "moby-dick"}}]})");
  INFO(updated.body);
  REQUIRE(updated.status == 200);
  const auto found =
      client.post("/search", json::serialize(json::object{{"data", json::array{json::object{{"text", whale}}}},
                                                          {"parameters", json::object{{"limit", 3}}}}));
  INFO(found.body);
  REQUIRE(found.status == 200);
  const json::value answer = found.json();
  const auto& best = answer.at("data").at(0).at("matches").at(0);
  CHECK(best.at("id").as_string() == "whale");
  CHECK(best.at("text").as_string() == whale);
  CHECK(best.at("tags").at("book").as_string() == "moby-dick");
  CHECK(best.at("scores").at("cosine").at("value").to_number<double>() > 0.999);
}
