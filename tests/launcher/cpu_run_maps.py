"""Runs `flowline run FLOW` with its input on a FIFO and reports what the process has mapped once the flow
has started (every replica constructed and warmed up) and the launcher waits for its first line.

    cpu_run_maps.py LAUNCHER FLOW SCRATCH_DIR

Prints one JSON object: {"exit_code": N, "gpu_libraries": [...], "flowline_libraries": [...], "mapped": N,
"stderr": "..."}. The moment
is found, not guessed: a thread of the launcher is in read() on the FIFO (/proc/PID/task/*/syscall). Every
wait is bounded (120 s); the launcher is killed on the way out if it is still running.
"""
import json
import os
import re
import subprocess
import sys
import time

GPU_LIBRARIES = re.compile(
    r"/(libtorch_cuda[^/]*|libc10_cuda[^/]*|libcu[^/]*|libnccl[^/]*|libnvidia-ml[^/]*|libnvrtc[^/]*|libnvshmem[^/]*)$")
DEADLINE = 120


def fifo_fd(pid, fifo):
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == fifo:
                return int(fd)
        except OSError:
            pass
    return None


def reading_fifo(pid, fifo):
    fd = fifo_fd(pid, fifo)
    if fd is None:
        return False
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            fields = open(f"/proc/{pid}/task/{task}/syscall").read().split()
        except OSError:
            continue
        # read(2) is syscall 0 on x86-64; its first argument is the descriptor.
        if len(fields) > 1 and fields[0] == "0" and int(fields[1], 16) == fd:
            return True
    return False


def run_and_read_maps(launcher, flow, scratch):
    """The report described above, as a dict (bench/footprint.py uses it too)."""
    fifo = os.path.join(scratch, "input.fifo")
    os.mkfifo(fifo)
    err_path = os.path.join(scratch, "stderr.txt")
    with open(err_path, "w") as err:
        proc = subprocess.Popen([launcher, "run", flow, "--input", fifo, "--input-format", "lines", "--progress",
                                 "never", "--output", os.path.join(scratch, "out.jsonl")],
                                stdout=subprocess.DEVNULL, stderr=err)
    maps = ""
    try:
        feed = os.open(fifo, os.O_WRONLY)  # returns once the launcher opened its end
        start = time.monotonic()
        while not reading_fifo(proc.pid, fifo):
            if proc.poll() is not None or time.monotonic() - start > DEADLINE:
                break
            time.sleep(0.05)
        if proc.poll() is None:
            maps = open(f"/proc/{proc.pid}/maps").read()
        os.write(feed, b"one line of text\n")
        os.close(feed)
        proc.wait(timeout=DEADLINE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    libraries = sorted({m.group(1) for line in maps.splitlines() if (m := GPU_LIBRARIES.search(line.strip()))})
    ours = sorted({m.group(1) for line in maps.splitlines() if (m := re.search(r"/(libflowline[^/]*)$", line.strip()))})
    return {"exit_code": proc.returncode, "gpu_libraries": libraries, "flowline_libraries": ours,
            "mapped": len(maps.splitlines()), "stderr": open(err_path).read()[-2000:]}


def main():
    print(json.dumps(run_and_read_maps(*sys.argv[1:4])))


if __name__ == "__main__":
    main()
