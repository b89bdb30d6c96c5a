#!/usr/bin/env python3
"""Search served on one GPU (issue 30's target: >= 20,000 queries/s end to end, p99 stated, with 64 clients
each posting one query text), one command on the GPU machine after scripts/gpu-run.sh.

1. `flowline run flows/index.yml` indexes the corpus' paragraphs (encoder and exact index on the GPU) into a
   workspace in a temporary folder.
2. `flowline serve` of a search flow (flows/search.yml's shape: SentenceEncoder in --dtype with --replicas
   replicas and queries batched across clients, then the VectorIndex on the same workspace, exact, fp16 on
   the GPU, batched up to --index-batch queries) answers POST /search {"data": [{"text"}], "parameters":
   {"limit": 10}}; bench/http_load's --connections keep-alive connections post it in a closed loop.
Prints queries/s and latency percentiles, and the answer's first match, and writes search_gpu.json to --out.

  python3 bench/search_gpu.py --build build-gpu --model models/all-MiniLM-L6-v2 --corpus .device/corpus --out $OUT

Also prints where the time went during the load: each executor's handler time per batch with its own figures
(the index's gather/search/matches seconds), and the server's CPU by thread group (I/O threads, replicas).
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from gpu_bench import gpu_parser  # noqa: E402
from serve_gpu import cpu_snapshot, cpu_use, executor_totals, post, start_server  # noqa: E402

FLOW = """with:
  queue_capacity: {queue_capacity}
executors:
  - name: encoder
    uses: SentenceEncoder
    device: cuda
    replicas: {replicas}
    with: {{model: {model}, dtype: {dtype}}}
    batching: {{max_batch_size: 256{delay}}}
  - name: index
    uses: VectorIndex
    device: cuda
    replicas: {index_replicas}
    with: {{workspace: {workspace}, limit: 10}}
    batching: {{max_batch_size: {index_batch}{index_delay}}}
"""


def main():
    parser = gpu_parser()
    parser.add_argument("--connections", type=lambda v: [int(x) for x in v.split(",")], default=[64],
                        help="clients of the closed loop; a comma-separated list runs one load after another "
                             "against the same server (1,64,256)")
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--delay-ms", default="0",
                        help="the encoder's max_delay_ms; auto: not given (the batcher waits only under load)")
    parser.add_argument("--queue-capacity", type=int, default=1024,
                        help="the flow's queue_capacity, and so the gateway's requests in flight (more: 503)")
    parser.add_argument("--index-batch", type=int, default=1024)
    parser.add_argument("--io-threads", type=int, default=0, help="the gateway's I/O threads (0: one per core)")
    parser.add_argument("--index-delay-ms", default=None, help="the index's max_delay_ms, or auto (default: --delay-ms)")
    parser.add_argument("--index-replicas", type=int, default=1, help="the index's replicas (copies of one store)")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    flowline = str(pathlib.Path(args.build) / "src/flowline")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        workspace = tmp / "workspace"
        env = dict(os.environ, FLOWLINE_MODEL_DIR=str(pathlib.Path(args.model).parent))
        run = subprocess.run([flowline, "run", str(ROOT / "flows/index.yml"), "--input", args.corpus, "--input-format",
                              "paragraphs", "--progress", "never", "--set", f"index.workspace={workspace}"],
                             capture_output=True, text=True, env=env)
        print(run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "", flush=True)
        if run.returncode != 0:
            raise SystemExit(f"flowline run flows/index.yml failed ({run.returncode}):\n{run.stderr[-3000:]}")
        flow = tmp / "search.yml"
        def delay(value):
            return "" if value == "auto" else f", max_delay_ms: {float(value)}"

        flow.write_text(FLOW.format(replicas=args.replicas, model=args.model, dtype=args.dtype, delay=delay(args.delay_ms),
                                    workspace=workspace, index_batch=args.index_batch,
                                    index_replicas=args.index_replicas, queue_capacity=args.queue_capacity,
                                    index_delay=delay(args.delay_ms if args.index_delay_ms is None else args.index_delay_ms)))
        args.grpc = False  # start_server serves HTTP only then
        proc, (port,) = start_server(args, flow, tmp)
        try:
            url = f"http://127.0.0.1:{port}/search"
            body = json.dumps({"data": [{"text": "a whale hunt"}], "parameters": {"limit": 10}})
            raw = post(url, body)[1]
            answer = json.loads(raw)
            print(f"one answer: {len(raw)} bytes, the query's embedding "
                  f"{'in it' if answer['data'][0].get('embedding') else 'left out'}", flush=True)
            matches = answer["data"][0]["matches"]
            if len(matches) != 10:
                raise SystemExit(f"/search answered {len(matches)} matches, want 10")
            print(f"best match: {matches[0]['scores']} {matches[0]['text'][:80]!r}", flush=True)
            body_file = tmp / "body.json"
            body_file.write_text(body)
            results = [load_run(args, proc, port, url, body_file, tmp, connections)
                       for connections in args.connections]
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    (out / "search_gpu.json").write_text(json.dumps(results if len(results) > 1 else results[0], indent=1))
    for figures in results:
        lat = figures.get("latency_ms", {})
        print(f"search served, {figures['connections']} clients: {figures['requests_per_s']:.0f} queries/s, "
              f"p50 {lat.get('p50', 0):.2f} ms, p99 {lat.get('p99', 0):.2f} ms, "
              f"errors {figures.get('errors', {}).get('total', 0)}")


def load_run(args, proc, port, url, body_file, tmp, connections):
    """One closed loop of `connections` clients against the running server: http_load's figures, with where
    the time went during it."""
    out_json = tmp / f"load-{connections}.json"
    duration = args.duration if connections > 1 else min(args.duration, 5)
    cmd = [str(pathlib.Path(args.build) / "bench/http_load"), "--url", url, "--body-file", str(body_file),
           "--connections", str(connections), "--duration", str(duration), "--warmup", "2",
           "--json", str(out_json)]
    print(f"==> {' '.join(cmd)}", flush=True)
    base = f"http://127.0.0.1:{port}"
    seconds_before, cpu_before, started = executor_totals(base), cpu_snapshot(proc.pid), time.monotonic()
    load = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - started
    cpu, seconds_after = cpu_use(cpu_before, cpu_snapshot(proc.pid), wall), executor_totals(base)
    print(load.stdout + load.stderr, flush=True)
    if not out_json.exists():
        raise SystemExit(f"http_load wrote no figures (exit {load.returncode})")
    figures = json.loads(out_json.read_text())
    figures["connections"] = connections
    # Where the time went over the load (warm-up included): each executor's handler seconds per batch and its
    # own figures, and the server's CPU by thread group.
    spent = {f"{e} {k}": seconds_after[(e, k)] - seconds_before.get((e, k), 0.0) for e, k in seconds_after
             if k != "documents"}
    figures["executor_seconds"] = spent
    figures["cpu"] = cpu
    for executor in sorted({e for e, _ in seconds_after}):
        batches = spent.get(f"{executor} batches", 0.0)
        parts = ", ".join(f"{k.split(' ', 1)[1]} {v / max(batches, 1) * 1e3:.2f} ms"
                          for k, v in sorted(spent.items())
                          if k.startswith(executor + " ") and not k.endswith(" batches"))
        print(f"  {executor}: {batches:.0f} batches; per batch {parts}", flush=True)
    print("  cpu: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items()), flush=True)
    return figures


if __name__ == "__main__":
    main()
