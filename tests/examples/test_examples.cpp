// Every example program is built and run; its exit code and the line it prints are checked.
#include "test_support.hpp"

#include <fmt/format.h>

using namespace flowline;

namespace {
testing::ProcessResult run_example(const std::string& name, const std::string& args = "") {
  return testing::run_process(fmt::format("'{}/examples/{}' {}", FLOWLINE_BINARY_DIR, name, args));
}
}  // namespace

TEST_CASE("the callback example receives every response in order", "[examples]") {
  const auto r = run_example("post_with_callback");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, testing::starts_with("request 0: 8 sentences, first has 2 words\n"));
  CHECK_THAT(r.out, testing::ends_with("done: 3 requests, 20 sentences\n"));
}

TEST_CASE("the YAML example runs the paragraphs flow over Alice", "[examples]") {
  const auto dir = testing::scratch_dir("example yaml");
  const auto r = testing::run_process(
      fmt::format("FLOWLINE_OUT_DIR='{}' '{}/examples/load_yaml_flow' '{}/flows/paragraphs.yml' '{}'", dir.string(),
                  FLOWLINE_BINARY_DIR, FLOWLINE_SOURCE_DIR, testing::corpus_file("alice-in-wonderland.txt").string()));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, testing::starts_with("881 documents out of 1 request(s) in "));
}

TEST_CASE("the two-endpoint example indexes and then searches", "[examples]") {
  const auto r = run_example("two_endpoints");
  CHECK(r.exit_code == 0);
  CHECK(r.out == "best match for 'rabbit ran late': 'the white rabbit ran' (2 shared words)\n");
}

TEST_CASE("the DAG example merges both branches' tags", "[examples]") {
  const auto r = run_example("dag_join");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, testing::starts_with("1 document(s); tags after the join: {"));
  CHECK_THAT(r.out, testing::contains("\"source\":\"dag example\""));
}

TEST_CASE("the 10,000-sentence example encodes with a progress bar", "[examples][encoder]") {
  const auto r = run_example(
      "encode_10k", fmt::format("--device cpu --count 200 --model '{}/tests/data/tiny-bert'", FLOWLINE_SOURCE_DIR));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, testing::contains("7 steps done in "));
  CHECK_THAT(r.err, testing::contains("embeddings of 32 dimensions"));
}

TEST_CASE("the direct-executor example links SentenceEncoder and registers it itself", "[examples][encoder]") {
  const auto r = run_example("direct_executor", fmt::format("'{}/tests/data/tiny-bert'", FLOWLINE_SOURCE_DIR));
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, testing::ends_with("3 sentences encoded by SentenceEncoder (flowline::sentence_encoder), 32 "
                                       "dimensions each\n"));
}
