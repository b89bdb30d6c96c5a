// Child processes for tests that run the launcher (or a peer) as a real process: started in their own
// process group, output to a log file, stopped on destruction so that a failed REQUIRE never leaves one
// running; and `eventually`, polling with a bound.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace flowline::testing {

// "exit code 3", "killed by signal 9 (Killed)".
std::string describe_status(int status);

// A program run in its own process group (killed with the test process too, a crash or ctest's timeout
// included), stdin from /dev/null, stdout and stderr to `log`. The destructor stops it (SIGTERM to the
// group, SIGKILL after a bound).
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& args, const std::filesystem::path& log);
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  bool running();
  // SIGTERM to the process group, then SIGKILL when it has not ended within `grace`. Returns the wait status.
  int stop(std::chrono::milliseconds grace);
  // Sends `signal` to the process group (SIGKILL, SIGSTOP, SIGCONT...) without waiting.
  void signal(int signal);
  // Waits up to `bound` for the process to end; its wait status, or nothing when it still runs.
  std::optional<int> wait(std::chrono::milliseconds bound);
  pid_t pid() const { return pid_; }
  bool was_killed() const { return killed_; }
  std::string log() const;
  std::string ended() const;

 private:
  std::filesystem::path log_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  bool killed_ = false;
};

// Calls f every 100 ms (or `step`) until it returns true or `bound` has passed; returns its last answer.
bool eventually(std::chrono::milliseconds bound, const std::function<bool()>& f,
                std::chrono::milliseconds step = std::chrono::milliseconds(100));

// Waits (up to `bound`) for `ready_file` to hold a port followed by a newline, as `flowline serve
// --ready-file` writes it; returns it, or 0 when the process ended or the bound passed.
int wait_for_port(ChildProcess& process, const std::filesystem::path& ready_file, std::chrono::milliseconds bound);

// A loopback port nobody listens on: bound, read back and closed (another process could take it meanwhile,
// as with any such port; tests use it for a server that is not there yet).
std::uint16_t unused_loopback_port();

}  // namespace flowline::testing
