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
  in_process     `flowline run` of the same flow over 400,000 of the same sentences (no HTTP)

The server is `flowline serve` of a SentenceEncoder flow on cuda (--dtype) with server-side batching
(max_batch_size --max-batch, --delay-ms) and --replicas (8) replicas, started once and warmed up; http_load's first second is warm-up.
Prints docs/s per load, latency percentiles, each load's docs/s as a share of the in-process figure, and
the mean batch the encoder ran during the load (documents / batches, from /metrics): how well requests of
different clients were merged.
Every process started here is killed on exit.
"""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
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
    device: cuda
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
    ready = tmp / "port.txt"
    log = open(tmp / "serve.log", "w")
    proc = subprocess.Popen([str(pathlib.Path(args.build) / "src/flowline"), "serve", str(flow_path), "--port", "0",
                             "--ready-file", str(ready), "--max-documents", "100000"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"flowline serve exited with {proc.returncode}:\n{(tmp / 'serve.log').read_text()[-3000:]}")
        if ready.exists() and ready.read_text().endswith("\n"):
            return proc, int(ready.read_text())
        time.sleep(0.2)
    raise SystemExit("flowline serve did not become ready within 180 s")


def post(url, body):
    req = urllib.request.Request(url, data=body.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return r.status, r.read()


def batch_totals(base):
    """(documents, batches) the executors have done so far, from GET /metrics."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as r:
        text = r.read().decode()
    docs = batches = 0.0
    for line in text.splitlines():
        if line.startswith("flowline_executor_documents_total{"):
            docs += float(line.rsplit(" ", 1)[1])
        elif line.startswith("flowline_executor_batch_duration_seconds_count{"):
            batches += float(line.rsplit(" ", 1)[1])
    return docs, batches


def load(args, name, url, body, tmp):
    body_file = tmp / f"{name}.json"
    body_file.write_text(body)
    status, answer = post(url, body)  # checked by hand first: 200 and --docs embeddings back
    parsed = json.loads(answer)
    got = len(parsed["data"])
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
    args = p.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="serve_gpu."))
    texts = sentences(args.corpus, 400_000)
    flow_path = tmp / "encode-serve.yml"
    flow_path.write_text(FLOW.format(request_size=args.max_batch, model=pathlib.Path(args.model).resolve(),
                                     dtype=args.dtype, batch=args.max_batch, replicas=args.replicas,
                                     delay=args.delay_ms))
    figures = {"in_process": in_process(args, flow_path, texts, tmp)}
    proc, port = start_server(args, flow_path, tmp)
    try:
        base = f"http://127.0.0.1:{port}"
        batch = texts[:args.docs]
        bodies = {
            "jina_post": (f"{base}/post", json.dumps({"data": [{"text": t} for t in batch], "execEndpoint": "/encode"})),
            "openai_base64": (f"{base}/v1/embeddings", json.dumps({"input": batch, "model": "all-MiniLM-L6-v2",
                                                                   "encoding_format": "base64"})),
            "openai_float": (f"{base}/v1/embeddings", json.dumps({"input": batch, "model": "all-MiniLM-L6-v2"})),
        }
        for name, (url, body) in bodies.items():
            docs0, batches0 = batch_totals(base)
            figures[name] = load(args, name, url, body, tmp)
            docs1, batches1 = batch_totals(base)
            figures[name]["mean_batch"] = (docs1 - docs0) / max(batches1 - batches0, 1)
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
    print(f"\n{args.connections} connections x {args.docs} sentences per request, {args.dtype}, {args.replicas} "
          f"replicas, server batches up to {args.max_batch} (max_delay_ms {args.delay_ms})")
    print(f"{'load':<14} {'docs/s':>10} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7} {'of in-process':>14} "
          f"{'mean batch':>11}")
    print(f"{'in_process':<14} {ref:>10.0f}")
    for name in ("jina_post", "openai_base64", "openai_float"):
        f = figures[name]
        lat = f.get("latency_ms", {})
        print(f"{name:<14} {f['docs_per_s']:>10.0f} {f['requests_per_s']:>9.0f} {lat.get('p50', 0):>8.2f} "
              f"{lat.get('p99', 0):>8.2f} {f['errors']['total']:>7} {f['docs_per_s'] / ref:>13.0%} {f['mean_batch']:>11.0f}")
    (out / "serve_gpu.json").write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
