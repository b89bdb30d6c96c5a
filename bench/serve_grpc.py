#!/usr/bin/env python3
"""gRPC gateway benchmark: `flowline serve --grpc-port` beside a real Jina 3.34.0 gRPC Flow, same NoOp flow,
same run, two loads.

    python3 bench/serve_grpc.py [--flowline build/src/flowline] [--grpc-load build/bench/grpc_load]
                                [--docs 20000] [--rounds 3] [--duration 10] [--no-jina] [--json OUT.json]

Loads, each against each server:
  jina-client  Jina's own Python client, as a user runs it: Client(port=P).post('/', DocList[TextDoc] of
               --docs short texts, request_size=100) in one process (.venv-clients); --rounds runs, the
               median's docs/s. The client's own CPU time per document is measured too (getrusage of its
               process): docs / client CPU seconds is what one client core can drive at most, whatever the
               server.
  grpc_load    build/bench/grpc_load (C++, no Python): --streams streams x --window requests of 100 docs
               for --duration s; docs/s and p50/p99.
Then a table side by side with the ratio flowline/Jina. flowline runs `serve NOOP --port 0 --grpc-port P`
(ready when its ready file holds both ports); Jina runs Flow(protocol='grpc', port=P).add(uses=NoOp) in
.venv-clients (ready when Client.is_flow_ready()). Every process started here is in its own process group,
killed on exit, failure or Ctrl-C (serve_http.Procs).
"""
import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_http import NOOP_FLOW, BenchError, Procs, free_port  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
JINA_FLOW = """
import sys
from jina import Executor, Flow, requests


class NoOpExecutor(Executor):
    @requests
    def f(self, docs, **kwargs):
        return docs


with Flow(protocol='grpc', port=int(sys.argv[1]), host='127.0.0.1').add(uses=NoOpExecutor, name='noop') as f:
    print('jina flow started', flush=True)
    f.block()
"""
JINA_CLIENT = """
import json, os, resource, sys, time
os.environ.setdefault('JINA_LOG_LEVEL', 'ERROR')
os.environ.setdefault('JINA_OPTOUT_TELEMETRY', '1')
from docarray import DocList
from docarray.documents import TextDoc
from jina import Client

port, n, wait = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == 'wait'
client = Client(port=port)
if wait:
    deadline = time.time() + 120
    while not client.is_flow_ready():
        if time.time() > deadline:
            sys.exit('not ready after 120 s')
        time.sleep(0.5)
    print(json.dumps({'ready': True}))
    sys.exit(0)
docs = DocList[TextDoc]([TextDoc(text=f'sentence number {i} is a short piece of text used for testing')
                         for i in range(n)])
cpu0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
out = client.post('/', inputs=docs, request_size=100, return_type=DocList[TextDoc])
wall = time.perf_counter() - t0
cpu1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
ok = len(out) == n and all(a.text == b.text for a, b in zip(docs, out))
print(json.dumps({'docs': n, 'wall_s': wall, 'client_cpu_s': cpu, 'ok': ok}))
"""


def log(msg):
    print(f"serve_grpc: {msg}", flush=True)


def wait_ports(path, count, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"flowline serve ended early; see {proc.log_path}")
        if path.exists():
            lines = path.read_text().split()
            if len(lines) >= count:
                return [int(x) for x in lines[:count]]
        time.sleep(0.1)
    raise BenchError(f"flowline serve wrote no ready file in {timeout} s")


def jina_client(procs, python, port, docs, tmp):
    script = tmp / "jina_client.py"
    script.write_text(JINA_CLIENT)
    rc, out, err = procs.run([python, str(script), str(port), str(docs), "post"], timeout=600)
    if rc != 0:
        raise BenchError(f"the Jina client failed ({rc}): {err[-2000:]}")
    r = json.loads(out.strip().splitlines()[-1])
    if not r["ok"]:
        raise BenchError("the Jina client got other documents back than it sent")
    r["docs_per_s"] = r["docs"] / r["wall_s"]
    r["client_bound_docs_per_s"] = r["docs"] / r["client_cpu_s"]
    return r


def grpc_load(procs, exe, port, args):
    rc, out, err = procs.run([exe, "--target", f"127.0.0.1:{port}", "--streams", str(args.streams), "--window",
                              str(args.window), "--docs-per-request", "100", "--duration", str(args.duration)],
                             timeout=args.duration + 120)
    if err.strip():
        log(err.strip()[-500:])
    return json.loads(out.strip().splitlines()[-1])


def measure(procs, args, port, tmp, name):
    runs = [jina_client(procs, args.jina_python, port, args.docs, tmp) for _ in range(args.rounds)]
    for r in runs:
        log(f"{name}: Jina client {r['docs_per_s']:,.0f} docs/s (client CPU {r['client_cpu_s']:.2f} s for "
            f"{r['docs']:,} docs: at most {r['client_bound_docs_per_s']:,.0f} docs/s from one client core)")
    result = {"jina_client": runs,
              "jina_client_docs_per_s": statistics.median(r["docs_per_s"] for r in runs),
              "client_bound_docs_per_s": statistics.median(r["client_bound_docs_per_s"] for r in runs)}
    if args.grpc_load:
        g = grpc_load(procs, args.grpc_load, port, args)
        log(f"{name}: grpc_load {g['docs_per_s']:,.0f} docs/s, p50 {g['p50_ms']:.1f} ms, p99 {g['p99_ms']:.1f} ms, "
            f"{g['errors']} errors")
        result["grpc_load"] = g
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--flowline", default=str(ROOT / "build/src/flowline"))
    p.add_argument("--grpc-load", default=str(ROOT / "build/bench/grpc_load"))
    p.add_argument("--jina-python", default=str(ROOT / ".venv-clients/bin/python"))
    p.add_argument("--docs", type=int, default=20000, help="documents per Jina-client run (default 20,000)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=10, help="grpc_load seconds (default 10)")
    p.add_argument("--streams", type=int, default=4)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--no-jina", action="store_true", help="flowline only")
    p.add_argument("--json", help="write every figure here")
    args = p.parse_args()
    if args.grpc_load and not os.access(args.grpc_load, os.X_OK):
        log(f"{args.grpc_load} is not built (a build without gRPC?): the C++ load is skipped")
        args.grpc_load = None
    procs = Procs()
    figures = {}
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = pathlib.Path(d)
            flow = tmp / "noop.yml"
            flow.write_text(NOOP_FLOW)
            ready = tmp / "ready"
            server = procs.start([args.flowline, "serve", str(flow), "--port", "0", "--grpc-port", "0",
                                  "--ready-file", str(ready)], tmp / "flowline.log")
            _, port = wait_ports(ready, 2, server)
            log(f"flowline serve: gRPC on {port}")
            figures["flowline"] = measure(procs, args, port, tmp, "flowline")
            procs.kill(server)
            if not args.no_jina:
                port = free_port()
                (tmp / "jina_flow.py").write_text(JINA_FLOW)
                procs.start([args.jina_python, str(tmp / "jina_flow.py"), str(port)], tmp / "jina.log")
                (tmp / "jina_client.py").write_text(JINA_CLIENT)
                rc, _, err = procs.run([args.jina_python, str(tmp / "jina_client.py"), str(port), "0", "wait"], 180)
                if rc != 0:
                    raise BenchError(f"Jina's flow did not get ready: {err[-1000:]}")
                log(f"Jina 3.34 gRPC flow on {port}")
                figures["jina"] = measure(procs, args, port, tmp, "jina")
    except BenchError as e:
        log(f"FAILED: {e}")
        return 1
    finally:
        procs.kill_all()

    print()
    print(f"{'load':<34} {'flowline':>12} {'Jina 3.34':>12} {'ratio':>7}")
    rows = [("Jina client, docs/s (median)", "jina_client_docs_per_s"),
            ("one client core's ceiling, docs/s", "client_bound_docs_per_s")]
    for label, key in rows:
        f = figures["flowline"][key]
        j = figures.get("jina", {}).get(key)
        print(f"{label:<34} {f:>12,.0f} {j if j is None else f'{j:,.0f}':>12} {'' if not j else f'{f / j:.1f}x':>7}")
    if "grpc_load" in figures["flowline"]:
        f = figures["flowline"]["grpc_load"]["docs_per_s"]
        j = figures.get("jina", {}).get("grpc_load", {}).get("docs_per_s")
        label = f"grpc_load {args.streams}x{args.window}, docs/s"
        print(f"{label:<34} {f:>12,.0f} {j if j is None else f'{j:,.0f}':>12} {'' if not j else f'{f / j:.1f}x':>7}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
