// InterruptGuard and RunOutput (run_output.hpp): Ctrl-C and SIGTERM handling and the --output writer of
// `flowline run`.
#include "run_output.hpp"

#include "flowline/error.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <unistd.h>

namespace flowline::cli {

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int signal) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, signal)) _exit(128 + g_signal.load());  // the second signal
  g_stop.store(true);
}

constexpr auto kGrace = std::chrono::seconds(10);

}  // namespace

std::string signal_name(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return fmt::format("signal {}", signal);
}

InterruptGuard::InterruptGuard(std::function<std::string()> give_up) : give_up_(std::move(give_up)) {
  g_stop.store(false);
  g_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &old_int_);
  sigaction(SIGTERM, &action, &old_term_);
  watchdog_ = std::thread([this] {
    // A signal handler cannot notify a condition variable: the stop flag is polled, finished() notifies.
    const auto pause = [this] {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(50), [this] { return finished_.load(); });
    };
    while (!finished_.load() && !g_stop.load()) pause();
    const auto deadline = std::chrono::steady_clock::now() + kGrace;
    while (!finished_.load()) {
      if (std::chrono::steady_clock::now() >= deadline) {
        const int signal = g_signal.load();
        fmt::print(stderr, "\ninterrupted by {}: the work in flight did not finish within {} s; {}\n",
                   signal_name(signal), kGrace.count(), give_up_());
        std::_Exit(128 + signal);
      }
      pause();
    }
  });
}

InterruptGuard::~InterruptGuard() {
  finished();
  watchdog_.join();
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

const std::atomic<bool>& InterruptGuard::stop() const noexcept { return g_stop; }
int InterruptGuard::signal() const noexcept { return g_signal.load(); }
void InterruptGuard::finished() noexcept {
  {
    std::lock_guard lock(mutex_);
    finished_.store(true);
  }
  wake_.notify_all();
}

RunOutput::RunOutput(const std::string& path, const WriterOptions& options) {
  if (path == "-") {
    standard_output_ = true;
    writer_ = open_jsonl_stdout_writer(options);
    return;
  }
  format_ = output_format_for(path);
  writer_ = open_writer(path, options);
}

std::string RunOutput::give_up() const {
  if (standard_output_) return "standard output holds whole lines only";
  const std::filesystem::path partial = partial_path_for(writer_->path());
  if (format_ == OutputFormat::Jsonl) return fmt::format("'{}' holds whole lines only", partial.string());
  std::error_code ec;
  for (const auto& p : {writer_->path(), writer_->sidecar_path()}) std::filesystem::remove(partial_path_for(p), ec);
  return fmt::format("'{}' was not written (a binary output is written only when the work in flight ends)",
                     writer_->path().string());
}

std::string RunOutput::left_behind(const std::filesystem::path& partial) const {
  if (partial.empty())
    return fmt::format("nothing was written to '{}' (no document reached it)", writer_->path().string());
  std::string out = fmt::format("'{}'", partial.string());
  if (format_ != OutputFormat::Jsonl)
    out += fmt::format(" and '{}'", partial_path_for(writer_->sidecar_path()).string());
  return out + " (partial: the run did not complete)";
}

std::string RunOutput::left_after_failure() const {
  if (standard_output_) return "standard output holds whole lines only";
  std::error_code ec;
  const std::filesystem::path partial = partial_path_for(writer_->path());
  return left_behind(std::filesystem::exists(partial, ec) ? partial : std::filesystem::path());
}

std::string RunOutput::finish(bool complete) {
  if (standard_output_) {
    // Standard output is never renamed: what was written stays, complete or not.
    writer_->close();
    return fmt::format("wrote {} documents to standard output{}", writer_->stats().documents,
                       complete ? "" : " (partial: the run did not complete)");
  }
  if (complete) {
    writer_->close();
    const WriterStats s = writer_->stats();
    std::string summary =
        fmt::format("wrote {} documents ({:.1f} MB) to '{}'", s.documents, s.bytes / 1e6, writer_->path().string());
    if (format_ != OutputFormat::Jsonl) summary += fmt::format(" and '{}'", writer_->sidecar_path().string());
    return summary;
  }
  const std::filesystem::path partial = writer_->close_partial();
  if (partial.empty()) return left_behind(partial);
  const WriterStats s = writer_->stats();
  return fmt::format("wrote {} documents ({:.1f} MB) to {}", s.documents, s.bytes / 1e6, left_behind(partial));
}

}  // namespace flowline::cli
