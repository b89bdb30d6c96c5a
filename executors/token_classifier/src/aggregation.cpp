// transformers' TokenClassificationPipeline post-processing (flowline/token_classifier/aggregation.hpp), in the
// pipeline's order of operations: argmax takes the first of equal scores, max() the first of equal tokens.
#include "flowline/token_classifier/aggregation.hpp"

#include <algorithm>
#include <cctype>
#include <utility>

namespace flowline::token_classifier {
namespace {

std::size_t argmax(std::span<const float> scores) {
  return static_cast<std::size_t>(std::max_element(scores.begin(), scores.end()) - scores.begin());
}

// get_tag: ("B", X) for B-X, ("I", X) for I-X, and ("I", name) for any other name.
std::pair<char, std::string_view> tag_of(std::string_view name) {
  if (name.starts_with("B-")) return {'B', name.substr(2)};
  if (name.starts_with("I-")) return {'I', name.substr(2)};
  return {'I', name};
}

// A token (none, simple) or a word (first, average, max) labelled: tokens [first, last) of the window.
struct Scored {
  std::size_t label = 0;
  double score = 0;
  std::size_t first = 0, last = 0;
};

bool ignored(std::string_view label, std::span<const std::string> ignore) {
  return std::find(ignore.begin(), ignore.end(), label) != ignore.end();
}

// aggregate_word's vote: one word's tokens to one label and score.
Scored score_word(std::span<const PreEntity> tokens, std::size_t first, std::size_t last, Strategy strategy) {
  const auto word = tokens.subspan(first, last - first);
  Scored out{0, 0, first, last};
  if (strategy == Strategy::Average) {
    std::vector<double> mean(word.front().scores.size(), 0.0);
    for (const PreEntity& t : word) {
      for (std::size_t l = 0; l < mean.size(); ++l) mean[l] += t.scores[l];
    }
    for (double& m : mean) m /= static_cast<double>(word.size());
    out.label = static_cast<std::size_t>(std::max_element(mean.begin(), mean.end()) - mean.begin());
    out.score = mean[out.label];
    return out;
  }
  const PreEntity* chosen = &word.front();
  if (strategy == Strategy::Max) {
    float best = *std::max_element(chosen->scores.begin(), chosen->scores.end());
    for (const PreEntity& t : word) {
      const float top = *std::max_element(t.scores.begin(), t.scores.end());
      if (top > best) {
        best = top;
        chosen = &t;
      }
    }
  }
  out.label = argmax(chosen->scores);
  out.score = chosen->scores[out.label];
  return out;
}

// group_sub_entities: the first member's label past its first '-', the members' mean score and decoded words
// (a word's own word decoded from its tokens first, as aggregate_word does). `group_label`: computed already.
Entity group(std::span<const PreEntity> tokens, std::span<const Scored> members, std::string_view group_label,
             bool words, const DecodeTokens& decode) {
  Entity out;
  out.label = std::string(group_label);
  std::vector<std::string> decoded;
  std::vector<std::string_view> views;
  double sum = 0;
  for (const Scored& m : members) {
    sum += m.score;
    if (words) {
      std::vector<std::string_view> pieces;
      for (std::size_t t = m.first; t < m.last; ++t) pieces.push_back(tokens[t].word);
      decoded.push_back(decode(pieces));
    } else {
      views.push_back(tokens[m.first].word);
    }
  }
  if (words) views.assign(decoded.begin(), decoded.end());
  out.score = sum / static_cast<double>(members.size());
  out.word = decode(views);
  out.start = tokens[members.front().first].start;
  out.end = tokens[members.back().last - 1].end;
  return out;
}

}  // namespace

std::optional<Strategy> parse_strategy(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const Strategy s : {Strategy::None, Strategy::Simple, Strategy::First, Strategy::Average, Strategy::Max}) {
    if (to_string(s) == lower) return s;
  }
  return std::nullopt;
}

std::string_view to_string(Strategy strategy) {
  switch (strategy) {
    case Strategy::None:
      return "none";
    case Strategy::Simple:
      return "simple";
    case Strategy::First:
      return "first";
    case Strategy::Average:
      return "average";
    case Strategy::Max:
      return "max";
  }
  return "?";
}

std::vector<Entity> aggregate(std::span<const PreEntity> tokens, Strategy strategy,
                              const std::vector<std::string>& labels, const DecodeTokens& decode,
                              std::span<const std::string> ignore) {
  std::vector<Scored> scored;
  std::vector<Entity> entities;
  const bool words = strategy != Strategy::None && strategy != Strategy::Simple;
  if (!words) {
    scored.reserve(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::size_t label = argmax(tokens[i].scores);
      scored.push_back({label, tokens[i].scores[label], i, i + 1});
    }
    if (strategy == Strategy::None) {
      for (const Scored& s : scored) {
        const PreEntity& t = tokens[s.first];
        if (ignored(labels.at(s.label), ignore)) continue;
        entities.push_back({labels.at(s.label), s.score, std::string(t.word), t.start, t.end, t.index});
      }
      return entities;
    }
  } else {
    // aggregate_words: a word is a token and the sub-words after it.
    std::size_t begin = 0;
    for (std::size_t i = 1; i <= tokens.size(); ++i) {
      if (i < tokens.size() && tokens[i].is_subword) continue;
      if (i > begin) scored.push_back(score_word(tokens, begin, i, strategy));
      begin = i;
    }
  }
  // group_entities: a run of one tag, each after the first not B-.
  std::size_t begin = 0;
  for (std::size_t i = 1; i <= scored.size(); ++i) {
    if (i < scored.size()) {
      const auto [bi, tag] = tag_of(labels.at(scored[i].label));
      const auto [last_bi, last_tag] = tag_of(labels.at(scored[i - 1].label));
      if (tag == last_tag && bi != 'B') continue;
    }
    if (i > begin) {
      const std::string_view first = labels.at(scored[begin].label);
      const auto dash = first.find('-');
      const std::string_view label = dash == std::string_view::npos ? first : first.substr(dash + 1);
      if (!ignored(label, ignore)) {
        entities.push_back(group(tokens, std::span(scored).subspan(begin, i - begin), label, words, decode));
      }
    }
    begin = i;
  }
  return entities;
}

void drop_ignored(std::vector<Entity>& entities, std::span<const std::string> ignore) {
  std::erase_if(entities,
                [&](const Entity& e) { return std::find(ignore.begin(), ignore.end(), e.label) != ignore.end(); });
}

std::vector<Entity> merge_overlapping(std::vector<Entity> entities) {
  if (entities.empty()) return entities;
  std::stable_sort(entities.begin(), entities.end(),
                   [](const Entity& a, const Entity& b) { return a.start < b.start; });
  std::vector<Entity> out;
  Entity previous = entities.front();
  for (const Entity& e : entities) {
    if (previous.start <= e.start && e.start < previous.end) {
      const std::size_t length = e.end - e.start, previous_length = previous.end - previous.start;
      if (length > previous_length || (length == previous_length && e.score > previous.score)) previous = e;
    } else {
      out.push_back(std::move(previous));
      previous = e;
    }
  }
  out.push_back(std::move(previous));
  return out;
}

}  // namespace flowline::token_classifier
