"""A Python executor's refusal of a bad request is the request's own fault, as a C++ executor's RequestError
is (issue 53 §2, wire version 2): `flowline.RequestError` raised in a handler, or a Jina 3 handler's
pydantic models refusing the request, answers 422 with its message through a served flow; any other
exception stays a 500 naming the traceback's last frame. The worker negotiates the wire version as
flowline's executor server does."""
import json
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

import flowline
from conftest import LAUNCHER, SOURCE_DIR

CLIENTS_PYTHON = SOURCE_DIR / ".venv-clients/bin/python"
PYWORKER = SOURCE_DIR / "python/flowline/pyworker.py"

EXECUTORS = '''
import flowline


class Picky(flowline.Executor):
    """Cuts texts to `limit` characters; a limit out of 1..100 is the client's mistake."""

    @flowline.requests(on="/cut")
    def cut(self, docs, parameters, **kwargs):
        limit = parameters.get("limit", 10)
        if not isinstance(limit, int) or not 1 <= limit <= 100:
            raise flowline.RequestError(f"parameter 'limit': expected an integer in 1..100, not {limit!r}")
        for d in docs:
            if d.text == "boom":
                raise RuntimeError("the executor broke")
            d.text = d.text[:limit]
'''

JINA_EXECUTOR = '''
from docarray import BaseDoc, DocList
from jina import Executor, requests
from pydantic import BaseModel, Field


class Text(BaseDoc):
    text: str = ""
    count: int = 0


class Limits(BaseModel):
    limit: int = Field(10, ge=1, le=100)


class JinaPicky(Executor):
    @requests(on="/cut")
    def cut(self, docs: DocList[Text], parameters: Limits, **kwargs) -> DocList[Text]:
        for d in docs:
            if d.text == "boom":
                raise RuntimeError("the executor broke")
            d.text = d.text[: parameters.limit]
        return docs
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """`flowline serve FLOW` on a loopback port it picks, stopped on leaving."""

    def __init__(self, flow, tmp_path):
        self.ready = tmp_path / "ready"
        self.process = subprocess.Popen([str(LAUNCHER), "serve", str(flow), "--port", "0", "--ready-file",
                                         str(self.ready)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def __enter__(self):
        deadline = time.monotonic() + 120
        while not (self.ready.exists() and self.ready.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError(f"flowline serve did not start: {self.process.stderr.read()}")
            time.sleep(0.1)
        self.port = int(self.ready.read_text().split()[0])
        return self

    def post(self, endpoint, body):
        """Jina's /post, naming the endpoint in the body (a py_modules executor's endpoints are not routes)."""
        body = {**body, "execEndpoint": endpoint}
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/post", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def __exit__(self, *exc):
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


def write_flow(tmp_path, executor, source, file_name):
    (tmp_path / file_name).write_text(source)
    flow = tmp_path / "flow.yml"
    flow.write_text(json.dumps({"executors": [{"name": "picky", "py_modules": [file_name], **executor}]}))
    return flow


def test_a_py_modules_executors_request_error_is_answered_422_and_its_crash_500_with_the_frame(tmp_path):
    flow = write_flow(tmp_path, {"uses": "Picky"}, EXECUTORS, "picky.py")
    with Served(flow, tmp_path) as served:
        status, body = served.post("/cut", {"data": [{"text": "abcdef"}], "parameters": {"limit": 3}})
        assert status == 200 and json.loads(body)["data"][0]["text"] == "abc", body
        status, body = served.post("/cut", {"data": [{"text": "abcdef"}], "parameters": {"limit": 500}})
        assert status == 422, body
        assert "parameter 'limit': expected an integer in 1..100, not 500" in body
        assert "picky.py" not in body  # the client's mistake: no traceback frame
        status, body = served.post("/cut", {"data": [{"text": "boom"}], "parameters": {"limit": 3}})
        assert status == 500, body
        assert "RuntimeError: the executor broke (picky.py:" in body and "in cut)" in body
        status, body = served.post("/cut", {"data": [{"text": "still serving"}]})
        assert status == 200 and json.loads(body)["data"][0]["text"] == "still serv", body


def test_a_request_error_in_a_flow_of_this_process_fails_the_post_with_its_message(tmp_path):
    flow = write_flow(tmp_path, {"uses": "Picky"}, EXECUTORS, "picky.py")
    with flowline.Flow.load(flow) as f:
        with pytest.raises(flowline.FlowError, match=r"expected an integer in 1\.\.100, not 0"):
            f.post("/cut", ["abc"], parameters={"limit": 0})
        assert [d.text for d in f.post("/cut", ["abcdef"], parameters={"limit": 2})] == ["ab"]


def jina_python():
    if not CLIENTS_PYTHON.exists():
        return None
    probe = subprocess.run([str(CLIENTS_PYTHON), "-c", "import jina, docarray"], capture_output=True, timeout=120)
    return CLIENTS_PYTHON if probe.returncode == 0 else None


def test_a_jina_3_handlers_pydantic_models_refusing_a_request_answer_422_as_jinas_gateway_does(tmp_path):
    python = jina_python()
    if python is None:
        pytest.skip(f"jina is not installed in {CLIENTS_PYTHON} (scripts/setup-clients.sh installs jina 3.34.0)")
    flow = write_flow(tmp_path, {"uses": "JinaPicky", "python": str(python)}, JINA_EXECUTOR, "jina_picky.py")
    with Served(flow, tmp_path) as served:
        status, body = served.post("/cut", {"data": [{"text": "abcdef"}], "parameters": {"limit": 2}})
        assert status == 200 and json.loads(body)["data"][0]["text"] == "ab", body
        status, body = served.post("/cut", {"data": [{"text": "abcdef"}], "parameters": {"limit": 0}})
        assert status == 422, body
        assert "the parameters do not fit the handler's Limits: limit: Input should be greater than" in body
        status, body = served.post("/cut", {"data": [{"text": "a", "tags": {"count": "many"}}]})
        assert status == 422, body
        assert "docs[0] does not fit the handler's document type Text: count: Input should be a valid integer" in body
        status, body = served.post("/cut", {"data": [{"text": "boom"}]})
        assert status == 500, body
        assert "RuntimeError: the executor broke (jina_picky.py:" in body


# ---- the wire itself: the worker negotiates versions 1..2 as flowline's executor server does -------------

def hello(low, high):
    return struct.pack("<IB", 13, 1) + b"FLWL" + struct.pack("<HHI", low, high, 0)


def request(limit, version=2):
    params = json.dumps({"limit": limit}).encode()
    body = struct.pack("<BQ", 3, 7)
    if version >= 3:
        body += struct.pack("<I", 0)  # no deadline
    if version >= 4:
        body += struct.pack("<QQQ", 0, 0, 0)  # no region of a shared segment
    body += struct.pack("<I", 4) + b"/cut" + struct.pack("<I", len(params)) + params
    body += struct.pack("<I", 1) + struct.pack("<BBI", 1, 1, 3) + b"abc"  # one document: text "abc"
    return struct.pack("<I", len(body)) + body


def read_frame(s):
    def exact(n):
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            assert chunk, f"the connection closed after {data!r}"
            data += chunk
        return data

    return exact(struct.unpack("<I", exact(4))[0])


def exchange(port, low, high, limit):
    """(the Welcome's version, the Response's status and error) of one request on a fresh connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(hello(low, high))
        welcome = read_frame(s)
        if welcome[0] == 5:
            return None, None, welcome[5:].decode()
        assert welcome[0] == 2, welcome
        s.sendall(request(limit, struct.unpack_from("<H", welcome, 1)[0]))
        response = read_frame(s)
        assert response[0] == 4 and struct.unpack_from("<Q", response, 1)[0] == 7, response
        status = response[9]
        length = struct.unpack_from("<I", response, 10)[0]
        return struct.unpack_from("<H", welcome, 1)[0], status, response[14:14 + length].decode()


def test_a_worker_speaks_the_highest_wire_version_a_client_offers_up_to_4_and_1_to_an_older_one(tmp_path):
    (tmp_path / "picky.py").write_text(EXECUTORS)
    worker = subprocess.Popen([sys.executable, str(PYWORKER), "--py-modules", str(tmp_path / "picky.py"), "--uses",
                               "Picky", "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(worker.stdout.readline().rsplit(":", 1)[1].split(",")[0])
        assert exchange(port, 1, 2, 3) == (2, 0, "")
        refused = "parameter 'limit': expected an integer in 1..100, not 0"
        assert exchange(port, 1, 2, 0) == (2, 2, refused)  # status 2: the request's own error
        assert exchange(port, 1, 1, 0) == (1, 1, refused)  # version 1 has no status 2: Failed, same message
        assert exchange(port, 1, 3, 0) == (3, 2, refused)  # version 3: a deadline in the request (not acted on)
        assert exchange(port, 2, 5, 0) == (4, 2, refused)  # version 4 without a segment: plain frames
        assert exchange(port, 5, 6, 0) == (None, None,
                                           "unsupported protocol version 5..6: this server speaks versions 1..4")
    finally:
        worker.kill()
        worker.wait(timeout=30)


CONCURRENT = '''
import flowline


class TwoAtOnce(flowline.Executor):
    concurrent_requests = 2

    @flowline.requests
    def run(self, docs, parameters, **kwargs):
        pass
'''


def test_a_workers_welcome_says_how_many_requests_it_takes_before_it_stops_reading(tmp_path):
    (tmp_path / "picky.py").write_text(EXECUTORS)
    (tmp_path / "two.py").write_text(CONCURRENT)
    for module, uses, takes in (("picky.py", "Picky", 1), ("two.py", "TwoAtOnce", 3)):  # N running, one read ahead
        worker = subprocess.Popen([sys.executable, str(PYWORKER), "--py-modules", str(tmp_path / module), "--uses",
                                   uses, "--port", "0"], stdout=subprocess.PIPE, text=True)
        try:
            port = int(worker.stdout.readline().rsplit(":", 1)[1].split(",")[0])
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(hello(1, 4))
                welcome = read_frame(s)
                assert welcome[0] == 2, welcome
                assert struct.unpack_from("<I", welcome, len(welcome) - 4)[0] == takes, uses
        finally:
            worker.kill()
            worker.wait(timeout=30)


class InProcessPicky(flowline.Executor):
    @flowline.requests(on="/cut")
    def cut(self, docs, parameters, **kwargs):
        if parameters.get("limit", 1) < 1:
            raise flowline.RequestError("parameter 'limit': expected an integer in 1..100, not 0")


def test_an_in_process_executors_request_error_goes_out_as_status_2_from_flowlines_own_server():
    config = {"executors": [{"name": "picky", "uses": "InProcessPicky"}]}
    with flowline.Flow.from_yaml(json.dumps(config), str(SOURCE_DIR / "<test>.yml")) as f:
        server = f._serve("picky", "127.0.0.1", 0)
        try:
            refused = "parameter 'limit': expected an integer in 1..100, not 0"
            assert exchange(server.port, 1, 2, 0)[:2] == (2, 2)
            assert refused in exchange(server.port, 1, 2, 0)[2]
            assert exchange(server.port, 1, 2, 5) == (2, 0, "")
        finally:
            server.stop()
