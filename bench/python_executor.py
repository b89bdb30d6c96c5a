#!/usr/bin/env python3
"""A no-op Python executor in a flowline flow (issue 53 §4): docs/s and the Python hop's µs per document,
against Jina 3.34 running the same class in its own Flow, in one run on one machine.

    python3 bench/python_executor.py [--docs 100000] [--runs 3] [--skip-jina]
    PYTHONPATH=build/python .venv/bin/python bench/python_executor.py --tensors [--docs 2000] [--runs 3]

Each run posts the same texts (one per line of a generated file, requests of 100) with `flowline run`:
  cpp        the C++ NoOp executor (the flow without a Python hop: the baseline)
  py         `uses: NoOp` in py_modules, a flowline.Executor no-op, one worker (.venv's Python)
  py-jina    the Jina 3 no-op class below, unchanged, in a flowline flow (.venv-clients' Python, the adapter)
  jina       the same Jina class in Jina 3.34's own Flow (gRPC, its client, request_size 100)
The hop's cost is (py - cpp) seconds per document: the frames over the loopback socket, the worker's decode,
the handler call and the encode back. Reports the median over --runs. Needs build/src/flowline, .venv and,
for the Jina columns, .venv-clients (scripts/setup-clients.sh).

--tensors: documents that carry tensors (issue 53 §2: what crosses to a worker and back), each a text, a
384-float embedding and a 224x224x3 uint8 tensor (147 KiB), posted from this process with Flow.post
(requests of 100) to the C++ NoOp and to the py_modules NoOp; the hop is the difference in µs per
document. Also the worker's own part alone: decoding a 100-document request frame, the no-op call and
encoding the answer, in a loop (pyworker.answer).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "build/src/flowline"
CLIENTS = ROOT / ".venv-clients/bin/python"

FLOWLINE_NOOP = '''import flowline


class NoOp(flowline.Executor):
    @flowline.requests
    def noop(self, docs, parameters, **kwargs):
        return None
'''
JINA_NOOP = '''from docarray import DocList
from docarray.documents import TextDoc
from jina import Executor, requests


class JinaNoOp(Executor):
    @requests
    def noop(self, docs: DocList[TextDoc], **kwargs) -> DocList[TextDoc]:
        return docs
'''
JINA_FLOW = '''import sys, time
sys.path.insert(0, sys.argv[1])
from docarray import DocList
from docarray.documents import TextDoc
from jina import Flow
from noop_jina import JinaNoOp

texts = open(sys.argv[2], encoding="utf-8").read().splitlines()
docs = DocList[TextDoc]([TextDoc(text=t) for t in texts])
with Flow(protocol="grpc").add(uses=JinaNoOp, name="noop") as flow:
    flow.post("/", inputs=docs[:1000], request_size=100, return_type=DocList[TextDoc])
    for _ in range(int(sys.argv[3])):
        started = time.time()
        out = flow.post("/", inputs=docs, request_size=100, return_type=DocList[TextDoc])
        assert len(out) == len(docs)
        print("SECONDS", time.time() - started, flush=True)
'''


def flowline_seconds(folder, name, executor, inputs):
    flow = folder / f"{name}.yml"
    flow.write_text(json.dumps({"with": {"request_size": 100}, "executors": [executor]}))
    started = time.time()
    run = subprocess.run([str(LAUNCHER), "run", str(flow), "-i", str(inputs), "--progress", "never",
                          "--stats-json", str(folder / f"{name}.stats.json")], capture_output=True, text=True)
    seconds = time.time() - started
    if run.returncode != 0:
        raise SystemExit(f"{name}: flowline run failed:\n{run.stderr}")
    return seconds


def tensor_documents(flowline, numpy, count):
    rng = numpy.random.default_rng(0)
    image = rng.integers(0, 256, size=(224, 224, 3), dtype=numpy.uint8)
    embedding = rng.standard_normal(384).astype(numpy.float32)
    return [flowline.Document(f"document {i}", embedding=embedding, tensor=image) for i in range(count)]


def worker_part_us(folder, numpy, count=100, loops=20):
    """The worker's own µs per document: decode a request frame of `count` tensor documents, call the no-op,
    encode the answer (pyworker.answer), as the worker does for each request."""
    # The worker script the flows of this process run (`import flowline` names it), else the checkout's.
    sys.path.insert(0, os.path.dirname(os.environ.get("FLOWLINE_PY_WORKER", ROOT / "python/flowline/x.py")))
    import pyworker

    sys.modules["flowline"] = pyworker.light_flowline_module()
    cls, kind = pyworker.load([str(folder / "noop_flowline.py")], "NoOp")
    served = pyworker.Served(cls, kind, "noop", {}, {})
    rng = numpy.random.default_rng(0)
    docs = [pyworker.Document(f"document {i}", embedding=rng.standard_normal(384).astype(numpy.float32),
                              tensor=rng.integers(0, 256, size=(224, 224, 3), dtype=numpy.uint8))
            for i in range(count)]
    body = bytearray(pyworker.U8.pack(3) + pyworker.U64.pack(7))
    pyworker.put_str(body, "/")
    pyworker.put_str(body, "")
    pyworker.put_documents(body, docs, numpy)
    best = float("inf")
    for _ in range(loops):
        started = time.perf_counter()
        answer = pyworker.answer(pyworker.Reader(body, 1), served, numpy, 2)  # frames without a segment
        best = min(best, time.perf_counter() - started)
        assert (answer.size() if hasattr(answer, "size") else len(answer)) > len(body) - 64
    return best / count * 1e6


def tensors_main(o):
    """--tensors: see the module's docstring. Needs the flowline package (PYTHONPATH=build/python)."""
    import numpy

    import flowline

    folder = pathlib.Path(tempfile.mkdtemp(prefix="python-executor-tensors-"))
    (folder / "noop_flowline.py").write_text(FLOWLINE_NOOP)
    cases = {"cpp": {"name": "noop", "uses": "NoOp"},
             "py": {"name": "noop", "uses": "NoOp", "py_modules": ["noop_flowline.py"]}}
    docs = tensor_documents(flowline, numpy, o.docs)
    seconds = {k: [] for k in cases}
    flows = {}
    for name, executor in cases.items():
        flow = folder / f"{name}.yml"
        flow.write_text(json.dumps({"with": {"request_size": 100}, "executors": [executor]}))
        flows[name] = flowline.Flow.load(flow)
        out = flows[name].post("/", docs[:200])  # warm: the worker's first requests
        assert out[0].tensor.shape == (224, 224, 3) and numpy.array_equal(out[7].tensor, docs[7].tensor)
    try:
        for _ in range(o.runs):  # in turns, so drift on the shared machine hits both alike
            for name, flow in flows.items():
                started = time.perf_counter()
                out = flow.post("/", docs)
                seconds[name].append(time.perf_counter() - started)
                assert len(out) == len(docs)
    finally:
        for flow in flows.values():
            flow.close()
    per_doc = {k: statistics.median(v) / o.docs * 1e6 for k, v in seconds.items()}
    print(f"{o.docs:,} documents (text, 384 float32 embedding, 224x224x3 uint8 tensor), requests of 100, "
          f"Flow.post from this process, median of {o.runs} runs")
    for name, us in per_doc.items():
        print(f"  {name:4s} {us:9.1f} us per document {1e6 / us:10,.0f} docs/s")
    print(f"  the Python hop: {per_doc['py'] - per_doc['cpp']:.1f} us per document (py - cpp)")
    print(f"  the worker's own part (decode, call, encode of 100 documents): "
          f"{worker_part_us(folder, numpy):.1f} us per document")


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--docs", type=int, default=None, help="default 100,000; with --tensors 2,000")
    a.add_argument("--runs", type=int, default=3)
    a.add_argument("--skip-jina", action="store_true")
    a.add_argument("--tensors", action="store_true", help="documents with tensors, posted from this process")
    o = a.parse_args()
    if o.tensors:
        o.docs = o.docs or 2_000
        return tensors_main(o)
    o.docs = o.docs or 100_000
    folder = pathlib.Path(tempfile.mkdtemp(prefix="python-executor-bench-"))
    (folder / "noop_flowline.py").write_text(FLOWLINE_NOOP)
    (folder / "noop_jina.py").write_text(JINA_NOOP)
    inputs = folder / "texts.txt"
    inputs.write_text("".join(f"document {i} of the python executor benchmark\n" for i in range(o.docs)))
    small_docs = o.docs // 10  # a tenth: the difference takes out the fixed cost (start, worker start, check)
    small = folder / "small.txt"
    small.write_text("".join(f"document {i} of the python executor benchmark\n" for i in range(small_docs)))
    jina = CLIENTS.exists() and not o.skip_jina
    cases = {
        "cpp": {"name": "noop", "uses": "NoOp"},
        "py": {"name": "noop", "uses": "NoOp", "py_modules": ["noop_flowline.py"]},
    }
    if jina:
        cases["py-jina"] = {"name": "noop", "uses": "JinaNoOp", "py_modules": ["noop_jina.py"],
                            "python": str(CLIENTS)}
    times = {k: [] for k in cases}
    steady = {k: [] for k in cases}
    for _ in range(o.runs):  # in turns, so drift on the shared machine hits every case alike
        for name, executor in cases.items():
            whole = flowline_seconds(folder, name, executor, inputs)
            times[name].append(whole)
            steady[name].append(whole - flowline_seconds(folder, name, executor, small))
    if jina:
        run = subprocess.run([str(CLIENTS), "-c", JINA_FLOW, str(folder), str(inputs), str(o.runs)],
                             capture_output=True, text=True, env={**os.environ, "JINA_LOG_LEVEL": "ERROR"})
        if run.returncode != 0:
            raise SystemExit(f"jina failed:\n{run.stderr[-3000:]}")
        times["jina"] = [float(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("SECONDS ")]
    median = {k: statistics.median(v) for k, v in times.items()}
    rate = {k: (o.docs - small_docs) / statistics.median(v) for k, v in steady.items()}
    if jina:
        rate["jina"] = o.docs / median["jina"]  # flow.post alone: Jina's start is outside the timing
    print(f"{o.docs:,} documents, requests of 100, median of {o.runs} runs. whole: `flowline run` start to end "
          f"(jina: flow.post only); steady: {o.docs:,} minus {small_docs:,} documents, start taken out")
    for name, seconds in median.items():
        print(f"  {name:8s} whole {seconds:8.3f} s {o.docs / seconds:10,.0f} docs/s   steady {rate[name]:10,.0f} docs/s")
    hop = (1 / rate["py"] - 1 / rate["cpp"]) * 1e6
    print(f"  the Python hop, steady: {hop:.2f} us per document (py - cpp)")
    if jina:
        print(f"  steady docs/s over jina's: py {rate['py'] / rate['jina']:.1f}x, py-jina "
              f"{rate['py-jina'] / rate['jina']:.1f}x; whole: py {median['jina'] / median['py']:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
