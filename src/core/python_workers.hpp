// Python executors of a flow (`uses: Class` with `py_modules:`, issue 53 §2): checking them at validation
// and running each replica in a worker process. Private to flowline::core (flow.cpp and flow_validate.cpp).
//
// The worker is python/flowline/pyworker.py, run as a script by the executor's interpreter (`python:`, else
// FLOWLINE_PYTHON, else FLOWLINE_PACKAGE_PYTHON — set by `import flowline` to its interpreter — else the
// Python the build used when it exists, else python3); FLOWLINE_PY_WORKER names
// another copy of the script (an installed package's). It serves the class over flowline's wire protocol
// on a loopback port, so the flow reaches each worker as a `hosts:` entry (RemoteGroup) and batching,
// replicas, the progress bar and per-executor stats work unchanged. Each worker's address is registered with
// remote::offer_shared_memory while PythonWorkers lives, so its connection (wire version 4) gets a memfd
// segment for tensors (remote/shared_segment.hpp); a restarted worker keeps its port and gets a new segment.
//
// An executor with both py_modules and hosts (the gateway flow `flowline export` writes) runs on its hosts:
// `flowline serve FLOW --executor NAME` there starts the workers; this flow starts none for it.
//
// Processes and threads. PythonWorkers owns the processes and one supervisor thread, which starts them
// (and so is their parent thread for PR_SET_PDEATHSIG: a flow killed with SIGKILL takes its workers with
// it), checks them every 100 ms, and restarts one that exits or crashes on the port it had; the requests
// it had in flight fail (remote.requeue_lost = false) and later ones reach the new process. Each worker
// also exits when its stdin, a pipe the supervisor holds, closes. Destroying PythonWorkers closes those
// pipes, waits up to 5 s for the processes and kills what is left.
#pragma once

#include "flowline/error.hpp"
#include "flowline/flow_config.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flowline::detail {

// Validation (any thread): runs the worker script with --check in the executor's interpreter and reports
// a missing file or module, a class not found, a syntax error (the Python file's file:line after the
// YAML's), or jina missing where the file imports it. Results are cached per process for unchanged files.
void check_python_executor(const FlowConfig& config, const ExecutorConfig& executor, std::vector<Diagnostic>& out);

class PythonWorkers {
 public:
  // Starts one worker per replica of every Python executor of the validated `config`, waits until each
  // listens, and sets the executor's `hosts` (and remote options) to them. Throws Error naming the
  // executor when a worker cannot start (its stderr, the Python traceback, went to this process's stderr).
  explicit PythonWorkers(FlowConfig& config);
  ~PythonWorkers();
  PythonWorkers(const PythonWorkers&) = delete;
  PythonWorkers& operator=(const PythonWorkers&) = delete;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Shared memory (wire version 4, docs/python.md "What crosses without a copy"): each worker's connection gets
// a memfd segment for its tensors of the executor's `shared_memory:` bytes (ExecutorConfig::shared_memory),
// else shared_memory_bytes(): FLOWLINE_SHARED_MEMORY_BYTES when set, else kDefaultSharedMemoryBytes. 0: none
// (tensors cross in the frames). The environment is read when the workers start.
inline constexpr std::size_t kDefaultSharedMemoryBytes = 64u << 20;
std::size_t shared_memory_bytes();

// A segment's size, as `shared_memory:` and FLOWLINE_SHARED_MEMORY_BYTES write it: a whole number of bytes,
// optionally with a binary unit (B, KiB, MiB, GiB: `64MiB`, `512 KiB`), or `off` (0). Anything but 0 must lie
// in [kMinSharedMemoryBytes, kMaxSharedMemoryBytes]: a smaller segment holds no tensor worth sharing (those
// under 16 KiB cross in the frames anyway), a larger one is a typo more likely than a plan (its pages take
// memory as tensors fill them, per worker). `problem` says what is wrong, empty when `bytes` holds the size.
inline constexpr std::size_t kMinSharedMemoryBytes = std::size_t{64} << 10;
inline constexpr std::size_t kMaxSharedMemoryBytes = std::size_t{16} << 30;
struct SharedMemorySize {
  std::size_t bytes = 0;
  std::string problem;
};
SharedMemorySize parse_shared_memory(std::string_view text);

// PythonWorkers for `config` when it has a Python executor, else null.
std::unique_ptr<PythonWorkers> start_python_workers(FlowConfig& config);

}  // namespace flowline::detail
