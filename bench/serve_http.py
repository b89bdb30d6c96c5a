#!/usr/bin/env python3
"""HTTP gateway benchmark: `flowline serve` (and, with --jina, a real Jina 3.34.0 Flow) under wrk and hey.

    python3 bench/serve_http.py [--flowline build/bin/flowline] [--flow FLOW.yml] [--duration 10]
                                [--jina] [--no-flowline] [--json OUT.json]

For each server it measures, on loopback, three loads:
  1doc     wrk, --connections (64) over --threads (2), --duration seconds: POST of 1 short doc per request
  100docs  the same with 100 short docs per request
  rate     hey at a fixed offered rate (--rate, 1,000 req/s: --rate-workers workers of rate/workers
           req/s each) for --duration seconds, 1 doc per request: the latency at a load the server can
           (or cannot) sustain; hey's workers wait for each answer, so a server slower than the rate gets
           fewer requests (achieved rate printed)
and prints requests/s, docs/s, p50 and p99 latency and the errors (non-2xx answers, socket errors), then a
table side by side with the ratio flowline/Jina.

flowline: `FLOWLINE serve FLOW --port P --host 127.0.0.1` on a free loopback port (FLOW defaults to a
one-NoOp flow written to a temp file), ready when GET /ready answers 200. Its route is POST /post with
{"data":[{"text":...}],"parameters":{},"execEndpoint":"/"} (--flowline-route default: POST /default with
Jina's body instead).
Jina (--jina): a Flow with one no-op executor (`@requests def f(self, docs, **kw): return docs`), HTTP,
run by --jina-python (default .venv-clients/bin/python, from scripts/setup-clients.sh); its route is
POST /default with {"data":[{"text":...}],"parameters":{}}; ready when a POST of 1 doc answers 200.

Before each load one request is checked by hand (200, as many docs back as sent). Every process this
script starts gets its own process group, killed (SIGTERM, then SIGKILL after 5 s) on exit, on failure
and on Ctrl-C / SIGTERM; Jina's executor and gateway processes are in its group too.
Needs: wrk and hey (Debian packages wrk, hey). The script itself uses only the standard library.
"""
import argparse
import csv
import io
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOOP_FLOW = """executors:
  - name: noop
    uses: NoOp
"""
JINA_FLOW = """
import sys
from jina import Executor, Flow, requests


class NoOpExecutor(Executor):
    @requests
    def f(self, docs, **kwargs):
        return docs


port = int(sys.argv[1])
with Flow(protocol='http', port=port, host='127.0.0.1').add(uses=NoOpExecutor, name='noop') as flow:
    print('jina flow started on port', port, flush=True)
    flow.block()
"""
WRK_LUA = """
local f = assert(io.open("%(body)s", "rb"))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = f:read("*a")
f:close()

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%%d,"duration_us":%%d,"bytes":%%d,"connect":%%d,"read":%%d,"write":%%d,' ..
    '"status":%%d,"timeout":%%d,"p50_us":%%.1f,"p90_us":%%.1f,"p99_us":%%.1f,"max_us":%%.1f,"mean_us":%%.1f}\\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean))
end
"""
TEXT = "hello"
TEXT100 = "sentence number %d is a short piece of text used for testing"


class BenchError(Exception):
    pass


def log(msg):
    print(f"serve_http: {msg}", flush=True)


def group_procs(pgid):
    """Yields (pid, fields) for every process in group pgid; fields: /proc/PID/stat after the ")" of comm,
    so fields[0] is the state and fields[2] the pgid. Processes that vanish mid-scan are skipped."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
        except (OSError, IndexError, ValueError):
            continue
        yield int(d), fields


class Procs:
    """Every process started here, each the leader of its own process group; kill_all() ends the groups."""

    def __init__(self):
        self.procs = []

    def start(self, cmd, log_path, **kw):
        logf = open(log_path, "wb")
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, **kw)
        p.log_path = log_path
        logf.close()
        self.procs.append(p)
        return p

    def run(self, cmd, timeout):
        """Runs cmd to the end in its own group (killed on timeout); returns (rc, stdout, stderr)."""
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        self.procs.append(p)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(p)
            raise BenchError(f"{cmd[0]} ran past {timeout:.0f} s; killed")
        finally:
            if p in self.procs and p.poll() is not None:
                self.procs.remove(p)
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    @staticmethod
    def _group_alive(pgid):
        return any(fields[0] != "Z" for _, fields in group_procs(pgid))

    def kill(self, p, grace=5.0):
        pgid = p.pid  # start_new_session: the child leads its own group
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            p.poll()
            if not self._group_alive(pgid):
                break
            time.sleep(0.1)
        else:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if p in self.procs:
            self.procs.remove(p)

    def kill_all(self):
        for p in reversed(list(self.procs)):
            self.kill(p)


def group_rss_mib(pgid):
    """Summed resident memory of every process in group pgid, MiB."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for _, fields in group_procs(pgid):
        try:
            total += int(fields[21]) * page
        except (IndexError, ValueError):
            pass
    return total / 2**20


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=10):
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/json"} if body is not None else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_ready(proc, what, probe, timeout):
    """Calls probe() until it returns True; fails when proc exits or after timeout seconds."""
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            tail = pathlib.Path(proc.log_path).read_text(errors="replace")[-2000:]
            raise BenchError(f"{what} exited with {proc.returncode} before it was ready; its output ends:\n{tail}")
        try:
            if probe():
                return time.monotonic() - t0
        except (OSError, urllib.error.URLError) as e:
            last = e
        time.sleep(0.1)
    tail = pathlib.Path(proc.log_path).read_text(errors="replace")[-2000:]
    raise BenchError(f"{what} not ready after {timeout:.0f} s (last error: {last!r}); its output ends:\n{tail}")


def make_body(n, flavour):
    docs = [{"text": TEXT}] if n == 1 else [{"text": TEXT100 % i} for i in range(n)]
    body = {"data": docs, "parameters": {}}
    if flavour == "post":
        body["execEndpoint"] = "/"
    return json.dumps(body, separators=(",", ":")).encode()


def verify(url, body, n, what):
    status, resp = http("POST", url, body, timeout=30)
    if status != 200:
        raise BenchError(f"{what}: POST {url} answered {status}: {resp[:300]!r}")
    try:
        got = len(json.loads(resp)["data"])
    except (ValueError, KeyError, TypeError) as e:
        raise BenchError(f"{what}: POST {url} answered 200 but not Jina's JSON ({e}): {resp[:300]!r}")
    if got != n:
        raise BenchError(f"{what}: POST {url} sent {n} docs, got {got} back")


def run_wrk(procs, tmp, url, body, args):
    body_path = tmp / f"body-{abs(hash(body))}.json"
    body_path.write_bytes(body)
    lua = tmp / "post.lua"
    lua.write_text(WRK_LUA % {"body": str(body_path)})
    cmd = ["wrk", "-t", str(args.threads), "-c", str(args.connections), "-d", f"{args.duration}s",
           "--timeout", "10s", "-s", str(lua), url]
    rc, out, err = procs.run(cmd, timeout=args.duration + 60)
    line = next((l for l in out.splitlines() if l.startswith("WRKJSON ")), None)
    if rc != 0 or line is None:
        raise BenchError(f"wrk failed ({rc}): {err.strip() or out.strip()}")
    w = json.loads(line[len("WRKJSON "):])
    secs = w["duration_us"] / 1e6
    errors = w["connect"] + w["read"] + w["write"] + w["status"] + w["timeout"]
    return {"rps": w["requests"] / secs, "p50_ms": w["p50_us"] / 1e3, "p99_ms": w["p99_us"] / 1e3,
            "requests": w["requests"], "errors": errors, "non2xx": w["status"]}


def run_hey(procs, tmp, url, body, args):
    body_path = tmp / "body-rate.json"
    body_path.write_bytes(body)
    workers = args.rate_workers
    cmd = ["hey", "-z", f"{args.duration}s", "-c", str(workers), "-q", f"{args.rate / workers:g}", "-m", "POST",
           "-T", "application/json", "-D", str(body_path), "-t", "10", "-o", "csv", url]
    rc, out, err = procs.run(cmd, timeout=args.duration + 60)
    if rc != 0:
        raise BenchError(f"hey failed ({rc}): {err.strip()[:500]}")
    rows = list(csv.DictReader(io.StringIO(out)))
    if not rows:
        raise BenchError(f"hey printed no results: {err.strip()[:500]}")
    lat = sorted(float(r["response-time"]) for r in rows)
    codes = [int(r["status-code"] or 0) for r in rows]
    end = max(float(r["offset"]) + float(r["response-time"]) for r in rows)

    def pct(p):
        return lat[min(len(lat) - 1, int(round(p / 100 * (len(lat) - 1))))] * 1e3

    ok = sum(1 for c in codes if 200 <= c < 300)
    return {"rps": len(rows) / end, "p50_ms": pct(50), "p99_ms": pct(99), "requests": len(rows),
            "errors": len(rows) - ok, "non2xx": sum(1 for c in codes if c and not 200 <= c < 300)}


def bench_server(procs, tmp, name, url1, url100, body1, body100, pgid, args):
    results = {}
    verify(url100, body100, 100, name)
    for load, url, body, ndocs, runner in (("1doc", url1, body1, 1, run_wrk),
                                           ("100docs", url100, body100, 100, run_wrk),
                                           ("rate", url1, body1, 1, run_hey)):
        # Let the previous load's backlog drain: one request answered, then a second of quiet.
        verify(url1, body1, 1, name)
        time.sleep(1)
        r = runner(procs, tmp, url, body, args)
        r["docs_per_s"] = r["rps"] * ndocs
        results[load] = r
        log(f"{name:8s} {load:8s} {r['rps']:9.0f} req/s {r['docs_per_s']:10.0f} docs/s  p50 {r['p50_ms']:7.2f} ms"
            f"  p99 {r['p99_ms']:8.2f} ms  errors {r['errors']} of {r['requests']}")
    results["rss_mib"] = group_rss_mib(pgid)
    log(f"{name:8s} resident memory after the loads (whole process group): {results['rss_mib']:.0f} MiB")
    return results


def start_flowline(procs, tmp, args):
    flowline = pathlib.Path(args.flowline)
    if not os.access(flowline, os.X_OK):
        raise BenchError(f"{flowline} is not an executable (build it, or pass --flowline)")
    flow = pathlib.Path(args.flow) if args.flow else tmp / "noop.yml"
    if not args.flow:
        flow.write_text(NOOP_FLOW)
    port = free_port()
    cmd = [str(flowline), "serve", str(flow), "--port", str(port), "--host", "127.0.0.1"] + args.serve_arg
    log(f"starting {' '.join(cmd)}")
    p = procs.start(cmd, tmp / "flowline.log")
    base = f"http://127.0.0.1:{port}"
    secs = wait_ready(p, "flowline serve", lambda: http("GET", base + "/ready", timeout=2)[0] == 200,
                      args.ready_timeout)
    log(f"flowline ready in {secs:.1f} s (GET /ready == 200)")
    return p, base


def start_jina(procs, tmp, args):
    py = pathlib.Path(args.jina_python)
    if not os.access(py, os.X_OK):
        raise BenchError(f"{py} not found: run scripts/setup-clients.sh (or pass --jina-python)")
    script = tmp / "jina_noop_flow.py"
    script.write_text(JINA_FLOW)
    port = free_port()
    env = dict(os.environ, JINA_LOG_LEVEL="ERROR", JINA_OPTOUT_TELEMETRY="1")
    log(f"starting a Jina Flow (one no-op executor, HTTP) with {py} on port {port}")
    p = procs.start([str(py), str(script), str(port)], tmp / "jina.log", env=env)
    base = f"http://127.0.0.1:{port}"
    body = make_body(1, "jina")
    secs = wait_ready(p, "the Jina Flow", lambda: http("POST", base + "/default", body, timeout=5)[0] == 200,
                      args.ready_timeout)
    log(f"Jina ready in {secs:.1f} s (POST /default == 200)")
    return p, base


def print_table(all_results, args):
    names = list(all_results)
    print()
    print(f"HTTP gateway, no-op flow, loopback, {os.cpu_count()} cores; wrk -t{args.threads} -c{args.connections} "
          f"-d{args.duration}s; rate: hey {args.rate_workers} workers at {args.rate:g} req/s in total")
    head = f"{'load':9s}{'figure':12s}" + "".join(f"{n:>14s}" for n in names)
    if len(names) == 2:
        head += f"{names[0] + '/' + names[1]:>18s}"
    print(head)
    print("-" * len(head))
    for load in ("1doc", "100docs", "rate"):
        for key, label, fmt in (("rps", "req/s", "{:14.0f}"), ("docs_per_s", "docs/s", "{:14.0f}"),
                                ("p50_ms", "p50 ms", "{:14.2f}"), ("p99_ms", "p99 ms", "{:14.2f}"),
                                ("errors", "errors", "{:14d}")):
            vals = [all_results[n][load][key] for n in names]
            line = f"{load:9s}{label:12s}" + "".join(fmt.format(v) for v in vals)
            if len(names) == 2 and key != "errors":
                line += f"{(vals[0] / vals[1]) if vals[1] else float('inf'):17.3g}x"
            print(line)
    vals = [all_results[n]["rss_mib"] for n in names]
    line = f"{'memory':9s}{'RSS MiB':12s}" + "".join(f"{v:14.0f}" for v in vals)
    if len(names) == 2 and vals[1]:
        line += f"{vals[0] / vals[1]:17.3g}x"
    print(line)


def default_flowline():
    for rel in ("build/bin/flowline", "build/src/flowline"):
        if os.access(ROOT / rel, os.X_OK):
            return str(ROOT / rel)
    return str(ROOT / "build/bin/flowline")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flowline", default=default_flowline(),
                   help="the flowline binary (default: build/bin/flowline, else build/src/flowline)")
    p.add_argument("--flow", help="flow YAML to serve (default: one NoOp executor)")
    p.add_argument("--serve-arg", action="append", default=[], help="extra argument for `flowline serve` (repeat)")
    p.add_argument("--flowline-route", choices=("post", "default"), default="post",
                   help="post: POST /post with execEndpoint (default); default: POST /default, Jina's body")
    p.add_argument("--no-flowline", action="store_true", help="bench only Jina (with --jina)")
    p.add_argument("--jina", action="store_true", help="also bench a real Jina 3.34.0 Flow")
    p.add_argument("--jina-python", default=str(ROOT / ".venv-clients/bin/python"))
    p.add_argument("--duration", type=int, default=10, help="seconds per load (default 10)")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rate", type=float, default=1000.0, help="offered req/s of the rate load (default 1000)")
    p.add_argument("--rate-workers", type=int, default=32, help="hey workers of the rate load (default 32)")
    p.add_argument("--ready-timeout", type=float, default=120.0)
    p.add_argument("--json", help="write the figures to this JSON file")
    a = p.parse_args()
    if a.no_flowline and not a.jina:
        p.error("--no-flowline leaves nothing to bench without --jina")
    return a


def main():
    args = parse_args()
    for tool in ("wrk", "hey"):
        if not shutil.which(tool):
            raise BenchError(f"{tool} not found (Debian: apt-get install {tool})")
    procs = Procs()

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    all_results = {}
    with tempfile.TemporaryDirectory(prefix="serve_http.") as tmpdir:
        tmp = pathlib.Path(tmpdir)
        try:
            if not args.no_flowline:
                p, base = start_flowline(procs, tmp, args)
                route, flavour = ("/post", "post") if args.flowline_route == "post" else ("/default", "jina")
                all_results["flowline"] = bench_server(procs, tmp, "flowline", base + route, base + route,
                                                       make_body(1, flavour), make_body(100, flavour), p.pid, args)
                procs.kill(p)
            if args.jina:
                p, base = start_jina(procs, tmp, args)
                all_results["jina"] = bench_server(procs, tmp, "jina", base + "/default", base + "/default",
                                                   make_body(1, "jina"), make_body(100, "jina"), p.pid, args)
                procs.kill(p)
        finally:
            procs.kill_all()
    print_table(all_results, args)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"args": vars(args), "results": all_results}, indent=2))
        log(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"serve_http: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as e:
        print(f"serve_http: interrupted ({e}); every process started was killed", file=sys.stderr)
        sys.exit(130)
