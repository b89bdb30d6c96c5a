// The output side of `flowline run`: the --output writer chosen by extension (the library's DocumentWriters,
// writers.hpp; `-` is JSONL on standard output) and the handling of SIGINT / SIGTERM (stop reading input,
// close the output, exit 130 / 143). The output is written as NAME.partial and renamed to NAME only when the
// run ends well; otherwise NAME.partial stays with what was written (nothing when no document was), and the
// summary says so. Used by command_run on the main thread only.
#pragma once

#include "flowline/io.hpp"
#include "flowline/writers.hpp"

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace flowline::cli {

// While alive, SIGINT and SIGTERM set stop() instead of killing the process; a second signal exits at once
// (128 + signal). If the run has not finished (finished() called) 10 s after the first signal, a watchdog
// thread calls `give_up` (which cleans up and says what is left behind), prints that and exits with
// 128 + signal. Only one may exist at a time.
class InterruptGuard {
 public:
  explicit InterruptGuard(std::function<std::string()> give_up);
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // Becomes true at the first signal; hand it to a StoppableSource.
  const std::atomic<bool>& stop() const noexcept;
  // The first signal received (SIGINT, SIGTERM), or 0.
  int signal() const noexcept;
  // The run finished its work in flight: the watchdog stands down.
  void finished() noexcept;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
  std::function<std::string()> give_up_;
  std::atomic<bool> finished_{false};
  std::mutex mutex_;
  std::condition_variable wake_;  // finished() wakes the watchdog at once; a signal is seen within 50 ms
  std::thread watchdog_;
};

// "SIGINT", "SIGTERM".
std::string signal_name(int signal);

// The --output file of `flowline run`: opened before the flow starts, fed from the response callback.
class RunOutput {
 public:
  // Opens the writer for `path` by its extension ("-": JSONL on standard output); throws flowline::Error
  // (an unknown extension names the known ones; a path that cannot be created names the reason).
  // `options.resume_from`: continue NAME.partial from that point (`--resume`, resume.hpp).
  explicit RunOutput(const std::string& path, const WriterOptions& options = {});

  // Hands a response's documents to the writer (formatted on its threads).
  void write(DocumentArray&& docs) { writer_->write(std::move(docs)); }
  // Makes everything handed over durable (DocumentWriter::sync()).
  SyncPoint sync() { return writer_->sync(); }
  // Ends the file: renamed to its name when `complete`, else left as NAME.partial with every delivered
  // document (removed when there is none). Returns a one-line summary of what was written and where.
  // Throws flowline::Error when writing fails; left_after_failure() then says what is on disk.
  std::string finish(bool complete);
  std::string left_after_failure() const;
  // For the watchdog, while another thread may still be writing: removes a binary output's .partial files
  // (their header is not final) and says what is left on disk.
  std::string give_up() const;
  WriterStats stats() const { return writer_->stats(); }
  const std::filesystem::path& path() const { return writer_->path(); }
  bool to_standard_output() const noexcept { return standard_output_; }

 private:
  // "'out.jsonl.partial' (incomplete: ...)" or "nothing (no document reached 'out.jsonl')".
  std::string left_behind(const std::filesystem::path& partial) const;

  std::unique_ptr<DocumentWriter> writer_;
  OutputFormat format_ = OutputFormat::Jsonl;
  bool standard_output_ = false;
};

}  // namespace flowline::cli
