// flowline's errors: diagnostics with file:line:col, ConfigError, InputError, ExecutorError, "did you mean", the
// version.
#include "flowline/error.hpp"
#include "flowline/version.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace flowline {

std::string_view version() noexcept { return FLOWLINE_VERSION_STRING; }

std::string SourceLocation::to_string() const {
  if (file.empty() && line == 0) return "";
  if (line == 0) return file;
  if (column == 0) return fmt::format("{}:{}", file, line);
  return fmt::format("{}:{}:{}", file, line, column);
}

std::string Diagnostic::to_string() const {
  const std::string at = where.to_string();
  return at.empty() ? message : fmt::format("{}: {}", at, message);
}

namespace {
std::string join_diagnostics(const std::vector<Diagnostic>& diagnostics) {
  std::string text;
  for (const auto& d : diagnostics) {
    if (!text.empty()) text += '\n';
    text += d.to_string();
  }
  return text;
}
}  // namespace

ConfigError::ConfigError(std::vector<Diagnostic> diagnostics)
    : Error(join_diagnostics(diagnostics)), diagnostics_(std::move(diagnostics)) {}

InputError::InputError(SourceLocation where, const std::string& message)
    : Error(where.to_string().empty() ? message : fmt::format("{}: {}", where.to_string(), message)),
      where_(std::move(where)) {}

ExecutorError::ExecutorError(std::string executor, const std::string& message)
    : Error(fmt::format("executor '{}': {}", executor, message)), executor_(std::move(executor)), detail_(message) {}

namespace {
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const bool same =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& candidate : candidates) {
    const std::size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace flowline
