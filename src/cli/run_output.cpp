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

RunOutput::RunOutput(const std::string& path) : format_(output_format_for(path)) { writer_ = open_writer(path); }

std::string RunOutput::give_up() const {
  const std::filesystem::path& path = writer_->path();
  if (format_ == OutputFormat::Jsonl) return fmt::format("'{}' holds whole lines only", path.string());
  std::error_code ec;
  for (const auto& p : {path, writer_->sidecar_path()}) std::filesystem::remove(p.string() + ".partial", ec);
  return fmt::format("'{}' was not written (a binary output is written only when the run completes)", path.string());
}

std::string RunOutput::finish(bool interrupted) {
  const std::string path = writer_->path().string();
  if (interrupted && format_ != OutputFormat::Jsonl) {
    const std::uint64_t documents = writer_->stats().documents;
    writer_->abandon();
    return fmt::format(
        "'{}' was not written ({} documents received; a binary output is written only when the run "
        "completes)",
        path, documents);
  }
  writer_->close();
  const WriterStats s = writer_->stats();
  std::string summary = fmt::format("wrote {} documents ({:.1f} MB) to '{}'", s.documents, s.bytes / 1e6, path);
  if (format_ != OutputFormat::Jsonl) summary += fmt::format(" and '{}'", writer_->sidecar_path().string());
  if (interrupted) summary += ", whole lines only";
  return summary;
}

}  // namespace flowline::cli
