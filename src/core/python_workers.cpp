// Python executors' worker processes and their validation (python_workers.hpp).
#include "python_workers.hpp"

#include "flowline/device.hpp"
#include "remote/shared_segment.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#ifndef FLOWLINE_PY_WORKER_SCRIPT
#define FLOWLINE_PY_WORKER_SCRIPT ""
#endif
#ifndef FLOWLINE_DEFAULT_PYTHON
#define FLOWLINE_DEFAULT_PYTHON ""
#endif

namespace flowline::detail {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

fs::path flow_folder(const FlowConfig& config) {
  return config.source.empty() ? fs::current_path() : fs::absolute(config.source).parent_path();
}

std::string interpreter(const FlowConfig& config, const ExecutorConfig& e) {
  if (!e.python.empty()) {
    if (e.python.find('/') == std::string::npos || fs::path(e.python).is_absolute()) return e.python;
    const fs::path beside = flow_folder(config) / e.python;  // relative: to the flow file, else to the cwd
    return fs::exists(beside) ? beside.string() : fs::absolute(e.python).string();
  }
  const std::string built = FLOWLINE_DEFAULT_PYTHON;
  // FLOWLINE_PACKAGE_PYTHON: set by `import flowline` to its own interpreter (the one that has the package).
  return env_or("FLOWLINE_PYTHON",
                env_or("FLOWLINE_PACKAGE_PYTHON", !built.empty() && fs::exists(built) ? built : "python3"));
}

std::string worker_script() { return env_or("FLOWLINE_PY_WORKER", FLOWLINE_PY_WORKER_SCRIPT); }

std::vector<std::string> module_paths(const FlowConfig& config, const ExecutorConfig& e) {
  std::vector<std::string> out;
  for (const auto& m : e.py_modules) {
    if (m.rfind("flowline:", 0) == 0) {  // a shipped Python executor: flowline:onnx_model
      out.push_back((fs::path(worker_script()).parent_path() / (m.substr(9) + ".py")).string());
      continue;
    }
    const fs::path p(m);
    out.push_back((p.is_absolute() ? p : flow_folder(config) / p).lexically_normal().string());
  }
  return out;
}

// A child process with pipes to its stdin and from its stdout (stderr is ours).
struct Child {
  pid_t pid = -1;
  int in = -1;   // we write (the worker watches it close)
  int out = -1;  // we read
};

Child spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int to_child[2], from_child[2];
  if (pipe2(to_child, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  if (pipe2(from_child, O_CLOEXEC) != 0) {
    close(to_child[0]);
    close(to_child[1]);
    throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {  // only async-signal-safe calls until exec
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(to_child[0], 0);
    dup2(from_child[1], 1);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(to_child[0]);
  close(from_child[1]);
  if (pid < 0) {
    close(to_child[1]);
    close(from_child[0]);
    throw Error(fmt::format("fork: {}", std::strerror(errno)));
  }
  return Child{pid, to_child[1], from_child[0]};
}

// Reads the child's stdout until its first line ends, it closes, or the deadline passes.
std::string read_line(int fd, Clock::time_point deadline, bool* complete) {
  std::string line;
  *complete = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return line;
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char c;
    const ssize_t n = read(fd, &c, 1);
    if (n <= 0) return line;
    if (c == '\n') {
      *complete = true;
      return line;
    }
    line.push_back(c);
  }
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

// Runs the worker's --check; returns its JSON line, or an error message.
boost::json::object run_check(const std::vector<std::string>& argv) {
  Child child;
  try {
    child = spawn(argv);
  } catch (const Error& e) {
    return {{"ok", false}, {"error", e.what()}};
  }
  close(child.in);
  bool complete = false;
  const std::string line = read_line(child.out, Clock::now() + std::chrono::seconds(120), &complete);
  close(child.out);
  if (!complete) kill(child.pid, SIGKILL);
  int status = 0;
  waitpid(child.pid, &status, 0);
  if (complete) {
    try {
      return boost::json::parse(line).as_object();
    } catch (const std::exception&) {
    }
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return {{"ok", false}, {"error", fmt::format("cannot run the Python interpreter {}", argv[0])}};
  return {{"ok", false},
          {"error", fmt::format("the check in {} {} without an answer ({})", argv[0], describe_status(status), line)}};
}

std::string file_stamp(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return path + "@missing";
  return fmt::format("{}@{}.{}:{}", path, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_size);
}

}  // namespace

void check_python_executor(const FlowConfig& config, const ExecutorConfig& e, std::vector<Diagnostic>& out) {
  const std::string context = fmt::format("executor '{}': ", e.name);
  const auto where = [&](const char* key) {
    const SourceLocation at = e.location_of(key);
    return at.file.empty() ? e.location_of("") : at;
  };
  // With hosts:, servers run the class (`flowline serve FLOW --executor NAME` starts the workers there; the
  // gateway flow `flowline export` writes keeps py_modules beside hosts): nothing runs or is checked here.
  if (e.is_remote()) return;
  if (e.uses.empty()) {
    out.push_back({where(""), context + "py_modules needs `uses: ClassName`"});
    return;
  }
  if (e.shards > 1) out.push_back({where("shards"), context + "shards is for C++ executor types, not py_modules"});
  const std::string script = worker_script();
  if (script.empty() || !fs::exists(script)) {
    out.push_back({where("py_modules"), context + fmt::format("the Python worker script {} is missing (set "
                                                              "FLOWLINE_PY_WORKER to flowline/pyworker.py)",
                                                              script.empty() ? "(none built in)" : script)});
    return;
  }
  std::vector<std::string> argv{interpreter(config, e), script, "--check", "--uses", e.uses, "--py-modules"};
  std::string key = argv[0] + "|" + e.uses;
  for (const auto& m : module_paths(config, e)) {
    argv.push_back(m);
    key += "|" + file_stamp(m);
  }
  static std::mutex cache_mutex;
  static std::map<std::string, boost::json::object> cache;
  boost::json::object answer;
  {
    std::lock_guard lock(cache_mutex);
    const auto found = cache.find(key);
    if (found != cache.end()) answer = found->second;
  }
  if (answer.empty()) {
    answer = run_check(argv);
    std::lock_guard lock(cache_mutex);
    cache[key] = answer;
  }
  if (answer.contains("ok") && answer.at("ok").is_bool() && answer.at("ok").as_bool()) return;
  std::string message = answer.contains("error") && answer.at("error").is_string()
                            ? std::string(answer.at("error").as_string())
                            : "the Python check failed";
  if (answer.contains("file") && answer.at("file").is_string() && !answer.at("file").as_string().empty()) {
    const std::int64_t line =
        answer.contains("line") && answer.at("line").is_int64() ? answer.at("line").as_int64() : 0;
    message = fmt::format("{}{}: {}", std::string(answer.at("file").as_string()),
                          line > 0 ? fmt::format(":{}", line) : std::string(), message);
  }
  // A class not found is the `uses:` line's problem; a file that does not load, the `py_modules:` line's.
  const bool class_missing = message.find("class '") != std::string::npos;
  out.push_back({where(class_missing ? "uses" : "py_modules"), context + "uses: " + e.uses + ": " + message});
}

// ---- running ------------------------------------------------------------------------------------------

struct PythonWorkers::Impl {
  struct Worker {
    std::string executor;
    int replica = 0;
    std::vector<std::string> argv;  // without --port
    int port = 0;
    int at_once = 1;  // requests the worker runs at once (its class's concurrent_requests), from its serving line
    Child child;
    Clock::time_point retry_at{};
  };
  std::vector<Worker> workers;
  std::vector<std::string> addresses;  // registered for shared memory (remote::offer_shared_memory)
  std::thread supervisor;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  bool started = false;
  std::string start_error;

  // Starts `w` (its port: the one it had, or a free one the first time) and reads its `serving` line.
  std::string start(Worker& w) {
    std::vector<std::string> argv = w.argv;
    argv.push_back("--port");
    argv.push_back(std::to_string(w.port));
    try {
      w.child = spawn(argv);
    } catch (const Error& e) {
      return e.what();
    }
    return {};
  }

  std::string await_listening(Worker& w) {
    bool complete = false;
    const std::string line = read_line(w.child.out, Clock::now() + std::chrono::seconds(120), &complete);
    close(w.child.out);
    w.child.out = -1;
    const auto colon = line.rfind(':');
    if (complete && line.rfind("serving ", 0) == 0 && colon != std::string::npos) {
      // "serving NAME on 127.0.0.1:PORT, N at once" (a worker of before N: one at a time)
      w.port = std::atoi(line.c_str() + colon + 1);
      const auto comma = line.find(", ", colon);
      w.at_once = comma == std::string::npos ? 1 : std::clamp(std::atoi(line.c_str() + comma + 2), 1, 64);
      if (w.port > 0) return {};
    }
    kill(w.child.pid, SIGKILL);
    int status = 0;
    waitpid(w.child.pid, &status, 0);
    close(w.child.in);
    w.child = Child{};
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return fmt::format("cannot run {}", w.argv[0]);
    if (complete && line.rfind("failed ", 0) == 0) return line.substr(7);
    return fmt::format("the Python worker {} before it listened (its error is above, on stderr)",
                       complete ? "printed '" + line + "'" : describe_status(status));
  }

  void run() {
    for (auto& w : workers) {
      if (start_error.empty()) start_error = start(w);
    }
    for (auto& w : workers) {
      if (w.child.pid <= 0) continue;
      const std::string error = await_listening(w);
      if (!error.empty() && start_error.empty())
        start_error = fmt::format("executor '{}' replica {}: {}", w.executor, w.replica, error);
    }
    {
      std::lock_guard lock(mutex);
      started = true;
    }
    wake.notify_all();
    if (!start_error.empty()) return;
    std::unique_lock lock(mutex);
    while (!wake.wait_for(lock, std::chrono::milliseconds(100), [this] { return stopping; })) {
      lock.unlock();
      for (auto& w : workers) watch(w);
      lock.lock();
    }
  }

  void watch(Worker& w) {
    if (w.child.pid > 0) {
      int status = 0;
      if (waitpid(w.child.pid, &status, WNOHANG) != w.child.pid) return;
      close(w.child.in);
      w.child = Child{};
      spdlog::warn("executor '{}' replica {}: the Python worker {}; restarting it on port {}", w.executor, w.replica,
                   describe_status(status), w.port);
    }
    if (Clock::now() < w.retry_at) return;
    std::string error = start(w);
    if (error.empty()) error = await_listening(w);
    if (error.empty()) return;
    spdlog::error("executor '{}' replica {}: cannot restart the Python worker: {}; trying again in 2 s", w.executor,
                  w.replica, error);
    w.retry_at = Clock::now() + std::chrono::seconds(2);
  }

  void stop() {
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    if (supervisor.joinable()) supervisor.join();
    for (auto& w : workers) {
      if (w.child.in >= 0) close(w.child.in);  // the worker exits when its stdin closes
    }
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    for (auto& w : workers) {
      if (w.child.pid <= 0) continue;
      int status = 0;
      while (waitpid(w.child.pid, &status, WNOHANG) == 0) {
        if (Clock::now() > deadline) {
          kill(w.child.pid, SIGKILL);
          waitpid(w.child.pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
};

PythonWorkers::PythonWorkers(FlowConfig& config) : impl_(std::make_unique<Impl>()) {
  for (const auto& e : config.executors) {
    if (!e.is_python() || e.is_remote()) continue;
    std::vector<std::string> argv{
        interpreter(config, e),         worker_script(), "--watch-stdin", "--uses", e.uses, "--name", e.name, "--with",
        boost::json::serialize(e.with), "--py-modules"};
    for (const auto& m : module_paths(config, e)) argv.push_back(m);
    const int replicas = std::max(e.replicas, 1);
    argv.insert(argv.begin() + 2, {"--replicas", std::to_string(replicas), "--flow-dir", flow_folder(config).string()});
    // Each replica's device as a C++ replica gets it: `devices:` round-robin, "auto" decided (runtime["device"]).
    const std::vector<std::string> devices = replica_devices(e);
    for (int r = 0; r < replicas; ++r) {
      std::vector<std::string> own = argv;
      const std::string& device = devices.empty() ? e.device : devices[static_cast<std::size_t>(r) % devices.size()];
      own.insert(own.begin() + 2, {"--replica", std::to_string(r), "--device", resolve_device(device).str()});
      impl_->workers.push_back({e.name, r, std::move(own), 0, 1, {}, {}});
    }
  }
  impl_->supervisor = std::thread([this] { impl_->run(); });
  {
    std::unique_lock lock(impl_->mutex);
    impl_->wake.wait(lock, [this] { return impl_->started; });
  }
  if (!impl_->start_error.empty()) {
    const std::string error = impl_->start_error;
    impl_->stop();
    throw Error(error);
  }
  std::size_t next = 0;
  const std::size_t from_environment = shared_memory_bytes();
  for (auto& e : config.executors) {
    if (!e.is_python() || e.is_remote()) continue;
    const std::size_t shared = e.shared_memory.value_or(from_environment);
    int at_once = 1;
    for (int r = 0; r < std::max(e.replicas, 1); ++r) {
      at_once = impl_->workers[next].at_once;
      e.hosts.push_back(fmt::format("127.0.0.1:{}", impl_->workers[next++].port));
      // Our own worker on this machine: its connection gets a shared segment for tensors (wire version 4).
      remote::offer_shared_memory(e.hosts.back(), shared);
      impl_->addresses.push_back(e.hosts.back());
    }
    e.remote.requeue_lost = false;  // a request that crashed its worker must not crash the next one
    // As many running as the worker takes at once, and one more waiting in the socket: it never idles.
    e.remote.in_flight = static_cast<std::size_t>(at_once) + 1;
    e.remote.retry_max = std::min(e.remote.retry_max, std::chrono::milliseconds(250));
  }
}

PythonWorkers::~PythonWorkers() {
  impl_->stop();
  for (const auto& address : impl_->addresses) remote::offer_shared_memory(address, 0);
}

namespace {

// "64 MiB" when it is a whole number of a unit, else "N bytes".
std::string show_bytes(std::size_t n) {
  for (const auto& [shift, unit] : {std::pair{30, "GiB"}, {20, "MiB"}, {10, "KiB"}}) {
    if (n != 0 && n % (std::size_t{1} << shift) == 0) return fmt::format("{} {}", n >> shift, unit);
  }
  return fmt::format("{} bytes", n);
}

}  // namespace

SharedMemorySize parse_shared_memory(std::string_view text) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    return s;
  };
  const std::string_view given = trim(text);
  if (given == "off") return {};
  const std::string expected = "expected bytes (67108864), a size with a binary unit (64MiB, 512KiB, 1GiB) or off";
  if (!given.empty() && given.front() == '-') return {0, fmt::format("a size cannot be negative: got '{}'", given)};
  std::size_t digits = 0;
  while (digits < given.size() && given[digits] >= '0' && given[digits] <= '9') ++digits;
  if (digits == 0) return {0, fmt::format("{}, got '{}'", expected, given)};
  const std::string_view unit = trim(given.substr(digits));
  int shift = -1;
  for (const auto& [s, name] : {std::pair{0, ""}, {0, "B"}, {10, "KiB"}, {20, "MiB"}, {30, "GiB"}}) {
    if (unit == name) shift = s;
  }
  if (shift < 0) {
    for (const auto& [decimal, binary] : {std::pair{"K", "KiB"},
                                          {"KB", "KiB"},
                                          {"k", "KiB"},
                                          {"kB", "KiB"},
                                          {"M", "MiB"},
                                          {"MB", "MiB"},
                                          {"G", "GiB"},
                                          {"GB", "GiB"}}) {
      if (unit == decimal)
        return {0, fmt::format("'{}': write the unit as {} ({}{}): sizes here are binary, and {} could mean either",
                               given, binary, given.substr(0, digits), binary, decimal)};
    }
    return {0, fmt::format("{}, got '{}'", expected, given)};
  }
  std::uint64_t n = 0;  // out of range for 64 bits, or once shifted: above the bound anyway
  const bool huge = std::from_chars(given.data(), given.data() + digits, n).ec == std::errc::result_out_of_range ||
                    n > (kMaxSharedMemoryBytes >> shift);
  const std::size_t bytes = huge ? 0 : static_cast<std::size_t>(n) << shift;
  if (huge || bytes > kMaxSharedMemoryBytes)
    return {0, fmt::format("'{}' is more than {} per worker connection: a segment takes memory as tensors fill it, "
                           "in each worker",
                           given, show_bytes(kMaxSharedMemoryBytes))};
  if (bytes != 0 && bytes < kMinSharedMemoryBytes)
    return {0, fmt::format("'{}' ({}) is too small to share a tensor: 0 or off for none, else at least {} (tensors "
                           "under 16 KiB cross in the frames anyway)",
                           given, show_bytes(bytes), show_bytes(kMinSharedMemoryBytes))};
  return {bytes, {}};
}

std::size_t shared_memory_bytes() {
  const char* v = std::getenv("FLOWLINE_SHARED_MEMORY_BYTES");
  if (!v || !*v) return kDefaultSharedMemoryBytes;
  const SharedMemorySize size = parse_shared_memory(v);
  if (!size.problem.empty()) {
    spdlog::warn("FLOWLINE_SHARED_MEMORY_BYTES: {}: using {}", size.problem, show_bytes(kDefaultSharedMemoryBytes));
    return kDefaultSharedMemoryBytes;
  }
  return size.bytes;
}

std::unique_ptr<PythonWorkers> start_python_workers(FlowConfig& config) {
  for (const auto& e : config.executors) {
    if (e.is_python() && !e.is_remote()) return std::make_unique<PythonWorkers>(config);
  }
  return nullptr;
}

}  // namespace flowline::detail
