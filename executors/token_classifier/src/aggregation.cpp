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

// group_sub_entities: the first member's label past its first '-', the members' mean score and decoded words.
Entity group(std::span<const Entity> members, const DecodeTokens& decode) {
  Entity out;
  const std::string& first = members.front().label;
  const auto dash = first.find('-');
  out.label = dash == std::string::npos ? first : first.substr(dash + 1);
  std::vector<std::string_view> words;
  double sum = 0;
  for (const Entity& e : members) {
    sum += e.score;
    words.push_back(e.word);
  }
  out.score = sum / static_cast<double>(members.size());
  out.word = decode(words);
  out.start = members.front().start;
  out.end = members.back().end;
  return out;
}

std::vector<Entity> group_entities(const std::vector<Entity>& entities, const DecodeTokens& decode) {
  std::vector<Entity> groups;
  std::size_t begin = 0;
  for (std::size_t i = 1; i <= entities.size(); ++i) {
    if (i < entities.size()) {
      const auto [bi, tag] = tag_of(entities[i].label);
      const auto [last_bi, last_tag] = tag_of(entities[i - 1].label);
      if (tag == last_tag && bi != 'B') continue;
    }
    if (i > begin) groups.push_back(group(std::span(entities).subspan(begin, i - begin), decode));
    begin = i;
  }
  return groups;
}

// aggregate_word: one word's tokens to one entity.
Entity aggregate_word(std::span<const PreEntity> tokens, Strategy strategy, const std::vector<std::string>& labels,
                      const DecodeTokens& decode) {
  std::vector<std::string_view> words;
  for (const PreEntity& t : tokens) words.push_back(t.word);
  Entity out;
  out.word = decode(words);
  out.start = tokens.front().start;
  out.end = tokens.back().end;
  std::size_t label = 0;
  if (strategy == Strategy::Average) {
    std::vector<double> mean(tokens.front().scores.size(), 0.0);
    for (const PreEntity& t : tokens) {
      for (std::size_t l = 0; l < mean.size(); ++l) mean[l] += t.scores[l];
    }
    for (double& m : mean) m /= static_cast<double>(tokens.size());
    label = static_cast<std::size_t>(std::max_element(mean.begin(), mean.end()) - mean.begin());
    out.score = mean[label];
  } else {
    const PreEntity* chosen = &tokens.front();
    if (strategy == Strategy::Max) {
      float best = *std::max_element(chosen->scores.begin(), chosen->scores.end());
      for (const PreEntity& t : tokens) {
        const float top = *std::max_element(t.scores.begin(), t.scores.end());
        if (top > best) {
          best = top;
          chosen = &t;
        }
      }
    }
    label = argmax(chosen->scores);
    out.score = chosen->scores[label];
  }
  out.label = labels.at(label);
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
                              const std::vector<std::string>& labels, const DecodeTokens& decode) {
  std::vector<Entity> entities;
  if (strategy == Strategy::None || strategy == Strategy::Simple) {
    for (const PreEntity& t : tokens) {
      const std::size_t label = argmax(t.scores);
      entities.push_back({labels.at(label), t.scores[label], t.word, t.start, t.end, t.index});
    }
    if (strategy == Strategy::None) return entities;
  } else {
    // aggregate_words: a word is a token and the sub-words after it.
    std::size_t begin = 0;
    for (std::size_t i = 1; i <= tokens.size(); ++i) {
      if (i < tokens.size() && tokens[i].is_subword) continue;
      if (i > begin) entities.push_back(aggregate_word(tokens.subspan(begin, i - begin), strategy, labels, decode));
      begin = i;
    }
  }
  return group_entities(entities, decode);
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
