"""Python executors that a flow runs in worker processes of its own (issue 53 §2): `uses: Class` with
`py_modules:` in a flow file, run by the `flowline` launcher and by Flow.load; a crashing worker restarted;
no worker left behind when flowline is killed; an unmodified Jina 3 class; validate's reports."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import flowline
from conftest import LAUNCHER, SOURCE_DIR

CLIENTS_PYTHON = SOURCE_DIR / ".venv-clients/bin/python"
JINA_EXECUTOR = SOURCE_DIR / "tests/python/data/jina_executor.py"

EXECUTORS = '''
import ctypes
import os
import time

import flowline


class Shout(flowline.Executor):
    """Upper-cases texts and says which process did it."""

    def __init__(self, suffix="", delay=0.0, **kwargs):
        super().__init__(**kwargs)
        self.suffix = suffix
        self.delay = delay

    @flowline.requests(on="/shout")
    def shout(self, docs, parameters, **kwargs):
        time.sleep(self.delay)
        for d in docs:
            d.text = d.text.upper() + self.suffix
            d.tags["pid"] = os.getpid()
            d.tags["times"] = parameters.get("times", 1)
            d.tags["device"] = self.runtime["device"]
            d.tags["replica"] = self.runtime["replica"]

    @flowline.requests
    def other(self, docs, parameters, **kwargs):
        for d in docs:
            if d.text == "raise":
                raise RuntimeError("asked to")
            if d.text == "exit":
                os._exit(3)
            if d.text == "segfault":
                ctypes.string_at(0)
            if d.text == "sleep":
                time.sleep(60)
            if d.text == "big-endian":  # numpy's other byte order crosses as the same values
                import numpy
                d.embedding = numpy.arange(4, dtype=">f4")
            elif d.embedding is not None:
                d.embedding = d.embedding * 2
            d.tags["pid"] = os.getpid()
        return docs
'''


def write_flow(folder, executor, name="flow.yml"):
    (folder / "shout_executors.py").write_text(EXECUTORS)
    flow = folder / name
    flow.write_text(json.dumps({"executors": [executor]}))
    return flow


def launcher(*args, **kwargs):
    return subprocess.run([str(LAUNCHER), *map(str, args)], capture_output=True, text=True, timeout=180, **kwargs)


def test_the_launcher_runs_a_flowline_executor_class_from_py_modules_one_process_per_replica(tmp_path):
    flow = write_flow(tmp_path, {"name": "shout", "uses": "Shout", "py_modules": ["shout_executors.py"],
                                 "replicas": 2, "with": {"suffix": "!", "delay": 0.2}})
    (tmp_path / "in.txt").write_text("".join(f"text {i}\n" for i in range(40)))
    run = launcher("run", flow, "-i", tmp_path / "in.txt", "-o", tmp_path / "out.jsonl", "--endpoint", "/shout",
                   "--request-size", "2", "--stats-json", tmp_path / "stats.json")
    assert run.returncode == 0, run.stderr
    docs = [json.loads(line) for line in open(tmp_path / "out.jsonl", encoding="utf-8")]
    assert [d["text"] for d in docs] == [f"TEXT {i}!" for i in range(40)]
    # Two worker processes, neither this one. Each request takes 0.2 s, so that requests wait while one
    # replica works and both replicas get some: without the delay the first replica's worker once took all
    # 20 requests of a CI run on two loaded cores.
    pids = {d["tags"]["pid"] for d in docs}
    assert len(pids) == 2 and os.getpid() not in pids, pids
    stats = json.loads((tmp_path / "stats.json").read_text())
    shout = [e for e in stats["executors"] if e["executor"] == "shout"]
    assert shout and shout[0]["batches"] == 20 and shout[0]["batch_ms_mean"] > 0
    assert sum(r["documents"] for r in stats["replicas"] if r["executor"] == "shout") == 40
    for pid in pids:  # the workers are gone with the run
        assert not pathlib.Path(f"/proc/{pid}").exists() or "zombie" in pathlib.Path(f"/proc/{pid}/status").read_text()


def test_each_worker_gets_its_replicas_device_from_the_flow_as_a_cpp_replica_does(tmp_path):
    # `devices:` round-robin over the replicas and "auto" decided, as for a C++ executor: runtime["device"].
    # On a machine without a GPU "auto" is the CPU, which is all CI can show; the GPU machine's OnnxModel test
    # takes a cuda device this way.
    flow = write_flow(tmp_path, {"name": "shout", "uses": "Shout", "py_modules": ["shout_executors.py"],
                                 "replicas": 2, "devices": ["cpu", "auto"], "with": {"delay": 0.05}})
    with flowline.Flow.load(flow) as f:
        docs = f.post("/shout", [f"t{i}" for i in range(8)], request_size=1)
    auto = "cuda:0" if os.path.exists("/dev/nvidiactl") else "cpu"
    seen = {(d.tags["replica"], d.tags["device"]) for d in docs}
    assert seen and seen <= {(0, "cpu"), (1, auto)}, seen


OVERLAPPING = '''
import threading
import time

import flowline


class Overlapping(flowline.Executor):
    """Counts the handler calls running at once (time.sleep releases the GIL, as onnxruntime's run does)."""
    concurrent_requests = 2

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.lock, self.active, self.most = threading.Lock(), 0, 0

    @flowline.requests
    def run(self, docs, parameters, **kwargs):
        with self.lock:
            self.active += 1
            self.most = max(self.most, self.active)
        time.sleep(0.2)
        with self.lock:
            self.active -= 1
        for d in docs:
            d.tags["most"] = self.most


class TooMany(Overlapping):
    concurrent_requests = 0
'''


def test_a_class_that_takes_two_requests_at_once_gets_them_on_two_threads_of_one_worker(tmp_path):
    (tmp_path / "overlapping.py").write_text(OVERLAPPING)
    flow = tmp_path / "flow.yml"
    flow.write_text(json.dumps({"executors": [{"name": "o", "uses": "Overlapping", "py_modules": ["overlapping.py"]}]}))
    with flowline.Flow.load(flow) as f:
        docs = f.post("/", [f"t{i}" for i in range(6)], request_size=1)  # one worker, three requests in flight
        stats = f.stats()
    assert [d.text for d in docs] == [f"t{i}" for i in range(6)]
    assert max(d.tags["most"] for d in docs) == 2  # two handler calls overlapped, never more
    assert len([r for r in stats["replicas"] if r["executor"] == "o"]) == 3  # two running, one in the socket
    flow.write_text(json.dumps({"executors": [{"name": "o", "uses": "TooMany", "py_modules": ["overlapping.py"]}]}))
    with pytest.raises(flowline.FlowError, match=r"TooMany.concurrent_requests must be an integer from 1 to 64, got 0"):
        flowline.Flow.load(flow)


def test_a_flow_loaded_in_python_runs_py_modules_with_tensors_and_parameters(tmp_path):
    flow = write_flow(tmp_path, {"name": "shout", "uses": "Shout", "py_modules": "shout_executors.py",
                                 "batching": {"max_batch_size": 16, "max_delay_ms": 5}})
    with flowline.Flow.load(flow) as f:
        docs = f.post("/shout", ["a", "b"], parameters={"times": 3})
        assert [(d.text, d.tags["times"]) for d in docs] == [("A", 3), ("B", 3)]
        import numpy as np

        doubled = f.post("/x", [flowline.Document("v", embedding=np.arange(4, dtype=np.float32))])
        assert doubled[0].embedding.tolist() == [0.0, 2.0, 4.0, 6.0]
        assert f.post("/x", ["big-endian"])[0].embedding.tolist() == [0.0, 1.0, 2.0, 3.0]
        with pytest.raises(flowline.FlowError, match=r"RuntimeError: asked to \(shout_executors.py:\d+ in other\)"):
            f.post("/x", ["raise"])
        assert [d.text for d in f.post("/x", ["fine"])] == ["fine"]


@pytest.mark.parametrize("how", ["exit", "segfault"])
def test_a_worker_that_crashes_fails_its_request_and_is_restarted(tmp_path, how):
    flow = write_flow(tmp_path, {"name": "shout", "uses": "Shout", "py_modules": ["shout_executors.py"]})
    with flowline.Flow.load(flow) as f:
        before = f.post("/x", ["one"])[0].tags["pid"]
        started = time.monotonic()
        with pytest.raises(flowline.FlowError, match=r"executor 'shout': the worker at 127.0.0.1:\d+ went away"):
            f.post("/x", [how])
        after = f.post("/x", ["two", "three"], request_size=1)  # waits for the restarted worker
        assert [d.text for d in after] == ["two", "three"]
        assert after[0].tags["pid"] != before
        assert time.monotonic() - started < 30


def children_of(pid):
    out = []
    for status in pathlib.Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid):
            out.append(int(status.parent.name))
    return out


def test_killing_flowline_takes_its_python_workers_with_it(tmp_path):
    flow = write_flow(tmp_path, {"name": "shout", "uses": "Shout", "py_modules": ["shout_executors.py"],
                                 "replicas": 2})
    (tmp_path / "in.txt").write_text("sleep\n" * 4)
    run = subprocess.Popen([str(LAUNCHER), "run", str(flow), "-i", str(tmp_path / "in.txt"), "-o",
                            str(tmp_path / "out.jsonl"), "--request-size", "1"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(workers := children_of(run.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(workers) == 2, workers
        time.sleep(1)
        run.kill()
        run.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(pathlib.Path(f"/proc/{p}").exists() for p in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(pathlib.Path(f"/proc/{p}").exists() for p in workers)
    finally:
        if run.poll() is None:
            run.kill()


def jina_python():
    if not CLIENTS_PYTHON.exists():
        return None
    probe = subprocess.run([str(CLIENTS_PYTHON), "-c", "import jina, docarray"], capture_output=True, timeout=120)
    return CLIENTS_PYTHON if probe.returncode == 0 else None


def test_an_unmodified_jina_3_executor_runs_in_a_flow(tmp_path):
    python = jina_python()
    if python is None:
        pytest.skip(f"jina is not installed in {CLIENTS_PYTHON} (scripts/setup-clients.sh installs jina 3.34.0)")
    flow = tmp_path / "flow.yml"
    flow.write_text(json.dumps({"executors": [{"name": "lengths", "uses": "LengthEmbedder", "python": str(python),
                                               "py_modules": [str(JINA_EXECUTOR)], "with": {"scale": 2.0}}]}))
    with flowline.Flow.load(flow) as f:
        docs = f.post("/embed", [{"id": "a", "text": "hello world", "tags": {"k": 1}}, "xyz"],
                      parameters={"factor": 3})
        assert [d.embedding.tolist() for d in docs] == [[11.0, 3.0, 6.0], [3.0, 0.0, 6.0]]
        assert docs[0].id == "a" and docs[0].tags["k"] == 1 and docs[0].tags["length"] == 11
        assert [d.text for d in f.post("/", ["quiet"])] == ["QUIET"]  # the default endpoint


def validate(flow):
    return launcher("validate", flow)


def test_validate_reports_python_executors_problems_with_both_files_lines(tmp_path):
    (tmp_path / "broken.py").write_text("import flowline\n\nclass Broken(flowline.Executor:\n    pass\n")
    (tmp_path / "uses_jina.py").write_text("from jina import Executor\n\nclass J(Executor):\n    pass\n")
    (tmp_path / "fine.py").write_text("import flowline\n\nclass Fine(flowline.Executor):\n    pass\n")
    cases = {
        "missing": ({"uses": "X", "py_modules": ["nowhere.py"]}, r"nowhere.py does not exist"),
        "class": ({"uses": "Nope", "py_modules": ["fine.py"]}, r"class 'Nope' not found in fine.py; it defines: Fine"),
        "syntax": ({"uses": "Broken", "py_modules": ["broken.py"]}, r"broken.py:3: syntax error"),
        "jina": ({"uses": "J", "py_modules": ["uses_jina.py"], "python": sys.executable},
                 r"uses_jina.py:1: uses_jina.py imports jina, which this Python .* lacks"),
    }
    for name, (executor, expected) in cases.items():
        flow = tmp_path / f"{name}.yml"
        flow.write_text("executors:\n  - name: py\n" + "".join(f"    {k}: {json.dumps(v)}\n" for k, v in executor.items()))
        result = validate(flow)
        assert result.returncode != 0, name
        line = 3 if name == "class" else 4  # the uses: line, else the py_modules: line
        assert f"{flow}:{line}:" in result.stderr + result.stdout, (name, result.stderr)
        import re

        assert re.search(expected, result.stderr + result.stdout), (name, result.stderr)
    fine = tmp_path / "fine.yml"
    fine.write_text("executors:\n  - name: py\n    uses: Fine\n    py_modules: [fine.py]\n")
    assert validate(fine).returncode == 0, validate(fine).stderr


def test_a_worker_answers_a_malformed_frame_with_an_error_frame_and_closes(tmp_path):
    import socket
    import struct

    (tmp_path / "shout_executors.py").write_text(EXECUTORS)
    worker = subprocess.Popen([sys.executable, str(SOURCE_DIR / "python/flowline/pyworker.py"), "--py-modules",
                               str(tmp_path / "shout_executors.py"), "--uses", "Shout", "--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = worker.stdout.readline()
        port = int(line.rsplit(":", 1)[1].split(",")[0])  # "serving NAME on HOST:PORT, N at once"

        def exchange(*frames):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                for f in frames:
                    s.sendall(f)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
                return data

        hello = struct.pack("<IB", 13, 1) + b"FLWL" + struct.pack("<HHI", 1, 1, 0)
        # A request whose document count promises more than the frame holds.
        body = struct.pack("<BQ", 3, 7) + struct.pack("<I", 1) + b"/" + struct.pack("<I", 0) + struct.pack("<I", 5)
        answer = exchange(hello, struct.pack("<I", len(body)) + body)
        welcome_length = struct.unpack_from("<I", answer)[0]
        error = answer[4 + welcome_length:]
        assert error[4] == 5 and b"bad frame at byte" in error, answer
        assert exchange(struct.pack("<I", 0)).endswith(b"bad frame length 0: 1 to 268435456 bytes")
    finally:
        worker.kill()
        worker.wait(timeout=30)


def test_flowline_serve_runs_a_py_modules_executor_for_a_flow_that_lists_it_under_hosts(tmp_path):
    import socket

    flow = write_flow(tmp_path, {"name": "shout", "uses": "Shout", "py_modules": ["shout_executors.py"],
                                 "with": {"suffix": "?"}})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([str(LAUNCHER), "serve", str(flow), "--executor", "shout", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # The gateway's form that `flowline export` writes: py_modules kept beside hosts.
        gateway = tmp_path / "gateway.yml"
        gateway.write_text(json.dumps({"executors": [{
            "name": "shout", "uses": "Shout", "py_modules": ["shout_executors.py"], "hosts": [f"127.0.0.1:{port}"],
            "remote": {"start_degraded": True}}]}))
        with flowline.Flow.load(gateway) as f:
            deadline = time.monotonic() + 60
            while True:
                try:
                    docs = f.post("/shout", ["x"])
                    break
                except flowline.FlowError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise
                    time.sleep(0.3)
        assert docs[0].text == "X?" and docs[0].tags["pid"] not in (os.getpid(), server.pid)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


SPACY_EXECUTOR = '''
import flowline
import spacy


class Sentences(flowline.Executor):
    """spaCy's rule-based sentencizer on a blank pipeline: each sentence a chunk."""

    def __init__(self, language="en", **kwargs):
        super().__init__(**kwargs)
        self.nlp = spacy.blank(language)
        self.nlp.add_pipe("sentencizer")

    @flowline.requests
    def split(self, docs, parameters, **kwargs):
        for d, parsed in zip(docs, self.nlp.pipe([d.text or "" for d in docs])):
            d.chunks = [flowline.Document(s.text, tags={"start": s.start_char, "end": s.end_char})
                        for s in parsed.sents]
'''


def test_a_spacy_pipeline_runs_as_a_python_executor_as_spacy_does_directly(tmp_path):
    try:
        import spacy
    except ImportError:
        missing = "spaCy is not installed in this Python (scripts/setup.sh installs spacy into .venv)"
        if os.environ.get("CI") in ("true", "1"):  # as the C++ tests' running_in_ci(): CI must not skip it
            pytest.fail(missing + "; CI is set, so this fails instead of skipping")
        pytest.skip(missing)
    (tmp_path / "spacy_executor.py").write_text(SPACY_EXECUTOR)
    flow = tmp_path / "flow.yml"
    flow.write_text(json.dumps({"executors": [{"name": "sentences", "uses": "Sentences", "replicas": 2,
                                               "py_modules": ["spacy_executor.py"], "python": sys.executable}]}))
    texts = ["Alice was beginning to get very tired. So she was considering! Why not?", "One sentence only",
             "Dr. Smith went home. It rained."]
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    expected = [[(s.text, s.start_char, s.end_char) for s in nlp(t).sents] for t in texts]
    with flowline.Flow.load(flow) as f:
        docs = f.post("/", texts, request_size=1)
    got = [[(c.text, c.tags["start"], c.tags["end"]) for c in d.chunks] for d in docs]
    assert got == expected and len(got[0]) == 3



def test_a_crash_in_a_merged_batch_fails_only_the_request_that_crashed(tmp_path):
    import threading

    flow = write_flow(tmp_path, {"name": "shout", "uses": "Shout", "py_modules": ["shout_executors.py"],
                                 "replicas": 2, "batching": {"max_batch_size": 64, "max_delay_ms": 300}})
    with flowline.Flow.load(flow) as f:
        results = {}

        def post(k, texts):
            try:
                results[k] = [d.text for d in f.post("/x", texts)]
            except flowline.FlowError as e:
                results[k] = str(e)

        threads = [threading.Thread(target=post, args=(k, texts), daemon=True)
                   for k, texts in enumerate([["a", "b"], ["exit"], ["c"]])]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=90)
        # The merged batch crashed a worker; each request then ran alone on a restarted one (not handed on and
        # merged again, which crashed worker after worker): only the one that crashes fails.
        assert not any(t.is_alive() for t in threads), results
        assert results[0] == ["a", "b"] and results[2] == ["c"], results
        assert "went away during this request" in results[1], results
        assert [d.text for d in f.post("/x", ["after"])] == ["after"]


TENSORS = '''
import flowline


class Brighten(flowline.Executor):
    @flowline.requests
    def brighten(self, docs, parameters, **kwargs):
        for d in docs:
            if d.text == "raise":
                d.tensor = d.tensor + 9  # a change the failed request must not keep
                raise RuntimeError("asked to")
            if d.text == "change":
                d.tensor = d.tensor + 1  # a new array
            if d.text == "in place":
                d.tensor = d.tensor.copy()
                d.tensor[0, 0, 0] = 7
            for c in d.chunks:
                c.embedding = c.embedding * 2
'''


def test_image_sized_tensors_cross_to_a_worker_and_back_changed_or_not(tmp_path):
    import numpy

    (tmp_path / "brighten.py").write_text(TENSORS)
    flow = tmp_path / "flow.yml"
    flow.write_text(json.dumps({"executors": [{"name": "b", "uses": "Brighten", "py_modules": ["brighten.py"]}]}))
    rng = numpy.random.default_rng(1)
    image = rng.integers(0, 250, size=(224, 224, 3), dtype=numpy.uint8)  # 147 KiB: sent from the array itself
    big = rng.standard_normal(20000).astype(numpy.float32)  # 78 KiB
    small = numpy.arange(4, dtype=numpy.float32)
    with flowline.Flow.load(flow) as f:
        docs = f.post("/", [flowline.Document("change", tensor=image, embedding=small),
                            flowline.Document("same", tensor=image),
                            flowline.Document("in place", tensor=image),
                            {"text": "nested", "chunks": [{"text": "c", "embedding": big.tolist()}]}])
        assert numpy.array_equal(docs[0].tensor, image + 1) and docs[0].tensor.dtype == numpy.uint8
        assert numpy.array_equal(docs[0].embedding, small)
        assert numpy.array_equal(docs[1].tensor, image)
        expected = image.copy()
        expected[0, 0, 0] = 7
        assert numpy.array_equal(docs[2].tensor, expected)
        assert numpy.array_equal(docs[3].chunks[0].embedding, big * 2)
        with pytest.raises(flowline.FlowError, match="RuntimeError: asked to"):
            f.post("/", [flowline.Document("raise", tensor=image)])
        assert numpy.array_equal(f.post("/", [flowline.Document("same", tensor=image)])[0].tensor, image)
