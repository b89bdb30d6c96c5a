"""Python executors (issue 53 §2's first part): flowline.Executor classes in flows of this process, and
served by `python -m flowline.worker` to a flow that lists the worker under `hosts:`."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import flowline


BATCHES = []  # what Shout's default handler saw, batch by batch


class Shout(flowline.Executor):
    """Upper-cases texts (a test executor)."""

    def __init__(self, suffix="", **kwargs):
        super().__init__(**kwargs)
        self.suffix = suffix

    @flowline.requests(on="/shout")
    def shout(self, docs, parameters, **kwargs):
        for d in docs:
            d.text = d.text.upper() + self.suffix
            d.tags["replica"] = self.runtime["replica"]
            d.tags["device"] = self.runtime["device"]
            d.tags["times"] = parameters.get("times", 1)

    @flowline.requests
    def replace(self, docs, parameters, **kwargs):
        BATCHES.append([d.text for d in docs])
        if any(d.text == "boom" for d in docs):
            raise ValueError("no boom here")
        return [flowline.Document("new " + d.text, id=d.id) for d in docs]


class NeedsModel(flowline.Executor):
    def __init__(self, model, **kwargs):
        super().__init__(**kwargs)

    @flowline.requests
    def run(self, docs, parameters, **kwargs):
        pass


def flow_of(*executors):
    return flowline.Flow.from_yaml(json.dumps({"executors": list(executors)}), os.path.join(os.getcwd(), "t.yml"))


def test_a_python_executor_runs_in_a_flow_with_its_with_and_parameters():
    with flow_of({"name": "shout", "uses": "Shout", "replicas": 2, "with": {"suffix": "!"}},
                 {"name": "stats", "uses": "TextStats"}) as flow:
        docs = flow.post("/shout", ["a b", "c"], parameters={"times": 3}, request_size=1)
        assert [d.text for d in docs] == ["A B!", "C!"]
        assert all(d.tags["times"] == 3 and d.tags["replica"] in (0, 1) for d in docs)
        assert all(d.tags["device"] == "cpu" for d in docs)  # the replica's device, as a C++ replica's
        assert docs[0].tags["words"] == 2  # the next executor saw the changed text
        replaced = flow.post("/anything", [{"id": "x", "text": "y"}])
        assert [(d.id, d.text) for d in replaced] == [("x", "new y")]
        stats = flow.stats()  # per-executor time and counts, as for a C++ executor
        shout = [r for r in stats["replicas"] if r["executor"] == "shout"]
        assert len(shout) == 2 and sum(r["documents"] for r in shout) == 3 and shout[0]["type"] == "Shout"
        assert [e["executor"] for e in stats["executors"]] == ["shout", "stats"]
        assert stats["executors"][0]["batches"] == 3 and stats["executors"][0]["batch_ms_mean"] > 0


def test_a_raising_handler_fails_its_request_alone_naming_the_frame():
    with flow_of({"name": "shout", "uses": "Shout"}) as flow:
        with pytest.raises(flowline.FlowError, match=r"executor 'shout': ValueError: no boom here \(.*test_executors.py:\d+ in replace\)"):
            flow.post("/", ["fine", "boom"], request_size=1)
        assert [d.text for d in flow.post("/", ["fine"])] == ["new fine"]  # the flow keeps serving


def test_a_failing_request_in_a_merged_batch_fails_alone_and_the_others_keep_their_documents():
    BATCHES.clear()
    with flow_of({"name": "shout", "uses": "Shout", "batching": {"max_batch_size": 64, "max_delay_ms": 500}}) as flow:
        results = {}

        def post(k, texts):
            try:
                results[k] = [d.text for d in flow.post("/", texts)]
            except flowline.FlowError as e:
                results[k] = str(e)

        threads = [threading.Thread(target=post, args=(k, texts))
                   for k, texts in enumerate([["a", "b"], ["boom"], ["c"]])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results[0] == ["new a", "new b"] and results[2] == ["new c"]
    assert "ValueError: no boom here" in results[1]
    # The failing request shared a batch with the others, which then ran again alone on their own documents
    # (the handler hands them back as it left them; moved-from ones would come back as "new ").
    assert any("boom" in b and len(b) > 1 for b in BATCHES), BATCHES
    assert ["c"] in BATCHES or ["a", "b"] in BATCHES


def test_a_python_executors_parameters_are_checked_before_it_runs():
    with pytest.raises(flowline.ConfigError, match="unknown parameter 'nope' for Shout; its parameters: suffix"):
        flow_of({"name": "shout", "uses": "Shout", "with": {"nope": 1}})
    with pytest.raises(flowline.ConfigError, match="model"):
        flow_of({"name": "m", "uses": "NeedsModel"})


def test_threads_post_to_a_flow_of_python_executors_at_once():
    with flow_of({"name": "shout", "uses": "Shout", "replicas": 2}) as flow:
        results = {}

        def work(k):
            results[k] = [d.text for d in flow.post("/shout", [f"t{k}-{i}" for i in range(40)], request_size=4)]

        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == {k: [f"T{k}-{i}" for i in range(40)] for k in range(4)}


WORKER_MODULE = '''
import os
import flowline

class Echo(flowline.Executor):
    def __init__(self, prefix="", **kwargs):
        super().__init__(**kwargs)
        self.prefix = prefix

    @flowline.requests
    def echo(self, docs, parameters, **kwargs):
        for d in docs:
            if d.text == "raise":
                raise RuntimeError("asked to")
            if d.text == "exit":
                os._exit(3)
            d.text = self.prefix + d.text
'''


def start_worker(module, port=0):
    proc = subprocess.Popen([sys.executable, "-m", "flowline.worker", "--py-modules", str(module), "--uses", "Echo",
                             "--with", json.dumps({"prefix": "> "}), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())
    line = proc.stdout.readline()
    assert line.startswith("serving Echo on 127.0.0.1:"), line + proc.stderr.read()
    return proc, int(line.rsplit(":", 1)[1])


def test_a_worker_serves_a_python_executor_to_a_flows_hosts(tmp_path):
    module = tmp_path / "echo_executor.py"
    module.write_text(WORKER_MODULE)
    worker, port = start_worker(module)
    try:
        flow_file = tmp_path / "flow.yml"
        flow_file.write_text(json.dumps({"executors": [
            {"name": "echo", "hosts": [f"127.0.0.1:{port}"], "remote": {"give_up_ms": 1500, "retry_max_ms": 200}},
            {"name": "stats", "uses": "TextStats"}]}))
        with flowline.Flow.load(flow_file) as flow:
            docs = flow.post("/", ["a", "b c"], request_size=1)
            assert [d.text for d in docs] == ["> a", "> b c"] and docs[1].tags["words"] == 3
            with pytest.raises(flowline.FlowError, match=r"RuntimeError: asked to \(.*echo_executor.py:\d+ in echo\)"):
                flow.post("/", ["raise"])
            # A worker that exits fails the request in flight with an error; restarted on its port, it is
            # found again and the flow serves on.
            with pytest.raises(flowline.FlowError):
                flow.post("/", ["exit"])
            assert worker.wait(timeout=30) == 3
            worker, _ = start_worker(module, port)
            deadline = time.monotonic() + 30
            while True:
                try:
                    assert [d.text for d in flow.post("/", ["again"])] == ["> again"]
                    break
                except flowline.FlowError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.3)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=30) == 0
