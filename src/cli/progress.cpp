// The launcher's progress line: documents, requests and rate, redrawn in place on a terminal.
#include "progress.hpp"

#include <fmt/format.h>

namespace flowline::cli {

std::string format_duration(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f}s", seconds);
  const auto total = static_cast<long>(seconds);
  if (total < 3600) return fmt::format("{}:{:02}", total / 60, total % 60);
  return fmt::format("{}:{:02}:{:02}", total / 3600, (total / 60) % 60, total % 60);
}

ProgressLine::ProgressLine(std::string label, bool interactive, std::FILE* out)
    : label_(std::move(label)), interactive_(interactive), out_(out) {}

void ProgressLine::set_resumed(std::uint64_t skipped, std::uint64_t left) {
  resumed_ = true;
  skipped_ = skipped;
  left_ = left;
}

void ProgressLine::update(const Progress& p) {
  if (!interactive_) return;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  drawn_ = true;
  const double rate = p.seconds > 0 ? p.documents / p.seconds : 0;
  fmt::print(out_, "\r\x1b[2K{} {} docs | {:.0f} docs/s | {} steps ({:.1f} step/s){}{} | {}", label_, p.documents, rate,
             p.requests, p.seconds > 0 ? p.requests / p.seconds : 0.0,
             p.failed_requests ? fmt::format(" | {} failed", p.failed_requests) : std::string(),
             resumed_ ? fmt::format(" | {} skipped, {} left", skipped_, left_ > p.documents ? left_ - p.documents : 0)
                      : std::string(),
             format_duration(p.seconds));
  std::fflush(out_);
}

void ProgressLine::finish(const PostSummary& s) {
  if (interactive_ && drawn_) fmt::print(out_, "\r\x1b[2K");
  // Documents out: those of the answered requests (an executor may drop or add documents).
  const std::uint64_t out = s.documents - s.failed_documents;
  fmt::print(out_, "{} {} docs in {} steps done in {} ({:.0f} docs/s, {:.1f} step/s){}; {} documents in, {} out\n",
             label_, s.documents, s.requests, format_duration(s.seconds), s.docs_per_second(),
             s.seconds > 0 ? s.requests / s.seconds : 0.0,
             s.failed_requests ? fmt::format(", {} requests ({} docs) FAILED", s.failed_requests, s.failed_documents)
                               : std::string(),
             s.input_documents, out);
  if (resumed_) {
    fmt::print(out_, "{} resumed: {} documents skipped (already in the output), {} were left\n", label_, skipped_,
               left_);
  }
  std::fflush(out_);
}

}  // namespace flowline::cli
