// Tests of the pass planner (flowline/models/pass_planner.hpp): longest first and stable, the budgets of
// sequences and tokens, packing with type ids and pooling skips, scattering per-sequence and per-token
// outputs back into the request's order, and the architecture table's head column.
#include "test_support.hpp"

#include "flowline/models/cross_encoder.hpp"
#include "flowline/models/pass_planner.hpp"

#include "transformer.hpp"

#include <ATen/ATen.h>
#include <boost/json.hpp>

#include <numeric>

using namespace flowline;
using namespace flowline::models;

namespace {

// Sequences of the given lengths; sequence i's tokens are 100 * i + k (k = 0, 1, ...), type ids i % 2.
struct Request {
  std::vector<std::int32_t> ids, types;
  std::vector<std::size_t> offsets{0};

  explicit Request(const std::vector<std::size_t>& lengths) {
    for (std::size_t i = 0; i < lengths.size(); ++i) {
      for (std::size_t k = 0; k < lengths[i]; ++k) {
        ids.push_back(static_cast<std::int32_t>(100 * i + k));
        types.push_back(static_cast<std::int32_t>(i % 2));
      }
      offsets.push_back(ids.size());
    }
  }
};

std::vector<std::size_t> lengths_of(const Pass& pass) { return {pass.batch.lengths.begin(), pass.batch.lengths.end()}; }

}  // namespace

TEST_CASE("the planner sorts longest first, keeps the request's order among equals and packs each pass",
          "[models][planner]") {
  const Request r({3, 5, 1, 5, 2, 3});
  PassPlanner planner({.max_sequences = 4});
  planner.plan({r.ids, r.offsets, r.types});
  CHECK(std::vector<std::size_t>(planner.order().begin(), planner.order().end()) ==
        std::vector<std::size_t>{1, 3, 0, 5, 4, 2});
  REQUIRE(planner.passes().size() == 2);
  const Pass& first = planner.passes()[0];
  CHECK(lengths_of(first) == std::vector<std::size_t>{5, 5, 3, 3});
  CHECK(first.first == 0);
  CHECK(first.first_token == 0);
  CHECK(first.batch.ids.size() == 16);
  CHECK(first.batch.ids[0] == 100);  // sequence 1's first token
  CHECK(first.batch.ids[5] == 300);  // then sequence 3's
  CHECK(first.batch.type_ids.size() == 16);
  CHECK(first.batch.type_ids[5] == 1);
  CHECK(first.batch.pooling_skip.empty());
  const Pass& second = planner.passes()[1];
  CHECK(std::vector<std::size_t>(second.sequences.begin(), second.sequences.end()) == std::vector<std::size_t>{4, 2});
  CHECK(second.first == 4);
  CHECK(second.first_token == 16);
  CHECK(second.batch.ids[0] == 400);
  CHECK(planner.sequence_count() == 6);
  CHECK(planner.token_count() == 19);
}

TEST_CASE("the planner keeps each pass within max_tokens, a longer sequence going alone", "[models][planner]") {
  const Request r({9, 4, 4, 3, 3, 3, 1});
  PassPlanner planner({.max_sequences = 64, .max_tokens = 8});
  planner.plan({r.ids, r.offsets});
  std::vector<std::vector<std::size_t>> passes;
  for (const Pass& p : planner.passes()) {
    passes.push_back(lengths_of(p));
    CHECK(p.batch.type_ids.empty());
  }
  // 9 alone (over the budget), 4 4 (8), 3 3 (a third would make 9), 3 1.
  CHECK(passes == std::vector<std::vector<std::size_t>>{{9}, {4, 4}, {3, 3}, {3, 1}});
  // A new plan replaces the old one; a budget of one sequence makes a pass each.
  planner.set_budget({.max_sequences = 1});
  planner.plan({r.ids, r.offsets});
  CHECK(planner.passes().size() == 7);
  planner.plan({{}, {}});
  CHECK(planner.passes().empty());
}

TEST_CASE("the planner caps pooling skips below each sequence's length", "[models][planner]") {
  const Request r({2, 6, 4});
  PassPlanner planner;
  planner.plan({r.ids, r.offsets, {}, 3});
  REQUIRE(planner.passes().size() == 1);
  const auto skips = planner.passes()[0].batch.pooling_skip;
  CHECK(std::vector<std::int64_t>(skips.begin(), skips.end()) == std::vector<std::int64_t>{3, 3, 1});
}

TEST_CASE("scatter_rows and scatter_tokens put each pass's outputs back in the request's order", "[models][planner]") {
  const Request r({2, 5, 1, 3, 3});
  PassPlanner planner({.max_sequences = 2});
  planner.plan({r.ids, r.offsets});
  const std::vector<std::size_t> order(planner.order().begin(), planner.order().end());
  const at::Tensor rows = at::tensor(std::vector<std::int64_t>(order.begin(), order.end()), at::kLong);
  const std::vector<std::int64_t> token_order = planner.token_order();
  const at::Tensor tokens = at::tensor(token_order, at::kLong);
  at::Tensor per_sequence = at::zeros({5, 2}), per_token = at::zeros({static_cast<std::int64_t>(r.ids.size()), 1});
  for (const Pass& pass : planner.passes()) {
    // An "output" that says which sequence and which token it came from.
    std::vector<float> seq, tok;
    for (const std::size_t s : pass.sequences) seq.insert(seq.end(), {static_cast<float>(s), -1.0f});
    for (const std::int32_t id : pass.batch.ids) tok.push_back(static_cast<float>(id));
    scatter_rows(per_sequence, rows, pass, at::tensor(seq).view({-1, 2}));
    scatter_tokens(per_token, tokens, pass, at::tensor(tok).view({-1, 1}));
  }
  for (std::int64_t i = 0; i < 5; ++i) CHECK(per_sequence[i][0].item<float>() == static_cast<float>(i));
  for (std::size_t t = 0; t < r.ids.size(); ++t)
    CHECK(per_token[static_cast<std::int64_t>(t)][0].item<float>() == static_cast<float>(r.ids[t]));
}

TEST_CASE("heads are a column of the architecture table: the sequence-classification layouts and their refusals",
          "[models][heads]") {
  namespace d = models::detail;
  CHECK(d::head_kinds().size() == d::kHeadKinds);
  const auto with_head = d::model_types_with(d::HeadKind::SequenceClassification);
  CHECK(std::vector<std::string>(with_head.begin(), with_head.end()) ==
        std::vector<std::string>{"bert", "roberta", "xlm-roberta", "camembert", "deberta-v2"});
  CHECK(supported_architectures(Checkpoint::Use::Embedding) ==
        std::vector<std::string>{"BERT", "RoBERTa/XLM-R/CamemBERT", "DistilBERT", "MPNet", "ModernBERT", "Qwen3",
                                 "DeBERTa-v2/v3"});
  CHECK(supported_architectures(Checkpoint::Use::CrossEncoder) ==
        std::vector<std::string>{"BERT", "RoBERTa/XLM-R/CamemBERT", "DeBERTa-v2/v3"});
  // An MPNet checkpoint that calls itself a cross-encoder: refused at validation and when made, naming the
  // file and the model types that have a head.
  const auto tiny = std::filesystem::path(FLOWLINE_SOURCE_DIR) / "tests/data/tiny-models";
  const auto dir = testing::scratch_dir("mpnet cross-encoder");
  std::filesystem::copy(tiny / "mpnet", dir, std::filesystem::copy_options::recursive);
  auto config = boost::json::parse(testing::read_text(dir / "config.json")).as_object();
  config["architectures"] = boost::json::array{"MPNetForSequenceClassification"};
  config["num_labels"] = 1;
  testing::write_text(dir / "config.json", boost::json::serialize(config));
  const std::string expected =
      "config.json': a mpnet sequence classification head is not supported (bert, roberta, "
      "xlm-roberta, camembert, deberta-v2 heads)";
  CHECK_THAT(Checkpoint::problem(dir, Checkpoint::Use::CrossEncoder).value_or(""), testing::contains(expected));
  CHECK_THROWS_WITH(CrossEncoderModel(Checkpoint::read(dir), c10::Device(c10::kCPU), c10::kFloat),
                    testing::contains(expected));
  CHECK(Checkpoint::read(dir).weights_file() == dir / "model.safetensors");
  std::filesystem::remove_all(dir);
}

TEST_CASE(
    "warm-up passes: on a GPU the largest pass first, then each power of two of tokens down to 256; on the CPU one "
    "short sequence",
    "[models][planner]") {
  const std::vector<std::int32_t> text{101, 7, 8, 102};
  struct Seen {
    std::size_t tokens = 0, sequences = 0, longest = 0;
    bool cycled = true;
  };
  const auto passes_of = [&](c10::Device device, std::size_t sequences, std::size_t length) {
    std::vector<Seen> seen;
    warm_up_passes(device, sequences, length, text, [&](const PackedBatch& pass) {
      Seen s{pass.ids.size(), pass.lengths.size(), 0, true};
      std::size_t t = 0;
      for (const std::int64_t n : pass.lengths) {
        s.longest = std::max(s.longest, static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i, ++t)
          s.cycled = s.cycled && pass.ids[t] == text[static_cast<std::size_t>(i) % 4];
      }
      seen.push_back(s);
    });
    return seen;
  };
  // The device is only looked at, never used: a CUDA device without a GPU will do.
  const c10::Device gpu(c10::kCUDA, 0);
  // seed 4's tagger at batch 50: 50 windows of 512 = 25,600 tokens, then 16,384 ... 256 in windows of 128.
  auto seen = passes_of(gpu, 50, 512);
  REQUIRE(seen.size() == 8);
  CHECK((seen[0].tokens == 25600 && seen[0].sequences == 50 && seen[0].longest == 512));
  for (std::size_t i = 1; i < seen.size(); ++i) {
    CHECK(seen[i].tokens == (std::size_t{16384} >> (i - 1)));
    CHECK(seen[i].longest == 128);
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](const Seen& s) { return s.cycled; }));
  // At most 2^15 tokens; a short max_length makes shorter sequences; a small largest pass has no ladder under 256.
  seen = passes_of(gpu, 300, 512);
  CHECK((seen.front().tokens == 32768 && seen.front().longest == 512 && seen[1].tokens == 16384));
  seen = passes_of(gpu, 64, 64);
  CHECK((seen.front().tokens == 4096 && seen[1].tokens == 2048 && seen[1].longest == 64 && seen.back().tokens == 256));
  seen = passes_of(gpu, 2, 100);
  REQUIRE(seen.size() == 1);
  CHECK((seen[0].tokens == 200 && seen[0].sequences == 2));
  seen = passes_of(c10::Device(c10::kCPU), 50, 512);
  REQUIRE(seen.size() == 1);
  CHECK((seen[0].tokens == 16 && seen[0].sequences == 1));
  CHECK_THROWS_WITH(warm_up_passes(gpu, 1, 8, {}, [](const PackedBatch&) {}), testing::contains("no text"));
}
