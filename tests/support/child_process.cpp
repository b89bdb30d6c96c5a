// Child processes for tests (child_process.hpp).
#include "child_process.hpp"

#include "test_support.hpp"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace flowline::testing {

using namespace std::chrono_literals;

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("wait status {}", status);
}

namespace {

// In the child between fork() and exec(), so async-signal-safe calls only: its own process group, killed
// when the test process dies, stdin from /dev/null, stdout and stderr to the log, signals as a fresh
// process has them.
[[noreturn]] void exec_child(char* const* argv, const char* log, pid_t test_process) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != test_process) ::_exit(127);  // the test process died before prctl
  const int in = ::open("/dev/null", O_RDONLY);
  const int out = ::open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in < 0 || out < 0) ::_exit(127);
  ::dup2(in, STDIN_FILENO);
  ::dup2(out, STDOUT_FILENO);
  ::dup2(out, STDERR_FILENO);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (const int signal : {SIGTERM, SIGINT, SIGPIPE, SIGCHLD, SIGQUIT}) ::sigaction(signal, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execv(argv[0], argv);
  const char message[] = "test: execv failed\n";
  [[maybe_unused]] const auto written = ::write(STDERR_FILENO, message, sizeof message - 1);
  ::_exit(127);
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& args, const std::filesystem::path& log) : log_(log) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string log_path = log.string();
  const pid_t test_process = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error(fmt::format("cannot start {}: fork: {}", args[0], std::strerror(errno)));
  if (pid_ == 0) exec_child(argv.data(), log_path.c_str(), test_process);
  ::setpgid(pid_, pid_);  // as the child does, so that kill(-pid) reaches it whichever runs first
}

ChildProcess::~ChildProcess() { stop(10s); }

bool ChildProcess::running() {
  if (pid_ < 0 || status_) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
  return !status_;
}

int ChildProcess::stop(std::chrono::milliseconds grace) {
  if (pid_ < 0) return -1;
  if (running()) {
    ::kill(-pid_, SIGCONT);  // a stopped process cannot act on SIGTERM
    ::kill(-pid_, SIGTERM);
    if (!wait(grace)) {
      ::kill(-pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
      status_ = status;
      killed_ = true;
    }
  }
  return *status_;
}

void ChildProcess::signal(int signal) {
  if (running()) ::kill(-pid_, signal);
}

std::optional<int> ChildProcess::wait(std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (running() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  if (running()) return std::nullopt;
  return status_;
}

std::string ChildProcess::log() const { return read_text(log_); }
std::string ChildProcess::ended() const { return status_ ? describe_status(*status_) : "still running"; }

bool eventually(std::chrono::milliseconds bound, const std::function<bool()>& f, std::chrono::milliseconds step) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!f()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(step);
  }
  return true;
}

int wait_for_port(ChildProcess& process, const std::filesystem::path& ready_file, std::chrono::milliseconds bound) {
  int port = 0;
  eventually(bound, [&] {
    if (!process.running()) return true;
    const std::string text = std::filesystem::exists(ready_file) ? read_text(ready_file) : std::string();
    if (text.empty() || text.back() != '\n') return false;
    port = std::stoi(text);
    return true;
  });
  return process.running() ? port : 0;
}

std::uint16_t unused_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(address);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), size) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error(fmt::format("bind to a loopback port: {}", std::strerror(errno)));
  return ntohs(address.sin_port);
}

}  // namespace flowline::testing
