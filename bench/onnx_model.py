#!/usr/bin/env python3
"""OnnxModel served to many clients against ONNX Runtime's own throughput (issue 53 §4), same model, same run.

    PYTHONPATH=build/python .venv/bin/python bench/onnx_model.py --model /tmp/minilm.onnx [--clients 64]
        [--seconds 10] [--seq 64] [--batch-sizes 1,8,16,32,64,128] [--device cpu|cuda] [--tf32]
        [--serve build/src/flowline --http-load build/bench/http_load] [--replicas 1[,2]]
        [--docs-per-request 1[,32]] [--concurrency 0[,1,2]] [--threads 0] [--delay-ms 5] [--id-range 1000,20000]

The model: a MiniLM exported with torch.onnx (`.venv-ref/bin/python scripts/export_tiny_onnx.py /tmp/minilm.onnx
models/all-MiniLM-L6-v2`: input_ids and attention_mask in, mean-pooled [batch, 384] out). Inputs: random
token ids of --seq tokens (one shape, so every batch stacks whole).

  ort     onnxruntime in this process at each batch size, for --seconds each: docs/s; the best is the
          reference. On --device cuda (onnxruntime-gpu's CUDA execution provider) two ways are timed, and the
          best of both counts: `run` (numpy in, numpy out: what most code does) and `iobinding` (the inputs
          copied to the GPU as OrtValues, the output bound there and copied back once: what OnnxModel does)
  flow    a flow of one OnnxModel (--replicas worker processes; flowline's batcher, max_batch_size the best
          batch size or what the clients keep in flight if fewer, max_delay_ms --delay-ms) and --clients
          clients posting --docs-per-request documents (1) a request for --seconds. Without --serve the
          clients are Python threads calling `flowline.Flow.post` in this process (the package must be
          importable); with --serve LAUNCHER the flow is served by `LAUNCHER serve` on a free loopback port
          and the clients are bench/http_load's --clients keep-alive connections posting Jina's /post body
          (the workers' Python: --python, default this one). --replicas, --docs-per-request and
          --concurrency (OnnxModel's requests at once in a worker; 0: its default) take lists: one flow run
          each, against one reference
Both use ONNX Runtime's default threads (all cores; --threads sets OnnxModel's). Prints docs/s and flow / best ort, the best batch size
measured again after the flow (the reference is the mean of both: the machine may be shared).
"""
import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from serve_gpu import executor_totals, post, start_server  # noqa: E402

ID_RANGE = (1000, 20000)  # token ids drawn from [low, high): --id-range
TF32 = False  # --tf32: the CUDA provider's TF32, for onnxruntime and OnnxModel alike


def session_for(model, device):
    if device == "cpu":
        return ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise SystemExit(f"--device cuda: this onnxruntime ({ort.__file__}) has no CUDA execution provider "
                         "(pip install onnxruntime-gpu)")
    options = {"device_id": 0, "use_tf32": "1" if TF32 else "0"}  # as OnnxModel's `tf32` (off by default)
    session = ort.InferenceSession(model, providers=[("CUDAExecutionProvider", options), "CPUExecutionProvider"])
    if session.get_providers()[0] != "CUDAExecutionProvider":
        raise SystemExit(f"--device cuda: the session runs on {session.get_providers()}")
    return session


def ort_rate(model, batch, seq, seconds, device="cpu", mode="run"):
    session = session_for(model, device)
    ids = np.random.default_rng(0).integers(*ID_RANGE, size=(batch, seq)).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}

    def once():
        if mode == "run":
            return session.run(None, feeds)[0]
        binding = session.io_binding()
        for name, array in feeds.items():
            binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(array, "cuda", 0))
        binding.bind_output(session.get_outputs()[0].name, "cuda", 0)
        session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]

    assert once().shape[0] == batch  # warm-up
    once()
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        once()
        done += batch
    return done / (time.perf_counter() - started)


def flow_spec(o, model, batch):
    return {"executors": [{
        "name": "onnx", "uses": "OnnxModel", "py_modules": ["flowline:onnx_model"], "replicas": o.replicas_now,
        "batching": {"max_batch_size": batch, "max_delay_ms": o.delay_ms},
        "with": {"model": model, "device": o.device, "batch_size": batch, "tf32": o.tf32, "threads": o.threads,
                 "concurrency": o.concurrency_now}}]}


def flow_rate(o, model, batch):
    """In this process: Flow.load and --clients Python threads. (docs/s, mean batch)"""
    import flowline

    folder = pathlib.Path(tempfile.mkdtemp(prefix="onnx-bench-"))
    flow_file = folder / "flow.yml"
    flow_file.write_text(json.dumps(flow_spec(o, model, batch)))
    rng = np.random.default_rng(1)
    with flowline.Flow.load(flow_file) as flow:
        flow.post("/", [flowline.Document("w", tensor=rng.integers(*ID_RANGE, size=o.seq).astype(np.int64))])
        counts = [0] * o.clients
        stop = time.perf_counter() + o.seconds

        def client(k):
            docs = [flowline.Document(f"c{k}.{i}", tensor=rng.integers(*ID_RANGE, size=o.seq).astype(np.int64))
                    for i in range(o.per_request_now)]
            while time.perf_counter() < stop:
                out = flow.post("/", docs)
                assert len(out) == len(docs) and list(out[0].embedding.shape) == o.width
                counts[k] += len(docs)

        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(o.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        batches = [e for e in flow.stats()["executors"] if e["executor"] == "onnx"][0]["batches"]
    return sum(counts) / elapsed, sum(counts) / max(batches, 1)


def served_rate(o, model, batch):
    """`flowline serve` (serve_gpu.start_server) and bench/http_load's --clients connections. (docs/s, mean
    batch, p50 ms, p99 ms)"""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="onnx-serve-"))
    spec = flow_spec(o, model, batch)
    spec["executors"][0]["python"] = o.python
    (folder / "flow.yml").write_text(json.dumps(spec))
    launcher = pathlib.Path(o.serve).resolve()
    if launcher.parent.name != "src":
        raise SystemExit(f"--serve {o.serve}: expected a build's src/flowline")
    server = argparse.Namespace(build=launcher.parent.parent, grpc=False, io_threads=0)
    proc, (port,) = start_server(server, folder / "flow.yml", folder)
    try:
        base = f"http://127.0.0.1:{port}"
        ids = np.random.default_rng(1).integers(*ID_RANGE, size=o.seq).tolist()
        body = json.dumps({"data": [{"id": f"c{k}", "tensor": {"dtype": "int64", "shape": [o.seq], "data": ids}}
                                    for k in range(o.per_request_now)], "parameters": {}, "execEndpoint": "/"})
        status, answer = post(f"{base}/post", body)  # checked by hand first: an embedding a document
        shapes = [d["embedding"]["shape"] if isinstance(d["embedding"], dict) else [len(d["embedding"])]
                  for d in json.loads(answer)["data"]]
        if status != 200 or shapes != [o.width] * o.per_request_now:
            raise SystemExit(f"the served flow answered {status} with embeddings of shapes {shapes}, not "
                             f"{o.per_request_now} of {o.width}")
        (folder / "body.json").write_text(body)
        before = executor_totals(base)
        out = folder / "load.json"
        run = subprocess.run([o.http_load, "--url", f"{base}/post", "--body-file", str(folder / "body.json"),
                              "--connections", str(o.clients), "--duration", str(o.seconds), "--warmup", "2",
                              "--docs-per-request", str(o.per_request_now), "--json", str(out)],
                             capture_output=True, text=True)
        if run.returncode != 0 or not out.exists():
            raise SystemExit(f"http_load failed (exit {run.returncode}):\n{run.stdout}{run.stderr}")
        figures = json.loads(out.read_text())
        after = executor_totals(base)
        done = {k: after[("onnx", k)] - before.get(("onnx", k), 0.0) for k in ("documents", "batches")}
        return (figures["docs_per_s"], done["documents"] / max(done["batches"], 1), figures["latency_ms"]["p50"],
                figures["latency_ms"]["p99"])
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--model", required=True)
    a.add_argument("--clients", type=int, default=64)
    a.add_argument("--seconds", type=float, default=10)
    a.add_argument("--seq", type=int, default=64)
    a.add_argument("--batch-sizes", default="1,8,16,32,64,128")
    a.add_argument("--id-range", default="1000,20000", help="token ids are drawn from [LOW, HIGH)")
    a.add_argument("--concurrency", default="0", help="OnnxModel's `concurrency` (0: its default; a list: a run each)")
    a.add_argument("--threads", type=int, default=0, help="OnnxModel's `threads` (0: onnxruntime's default)")
    a.add_argument("--tf32", action="store_true", help="TF32 products on the GPU, for both (off: fp32 as fp32)")
    a.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a.add_argument("--replicas", default="1", help="OnnxModel's worker processes in the flow (a list: one flow each)")
    a.add_argument("--docs-per-request", default="1", help="documents in each client's request (a list: a run each)")
    a.add_argument("--delay-ms", type=float, default=5, help="the batcher's max_delay_ms")
    a.add_argument("--serve", metavar="LAUNCHER", help="serve the flow with LAUNCHER (build/src/flowline)")
    a.add_argument("--http-load", default=str(pathlib.Path(__file__).resolve().parents[1] / "build/bench/http_load"))
    a.add_argument("--python", default=sys.executable, help="the OnnxModel workers' interpreter under --serve")
    o = a.parse_args()
    model = os.path.abspath(o.model)
    global ID_RANGE, TF32
    ID_RANGE, TF32 = tuple(int(x) for x in o.id_range.split(",")), o.tf32
    first = np.ones((1, o.seq), dtype=np.int64)
    o.width = list(session_for(model, o.device).run(None, {"input_ids": first, "attention_mask": first})[0].shape[1:])
    modes = ["run"] if o.device == "cpu" else ["run", "iobinding"]
    rates = {}
    for b in [int(x) for x in o.batch_sizes.split(",")]:
        for mode in modes:
            rates[(b, mode)] = ort_rate(model, b, o.seq, o.seconds, o.device, mode)
            print(f"ort   {o.device} {mode:9s} batch {b:4d}: {rates[(b, mode)]:9.1f} docs/s", flush=True)
    best, best_mode = max(rates, key=rates.get)
    results = []
    runs = [(r, d, c) for r in str(o.replicas).split(",") for d in str(o.docs_per_request).split(",")
            for c in str(o.concurrency).split(",")]
    for replicas, per_request, concurrency in [(int(r), int(d), int(c) or None) for r, d, c in runs]:
        o.replicas_now, o.per_request_now, o.concurrency_now = replicas, per_request, concurrency
        # a batch fills to what the clients have in flight at most, so the batcher never waits for more
        batch = min(best, o.clients * per_request)
        what = (f"{o.clients} {'connections' if o.serve else 'client threads'}, {per_request} document(s) a "
                f"request, {replicas} replica(s) x {concurrency or 'auto'} at once, max_batch_size {batch}")
        if o.serve:
            rate, mean_batch, p50, p99 = served_rate(o, model, batch)
            print(f"flow  served, {what}: {rate:9.1f} docs/s (mean batch {mean_batch:.1f}, p50 {p50:.2f} ms, "
                  f"p99 {p99:.2f} ms)", flush=True)
        else:
            rate, mean_batch = flow_rate(o, model, batch)
            print(f"flow  in process, {what}: {rate:9.1f} docs/s (mean batch {mean_batch:.1f})", flush=True)
        results.append((what, rate))
    again = ort_rate(model, best, o.seq, o.seconds, o.device, best_mode)  # the reference before and after
    print(f"ort   {o.device} {best_mode:9s} batch {best:4d} again: {again:9.1f} docs/s")
    reference = (rates[(best, best_mode)] + again) / 2
    print(f"best ort ({best_mode}, batch {best}): mean of before and after {reference:.1f} docs/s")
    for what, rate in results:
        print(f"flow / best ort: {rate / reference:.3f}  ({what})")

if __name__ == "__main__":
    main()
