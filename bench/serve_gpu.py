#!/usr/bin/env python3
"""Serving the encoder over HTTP on one GPU, against the same encoder in process, in one run.

    python3 bench/serve_gpu.py [--build build-gpu] [--model models/all-MiniLM-L6-v2] [--corpus DIR]
                               [--duration 10] [--connections 64] [--docs 32] [--dtype fp16] [--out $OUT]

Short sentences: the corpus' paragraphs cut into sentences of 20 to 120 characters. Each HTTP request
carries --docs (32) of them; the --connections (64) keep-alive connections of bench/http_load each post
theirs in a closed loop (the next as soon as the answer arrived, every answer read whole):

  jina_post      POST /post  {"data": [{"text"}...], "execEndpoint": "/encode"}, JSON embeddings back
  openai_base64  POST /v1/embeddings {"input": [...], "encoding_format": "base64"}
  openai_float   POST /v1/embeddings {"input": [...]} (JSON floats)
  tei_embed      POST /embed {"inputs": [...]} (TEI's: an array of float arrays)
  in_process     `flowline run` of the same flow over --in-process-docs (400,000) of the same sentences (no HTTP)
  grpc           with --grpc: Jina's gRPC (jina.JinaRPC/Call), --connections streams of bench/grpc_load, one
                 request of the same --docs sentences unanswered per stream (as http_load's closed loop);
                 needs a build with the gateway's gRPC front (the GPU machine: prepare-device.sh --grpc)

The server is `flowline serve` of a SentenceEncoder flow on --device (cuda; cpu for this bench's figures on
a machine without a GPU, where --dtype is ignored: fp32) with server-side batching
(max_batch_size --max-batch, --delay-ms) and --replicas (8) replicas, started once and warmed up; http_load's first second is warm-up.
Prints docs/s per load, latency percentiles, each load's docs/s as a share of the in-process figure, and
the mean batch the encoder ran during the load (documents / batches, from /metrics): how well requests of
different clients were merged; and where the CPU went during each load (the machine's busy share, and the
server's cores by thread: I/O threads, replicas, the rest).
Every process started here is killed on exit.
"""
import collections
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from corpus import corpus  # noqa: E402
from gpu_bench import gpu_parser  # noqa: E402

FLOW = """with:
  request_size: {request_size}
  queue_capacity: 512
executors:
  - name: encoder
    uses: SentenceEncoder
    device: {device}
    replicas: {replicas}
    with: {{model: {model}, dtype: {dtype}, batch_size: {batch}}}
    batching: {{max_batch_size: {batch}, max_delay_ms: {delay}}}
"""


def sentences(corpus_dir, n):
    out = []
    for _, _, paragraph in corpus(corpus_dir):
        for s in re.split(r"(?<=[.!?])\s+", " ".join(paragraph.split())):
            if 20 <= len(s) <= 120:
                out.append(s)
    return (out * (n // max(len(out), 1) + 1))[:n]


def start_server(args, flow_path, tmp):
    """The server and its ports: [HTTP] or, with --grpc, [HTTP, gRPC]."""
    ready = tmp / "port.txt"
    log = open(tmp / "serve.log", "w")
    extra = ["--grpc-port", "0"] if args.grpc else []
    if args.io_threads:
        extra += ["--threads", str(args.io_threads)]
    proc = subprocess.Popen([str(pathlib.Path(args.build) / "src/flowline"), "serve", str(flow_path), "--port", "0",
                             *extra, "--ready-file", str(ready), "--max-documents", "100000"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"flowline serve exited with {proc.returncode}:\n{(tmp / 'serve.log').read_text()[-3000:]}")
        if ready.exists():
            ports = [int(x) for x in ready.read_text().split()]
            if len(ports) == (2 if args.grpc else 1):
                return proc, ports
        time.sleep(0.2)
    raise SystemExit("flowline serve did not become ready within 180 s")


def post(url, body):
    req = urllib.request.Request(url, data=body.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, r.read()


def executor_totals(base):
    """What each executor has done so far, from GET /metrics, summed over its replicas: {(executor, name):
    value} with name "documents", "batches", "handler" (seconds in its handlers) and its own *_seconds figures
    (the encoder's tokenize_seconds, the index's search_seconds, ...)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as r:
        text = r.read().decode()
    totals = collections.defaultdict(float)
    names = {"flowline_executor_documents_total{": "documents",
             "flowline_executor_batch_duration_seconds_count{": "batches",
             "flowline_executor_batch_duration_seconds_sum{": "handler"}
    for line in text.splitlines():
        executor = re.search(r'executor="([^"]+)"', line)
        if not executor:
            continue
        name = next((n for prefix, n in names.items() if line.startswith(prefix)), None)
        if name is None and line.startswith("flowline_executor_metric{"):
            m = re.search(r'name="([a-z_]+_seconds)"', line)
            name = m.group(1) if m else None
        if name:
            totals[(executor.group(1), name)] += float(line.rsplit(" ", 1)[1])
    return totals


def batch_totals(base):
    """(documents, batches, figures) the executors have done so far, all together; figures: the replicas'
    seconds in their handlers ("handler") and their own seconds by name (tokenize_seconds, ...)."""
    docs = batches = 0.0
    figures = {"handler": 0.0}
    for (_, name), value in executor_totals(base).items():
        if name == "documents":
            docs += value
        elif name == "batches":
            batches += value
        else:
            figures[name] = figures.get(name, 0.0) + value
    return docs, batches, figures


def server_threads(pid):
    """(task folder, group, the fields of its stat after the name) for each thread of process `pid`. Groups:
    its I/O threads ("io"), its replicas ("EXECUTOR/R") and the rest (flowline names its threads)."""
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        group = "io" if name == "io" else "replicas" if "/" in name else "other"
        yield task, group, stat[stat.rindex(")") + 2:].split()


def cpu_snapshot(pid):
    """The machine's CPU ticks (busy, total) and the server's CPU seconds by thread group."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]
    groups = {"io": 0.0, "replicas": 0.0, "other": 0.0}
    hz = os.sysconf("SC_CLK_TCK")
    for _, group, fields in server_threads(pid):
        groups[group] += (int(fields[11]) + int(fields[12])) / hz  # utime + stime
    return sum(ticks) - idle, sum(ticks), groups


def cpu_use(before, after, seconds):
    """Busy share of the machine, and the server's cores per thread group, between two snapshots."""
    busy = (after[0] - before[0]) / max(after[1] - before[1], 1)
    return {"machine_busy": busy, **{f"server_{k}_cores": (after[2][k] - before[2][k]) / seconds for k in after[2]}}


SYSCALLS = {0: "read", 1: "write", 7: "poll", 20: "writev", 23: "select", 44: "sendto", 45: "recvfrom",
            46: "sendmsg", 47: "recvmsg", 202: "futex", 232: "epoll_wait", 281: "epoll_pwait", 230: "nanosleep",
            35: "nanosleep", 16: "ioctl", 270: "pselect6", 271: "ppoll"}


class ThreadSampler:
    """With --thread-states: what the server's threads are doing, sampled every 10 ms during a load — running
    (R), or asleep in which system call (futex: a lock or condition variable; epoll_wait: waiting for I/O;
    ioctl: the GPU driver) — counted per thread group (io, replicas, other)."""

    def __init__(self, pid):
        self.pid, self.counts, self.stop = pid, collections.Counter(), threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.stop.wait(0.01):
            for task, group, fields in server_threads(self.pid):
                what = "running"
                if fields[0] != "R":
                    try:
                        nr = (task / "syscall").read_text().split()[0]
                    except (OSError, IndexError):
                        continue
                    what = SYSCALLS.get(int(nr), f"syscall {nr}") if nr.lstrip("-").isdigit() else nr
                self.counts[(group, what)] += 1

    def finish(self):
        self.stop.set()
        self.thread.join()
        out = {}
        for (group, what), n in self.counts.items():
            out.setdefault(group, {})[what] = n
        return out


def load(args, name, url, body, tmp):
    body_file = tmp / f"{name}.json"
    body_file.write_text(body)
    status, answer = post(url, body)  # checked by hand first: 200 and --docs embeddings back
    parsed = json.loads(answer)
    got = len(parsed["data"]) if isinstance(parsed, dict) else len(parsed)  # TEI answers a bare array
    if status != 200 or got != args.docs:
        raise SystemExit(f"{name}: {status}, {got} documents back (want {args.docs})")
    out_json = tmp / f"{name}-load.json"
    cmd = [str(pathlib.Path(args.build) / "bench/http_load"), "--url", url, "--body-file", str(body_file),
           "--connections", str(args.connections), "--duration", str(args.duration), "--warmup", "2",
           "--docs-per-request", str(args.docs), "--json", str(out_json)]
    print(f"==> {name}: {' '.join(cmd)}", flush=True)
    run = subprocess.run(cmd, capture_output=True, text=True)
    print(run.stdout + run.stderr, flush=True)
    if not out_json.exists():
        raise SystemExit(f"{name}: http_load wrote no figures (exit {run.returncode})")
    return json.loads(out_json.read_text())


def grpc_load(args, port, batch, tmp):
    texts_file = tmp / "grpc-texts.txt"
    texts_file.write_text("\n".join(batch) + "\n")
    out_json = tmp / "grpc-load.json"
    cmd = [str(pathlib.Path(args.build) / "bench/grpc_load"), "--target", f"127.0.0.1:{port}",
           "--streams", str(args.connections), "--window", "1", "--docs-per-request", str(args.docs),
           "--texts", str(texts_file), "--endpoint", "/encode", "--duration", str(args.duration), "--warmup", "2",
           "--json", str(out_json)]
    print(f"==> grpc: {' '.join(cmd)}", flush=True)
    run = subprocess.run(cmd, capture_output=True, text=True)
    print(run.stdout + run.stderr, flush=True)
    if run.returncode != 0 or not out_json.exists():
        raise SystemExit(f"grpc: grpc_load failed (exit {run.returncode})")
    return json.loads(out_json.read_text())


def in_process(args, flow_path, texts, tmp):
    inp = tmp / "sentences.txt"
    inp.write_text("\n".join(texts) + "\n")
    cmd = [str(pathlib.Path(args.build) / "src/flowline"), "run", str(flow_path), "--input", str(inp),
           "--input-format", "lines", "--progress", "never"]
    print(f"==> in_process: {' '.join(cmd)}", flush=True)
    run = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"(\d+) docs in \d+ steps done in .*?\(([\d.]+) docs/s", run.stderr)
    if run.returncode != 0 or not m:
        raise SystemExit(f"flowline run failed ({run.returncode}):\n{run.stderr[-3000:]}")
    print(run.stderr.strip().splitlines()[-1], flush=True)
    return float(m.group(2))


def main():
    p = gpu_parser()
    p.add_argument("--duration", type=float, default=10)
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--docs", type=int, default=32)
    p.add_argument("--dtype", default="fp16")
    p.add_argument("--max-batch", type=int, default=1024)
    p.add_argument("--replicas", type=int, default=8, help="encoder replicas on the GPU (weights shared)")
    p.add_argument("--delay-ms", type=float, default=1, help="server-side batching: max_delay_ms")
    p.add_argument("--io-threads", type=int, default=0, help="the gateway's I/O threads (0: one per core)")
    p.add_argument("--thread-states", action="store_true",
                   help="sample what the server's threads do during each load (running, or in which system call)")
    p.add_argument("--grpc", action="store_true", help="also load Jina's gRPC route (bench/grpc_load)")
    p.add_argument("--device", default="cuda", help="the encoder's device: cuda, or cpu")
    p.add_argument("--in-process-docs", type=int, default=400_000, help="sentences of the in-process run")
    p.add_argument("--loads", default="jina_post,openai_base64,openai_float,tei_embed",
                   help="the HTTP loads to run, comma-separated")
    args = p.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="serve_gpu."))
    texts = sentences(args.corpus, args.in_process_docs)
    flow_path = tmp / "encode-serve.yml"
    dtype = args.dtype if args.device != "cpu" else "fp32"
    flow_path.write_text(FLOW.format(request_size=args.max_batch, model=pathlib.Path(args.model).resolve(),
                                     dtype=dtype, batch=args.max_batch, replicas=args.replicas, delay=args.delay_ms,
                                     device=args.device))
    figures = {"in_process": in_process(args, flow_path, texts, tmp)}
    proc, ports = start_server(args, flow_path, tmp)
    port = ports[0]
    try:
        base = f"http://127.0.0.1:{port}"
        batch = texts[:args.docs]
        bodies = {
            "jina_post": (f"{base}/post", json.dumps({"data": [{"text": t} for t in batch], "execEndpoint": "/encode"})),
            "openai_base64": (f"{base}/v1/embeddings", json.dumps({"input": batch, "model": "all-MiniLM-L6-v2",
                                                                   "encoding_format": "base64"})),
            "openai_float": (f"{base}/v1/embeddings", json.dumps({"input": batch, "model": "all-MiniLM-L6-v2"})),
            "tei_embed": (f"{base}/embed", json.dumps({"inputs": batch})),
        }
        names = [n for n in args.loads.split(",") if n] + (["grpc"] if args.grpc else [])
        for name in names:
            if name != "grpc" and name not in bodies:
                raise SystemExit(f"--loads: no load '{name}' (expected some of {', '.join(bodies)})")
            docs0, batches0, seconds0 = batch_totals(base)
            cpu0, t0 = cpu_snapshot(proc.pid), time.monotonic()
            sampler = ThreadSampler(proc.pid) if args.thread_states else None
            figures[name] = (grpc_load(args, ports[1], batch, tmp) if name == "grpc"
                             else load(args, name, *bodies[name], tmp))
            figures[name]["cpu"] = cpu_use(cpu0, cpu_snapshot(proc.pid), time.monotonic() - t0)
            if sampler:
                figures[name]["thread_states"] = sampler.finish()
            docs1, batches1, seconds1 = batch_totals(base)
            figures[name]["mean_batch"] = (docs1 - docs0) / max(batches1 - batches0, 1)
            # The replicas' busy share: seconds in their handlers over replicas x the load's wall time.
            wall = time.monotonic() - t0
            figures[name]["replica_seconds"] = {k: seconds1[k] - seconds0.get(k, 0.0) for k in seconds1}
            figures[name]["replica_busy"] = figures[name]["replica_seconds"]["handler"] / (args.replicas * wall)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        print(f"flowline serve exited with {rc} after SIGTERM", flush=True)
        (out / "serve_gpu.log").write_text((tmp / "serve.log").read_text())
    ref = figures["in_process"]
    print(f"\n{args.connections} connections x {args.docs} sentences per request, {args.device} {dtype}, "
          f"{args.replicas} replicas, server batches up to {args.max_batch} (max_delay_ms {args.delay_ms})")
    print(f"{'load':<14} {'docs/s':>10} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} {'of in-process':>14} "
          f"{'mean batch':>11}")
    print(f"{'in_process':<14} {ref:>10.0f}")
    for name, f in figures.items():
        if name == "in_process":
            continue
        if name == "grpc":  # grpc_load's figures: flat quantiles, a count of errors
            p50, p99, errors = f["p50_ms"], f["p99_ms"], f["errors"]
        else:
            lat = f.get("latency_ms", {})
            p50, p99, errors = lat.get("p50", 0), lat.get("p99", 0), f["errors"]["total"]
        print(f"{name:<14} {f['docs_per_s']:>10.0f} {f['requests_per_s']:>9.0f} {p50:>8.2f} {p99:>8.2f} {errors:>7} "
              f"{f['docs_per_s'] / ref:>13.0%} {f['mean_batch']:>11.0f}")
    print("\nCPU during each load (warm-up included; 100% = every core of the machine busy):")
    for name, f in figures.items():
        if name != "in_process":
            c = f["cpu"]
            rs = f["replica_seconds"]
            split = ", ".join(f"{k.removesuffix('_seconds')} {v / max(rs['handler'], 1e-9):.0%}"
                              for k, v in rs.items() if k != "handler" and k != "launch_seconds")
            print(f"{name:<14} machine {c['machine_busy']:>5.0%}  server cores: I/O {c['server_io_cores']:.1f}, "
                  f"replicas {c['server_replicas_cores']:.1f}, other {c['server_other_cores']:.1f}; "
                  f"replicas in their handlers {f['replica_busy']:.0%} of the time ({split})")
        if args.thread_states and name != "in_process":
            for group, states in sorted(f["thread_states"].items()):
                total = sum(states.values())
                top = sorted(states.items(), key=lambda kv: -kv[1])[:5]
                print(f"{'':<14}   {group:<9} " + ", ".join(f"{w} {n / total:.0%}" for w, n in top))
    if "grpc" in figures and "openai_base64" in figures:
        print(f"gRPC / OpenAI base64: {figures['grpc']['docs_per_s'] / figures['openai_base64']['docs_per_s']:.0%}")
    (out / "serve_gpu.json").write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
