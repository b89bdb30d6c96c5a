#!/usr/bin/env python3
"""OnnxModel served to many clients against ONNX Runtime's own throughput (issue 53 §4), same model, same run.

    PYTHONPATH=build/python .venv/bin/python bench/onnx_model.py --model /tmp/minilm.onnx [--clients 64]
        [--seconds 10] [--seq 64] [--batch-sizes 1,8,16,32,64,128]

The model: a MiniLM exported with torch.onnx (`.venv-ref/bin/python scripts/export_tiny_onnx.py /tmp/minilm.onnx
models/all-MiniLM-L6-v2`: input_ids and attention_mask in, mean-pooled [batch, 384] out). Inputs: random
token ids of --seq tokens (one shape, so every batch stacks whole).

  ort     onnxruntime.InferenceSession.run in this process at each batch size, for --seconds each: docs/s;
          the best is the reference
  flow    a flow of one OnnxModel (its worker process; flowline's batcher, max_batch_size the best batch
          size, max_delay_ms 5) and --clients Python threads posting one document per request for --seconds
Both use ONNX Runtime's default threads (all cores). Prints docs/s and flow / best ort, the best batch size
measured again after the flow (the reference is the mean of both: the machine may be shared).
"""
import argparse
import json
import os
import pathlib
import tempfile
import threading
import time

import numpy as np
import onnxruntime as ort

import flowline


def ort_rate(model, batch, seq, seconds):
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    ids = np.random.default_rng(0).integers(1000, 20000, size=(batch, seq)).astype(np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    session.run(None, feeds)  # warm-up
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        session.run(None, feeds)
        done += batch
    return done / (time.perf_counter() - started)


def flow_rate(model, batch, seq, clients, seconds):
    folder = pathlib.Path(tempfile.mkdtemp(prefix="onnx-bench-"))
    flow_file = folder / "flow.yml"
    flow_file.write_text(json.dumps({"executors": [{
        "name": "onnx", "uses": "OnnxModel", "py_modules": ["flowline:onnx_model"],
        "batching": {"max_batch_size": batch, "max_delay_ms": 5}, "with": {"model": model}}]}))
    rng = np.random.default_rng(1)
    with flowline.Flow.load(flow_file) as flow:
        flow.post("/", [flowline.Document("w", tensor=rng.integers(1000, 20000, size=seq).astype(np.int64))])
        counts = [0] * clients
        stop = time.perf_counter() + seconds

        def client(k):
            doc = flowline.Document(f"c{k}", tensor=rng.integers(1000, 20000, size=seq).astype(np.int64))
            while time.perf_counter() < stop:
                out = flow.post("/", [doc])
                assert out[0].embedding.shape == (384,)
                counts[k] += 1

        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        batches = [e for e in flow.stats()["executors"] if e["executor"] == "onnx"][0]["batches"]
    return sum(counts) / elapsed, sum(counts) / max(batches, 1)


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--model", required=True)
    a.add_argument("--clients", type=int, default=64)
    a.add_argument("--seconds", type=float, default=10)
    a.add_argument("--seq", type=int, default=64)
    a.add_argument("--batch-sizes", default="1,8,16,32,64,128")
    o = a.parse_args()
    model = os.path.abspath(o.model)
    rates = {}
    for b in [int(x) for x in o.batch_sizes.split(",")]:
        rates[b] = ort_rate(model, b, o.seq, o.seconds)
        print(f"ort   batch {b:4d}: {rates[b]:8.1f} docs/s", flush=True)
    best = max(rates, key=rates.get)
    rate, mean_batch = flow_rate(model, best, o.seq, o.clients, o.seconds)
    print(f"flow  {o.clients} clients, one document a request, max_batch_size {best}: {rate:8.1f} docs/s "
          f"(mean batch {mean_batch:.1f})")
    again = ort_rate(model, best, o.seq, o.seconds)  # the machine is shared: the reference before and after
    print(f"ort   batch {best:4d} again: {again:8.1f} docs/s")
    reference = (rates[best] + again) / 2
    print(f"flow / best ort (batch {best}, mean of before and after {reference:.1f} docs/s): {rate / reference:.3f}")


if __name__ == "__main__":
    main()
