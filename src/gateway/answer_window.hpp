// The ordered answer window of a stream, shared by the HTTP front's NDJSON streams (http_stream.hpp) and
// the gRPC front's Call streams (grpc/front.cpp): every item of a stream (a chunk of lines, a request, the
// error that ends it) gets the next number when it is opened; answers come back in any order and are
// written in number order; a stream that ends early is closed at a number, from which on answers are
// dropped (NDJSON puts its error line there).
// Private to flowline::gateway.
//
// Contract: numbers start at 0 and are never reused; put() takes an answer for a number that was opened,
// not yet written and before the end; take_next() hands out the answers in number order, each once; a
// close only moves the end earlier (an earlier end replaces a later one). Not thread-safe: the HTTP front
// uses a window on its connection's strand, the gRPC front under its stream's mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <utility>

namespace flowline::gateway {

template <class Answer>
class AnswerWindow {
 public:
  static constexpr std::uint64_t kOpen = std::numeric_limits<std::uint64_t>::max();

  // The number of the next item of the stream.
  std::uint64_t open() { return next_open_++; }
  std::uint64_t opened() const { return next_open_; }  // items numbered so far

  // Whether an answer for `seq` would still be written (it comes before the end, when there is one).
  bool accepts(std::uint64_t seq) const { return seq < end_; }
  // Holds the answer of item `seq` until its turn; false (and dropped) when the window no longer accepts it.
  bool put(std::uint64_t seq, Answer answer) {
    if (!accepts(seq)) return false;
    answers_.insert_or_assign(seq, std::move(answer));
    return true;
  }

  // The answer whose turn it is, when it came (nullptr: not yet); take_next() removes it and moves on.
  Answer* next() {
    const auto it = answers_.find(next_write_);
    return it == answers_.end() ? nullptr : &it->second;
  }
  std::optional<Answer> take_next() {
    const auto it = answers_.find(next_write_);
    if (it == answers_.end()) return std::nullopt;
    Answer answer = std::move(it->second);
    answers_.erase(it);
    ++next_write_;
    return answer;
  }
  std::uint64_t next_write() const { return next_write_; }  // the number whose answer goes out next

  // Ends the stream at item `end`: the answers before it are still written, then nothing (gRPC: the
  // status follows). Answers held from `end` on are dropped, each handed to `dropped(seq)`. False (nothing
  // changes) when the stream ends at `end` or before already.
  template <class Dropped>
  bool close_at(std::uint64_t end, Dropped&& dropped) {
    if (end >= end_) return false;
    end_ = write_end_ = end;
    for (auto it = answers_.lower_bound(end); it != answers_.end(); it = answers_.erase(it)) dropped(it->first);
    return true;
  }
  bool close_at(std::uint64_t end) {
    return close_at(end, [](std::uint64_t) {});
  }
  // Ends the stream at item `end` as close_at() does, with `last` written in its place (NDJSON: the error
  // line), after the answers before it.
  bool close_with(std::uint64_t end, Answer last) {
    if (!close_at(end)) return false;
    answers_.insert_or_assign(end, std::move(last));
    write_end_ = end + 1;
    return true;
  }
  bool closed() const { return end_ != kOpen; }

  // Every item up to the end (or every item opened, while open) has been written.
  bool all_written() const { return next_write_ >= (closed() ? write_end_ : next_open_); }
  std::size_t held() const { return answers_.size(); }  // answers waiting for their turn
  bool empty() const { return answers_.empty(); }

 private:
  std::map<std::uint64_t, Answer> answers_;
  std::uint64_t next_open_ = 0, next_write_ = 0;
  std::uint64_t end_ = kOpen;        // answers from this number on are not taken
  std::uint64_t write_end_ = kOpen;  // nor written: end_, or one past it when a last answer stands there
};

}  // namespace flowline::gateway
