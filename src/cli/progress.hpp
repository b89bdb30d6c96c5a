// A one-line progress display for the launcher: documents done, docs/s, requests, elapsed time. On a
// terminal it redraws in place at most ten times a second; elsewhere it prints nothing until finish().
// Used from one thread.
#pragma once

#include "flowline/flow.hpp"

#include <chrono>
#include <cstdio>
#include <string>

namespace flowline::cli {

class ProgressLine {
 public:
  ProgressLine(std::string label, bool interactive, std::FILE* out = stderr);
  // A resumed run: `skipped` documents were in the output already, `left` were still to do (shown on the
  // line and in the summary).
  void set_resumed(std::uint64_t skipped, std::uint64_t left);
  void update(const Progress& progress);
  void finish(const PostSummary& summary);

 private:
  std::string label_;
  bool interactive_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point last_draw_{};
  bool drawn_ = false;
  bool resumed_ = false;
  std::uint64_t skipped_ = 0, left_ = 0;
};

// "1:02:03" or "2:03" or "4.2s".
std::string format_duration(double seconds);

}  // namespace flowline::cli
