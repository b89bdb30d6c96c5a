"""Tensors between a flow and its own Python workers through a shared-memory segment (wire version 4, issue 53
§2): bit-exact round trips of every dtype numpy has, zero-size and large tensors, what does not fit crossing
inline, the segment's size from the executor's `shared_memory:` key (else FLOWLINE_SHARED_MEMORY_BYTES, else
64 MiB), a worker that names bytes outside its request's region, a crashed worker's new segment, two requests in
flight, and workers speaking versions 2 and 3 (or not started by the flow) served over plain frames."""
import json
import os
import threading

import numpy
import pytest

import flowline

# Tells, per document, what the tensor's bytes were in the worker: "mmap" (the shared segment) or "bytearray"
# (the request frame). Texts ask for changes: a new array, an in-place change, or (once) an answer whose
# segment offset points outside its request's region.
EXECUTOR = '''
import os
import struct
import sys

import flowline


def where(array):
    base = array.base
    while base is not None and not isinstance(base, memoryview):
        base = base.base
    return type(base.obj).__name__ if base is not None else "own"


class Probe(flowline.Executor):
    @flowline.requests
    def probe(self, docs, parameters, **kwargs):
        for d in docs:
            d.tags["via"] = where(d.tensor) if d.tensor is not None else "none"
            d.tags["pid"] = os.getpid()
            if d.text == "plus one":
                d.tensor = d.tensor + 1
            elif d.text == "in place":
                d.tensor[...] = 7
            elif d.text == "exit":
                os._exit(3)
            elif d.text == "bad offset":
                worker = sys.modules["__main__"]  # pyworker.py, run as a script
                original = worker.put_tensor

                def outside(out, value, numpy, where):
                    start = len(out)
                    original(out, value, numpy, where)
                    if out[start] & 0x80:  # written as an offset into the segment: make it point past its end
                        out[-8:] = struct.pack("<Q", 1 << 40)
                        worker.put_tensor = original

                worker.put_tensor = outside
                d.tensor = d.tensor + 1
            for c in d.chunks:
                c.tags["via"] = where(c.tensor)
'''

DTYPES = ["float32", "float16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"]


def flow_file(tmp_path, **executor):
    (tmp_path / "probe.py").write_text(EXECUTOR)
    flow = tmp_path / "flow.yml"
    flow.write_text(json.dumps({"executors": [{"name": "probe", "uses": "Probe", "py_modules": ["probe.py"],
                                               **executor}]}))
    return flow


def pattern(dtype, shape, seed):
    rng = numpy.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(numpy.prod(shape)) * numpy.dtype(dtype).itemsize, dtype=numpy.uint8)
    if dtype == "bool":
        return (raw[: int(numpy.prod(shape))] % 2).astype(bool).reshape(shape)
    return raw.view(dtype).reshape(shape)  # every bit pattern, NaN payloads included


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_tensors_of_every_dtype_and_shape_round_trip_bit_exactly_through_shared_memory(tmp_path):
    docs, expected = [], []
    for seed, dtype in enumerate(DTYPES):
        big = pattern(dtype, (64, 33, 9), seed)  # 19 KiB and more: through the segment
        small = pattern(dtype, (5,), seed + 100)  # inline
        docs += [flowline.Document("same", tensor=big), flowline.Document("same", tensor=small)]
        expected += [(big, "mmap"), (small, "bytearray")]
    image = pattern("uint8", (224, 224, 3), 7)
    large = pattern("float32", (4, 1024, 1024), 8)  # 16 MiB
    docs += [flowline.Document("plus one", tensor=image), flowline.Document("in place", tensor=image.copy()),
             flowline.Document("same", tensor=numpy.zeros((0, 224, 3), dtype=numpy.uint8)),
             flowline.Document("same", tensor=numpy.float32(2.5) * numpy.ones((), dtype=numpy.float32)),
             flowline.Document("same", tensor=large), flowline.Document("parent")]
    docs[-1].chunks = [flowline.Document("chunk", tensor=image)]
    with flowline.Flow.load(flow_file(tmp_path)) as f:
        out = f.post("/", docs, request_size=len(docs))
    for i, (array, via) in enumerate(expected):
        assert same_bits(out[i].tensor, array), (i, array.dtype)
        assert out[i].tags["via"] == via, (i, array.dtype, array.nbytes)
    n = len(expected)
    assert same_bits(out[n].tensor, image + 1) and out[n].tags["via"] == "mmap"
    assert same_bits(out[n + 1].tensor, numpy.full_like(image, 7))
    assert out[n + 2].tensor.shape == (0, 224, 3) and out[n + 2].tensor.dtype == numpy.uint8
    assert out[n + 3].tensor.shape == () and out[n + 3].tensor == numpy.float32(2.5)
    assert same_bits(out[n + 4].tensor, large) and out[n + 4].tags["via"] == "mmap"
    assert same_bits(out[n + 5].chunks[0].tensor, image) and out[n + 5].chunks[0].tags["via"] == "mmap"


def test_shared_memory_sizes_the_segment_a_larger_tensor_crosses_inline_and_0_turns_it_off(tmp_path, monkeypatch):
    image = pattern("uint8", (224, 224, 3), 1)
    huge = pattern("float32", (1024, 1024), 2)  # 4 MiB: more than a 1 MiB segment, less than the default 64 MiB
    docs = [flowline.Document("same", tensor=huge), flowline.Document("plus one", tensor=image)]

    def crossing(**executor):
        with flowline.Flow.load(flow_file(tmp_path, **executor)) as f:
            out = f.post("/", docs, request_size=1)
        assert same_bits(out[0].tensor, huge) and same_bits(out[1].tensor, image + 1)
        return out[0].tags["via"], out[1].tags["via"]

    monkeypatch.setenv("FLOWLINE_SHARED_MEMORY_BYTES", "0")  # the flow's key wins over the environment
    assert crossing(shared_memory="1MiB") == ("bytearray", "mmap")
    assert crossing(shared_memory=1 << 20) == ("bytearray", "mmap")
    assert crossing() == ("bytearray", "bytearray")  # no key: the environment's 0 turns it off
    monkeypatch.delenv("FLOWLINE_SHARED_MEMORY_BYTES")
    assert crossing() == ("mmap", "mmap")  # neither: 64 MiB
    assert crossing(shared_memory=0) == ("bytearray", "bytearray")
    assert crossing(shared_memory="off") == ("bytearray", "bytearray")
    monkeypatch.setenv("FLOWLINE_SHARED_MEMORY_BYTES", "1MiB")
    assert crossing() == ("bytearray", "mmap")


def test_a_bad_shared_memory_is_a_config_error_at_its_line(tmp_path):
    (tmp_path / "probe.py").write_text(EXECUTOR)
    flow = tmp_path / "flow.yml"
    flow.write_text("executors:\n  - name: probe\n    uses: Probe\n    py_modules: [probe.py]\n"
                    "    shared_memory: 64MB\n")
    with pytest.raises(flowline.ConfigError, match=r"flow\.yml:5:20: executor 'probe': shared_memory: '64MB': write "
                                                   r"the unit as MiB \(64MiB\)"):
        flowline.Flow.load(flow)


def test_an_answer_naming_bytes_outside_its_region_fails_that_request_and_the_flow_serves_on(tmp_path):
    image = pattern("uint8", (224, 224, 3), 3)
    with flowline.Flow.load(flow_file(tmp_path)) as f:
        with pytest.raises(flowline.FlowError,
                           match=r"answered with a bad frame: bad frame at byte \d+: a tensor of 150528 bytes at "
                                 r"offset 1099511627776 of the shared segment, outside this request's region "
                                 r"\[\d+, \d+\)"):
            f.post("/", [flowline.Document("bad offset", tensor=image)])
        out = f.post("/", [flowline.Document("plus one", tensor=image)])
        assert same_bits(out[0].tensor, image + 1) and out[0].tags["via"] == "mmap"


def test_a_crashed_worker_is_restarted_with_a_new_segment_and_serves(tmp_path):
    image = pattern("uint8", (224, 224, 3), 4)
    with flowline.Flow.load(flow_file(tmp_path)) as f:
        before = f.post("/", [flowline.Document("plus one", tensor=image)])[0]
        assert before.tags["via"] == "mmap"
        with pytest.raises(flowline.FlowError, match="went away during this request"):
            f.post("/", [flowline.Document("exit", tensor=image)])
        after = f.post("/", [flowline.Document("plus one", tensor=image)])[0]
    assert after.tags["pid"] != before.tags["pid"] and after.tags["via"] == "mmap"  # the new process mapped one
    assert same_bits(after.tensor, image + 1)


def test_requests_in_flight_together_keep_their_own_regions(tmp_path):
    images = [pattern("uint8", (224, 224, 3), 10 + k) for k in range(4)]
    results, problems = {}, []

    def post(f, k):
        try:
            for round_ in range(8):
                docs = f.post("/", [flowline.Document("plus one", tensor=images[k])] * 20, request_size=10)
                results[(k, round_)] = all(same_bits(d.tensor, images[k] + 1) for d in docs)
        except Exception as e:  # noqa: BLE001 — reported below
            problems.append(repr(e))

    with flowline.Flow.load(flow_file(tmp_path, replicas=2)) as f:
        threads = [threading.Thread(target=post, args=(f, k)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not problems and len(results) == 32 and all(results.values()), (problems, results)


@pytest.mark.parametrize("version", [2, 3])
def test_a_worker_speaking_an_older_version_gets_plain_frames(tmp_path, monkeypatch, version):
    worker_dir = os.path.dirname(os.environ["FLOWLINE_PY_WORKER"])
    wrapper = tmp_path / f"pyworker_v{version}.py"
    wrapper.write_text(f"import sys\nsys.path.insert(0, {worker_dir!r})\nimport pyworker\n"
                       f"pyworker.VERSION = {version}\nsys.exit(pyworker.main())\n")
    monkeypatch.setenv("FLOWLINE_PY_WORKER", str(wrapper))
    image = pattern("uint8", (224, 224, 3), 5)
    with flowline.Flow.load(flow_file(tmp_path)) as f:
        out = f.post("/", [flowline.Document("plus one", tensor=image), flowline.Document("same", tensor=image)])
    assert same_bits(out[0].tensor, image + 1) and same_bits(out[1].tensor, image)
    assert out[0].tags["via"] == "bytearray"


def test_a_worker_the_flow_did_not_start_is_offered_no_segment(tmp_path):
    import subprocess
    import sys

    (tmp_path / "probe.py").write_text(EXECUTOR)
    worker = subprocess.Popen([sys.executable, os.environ["FLOWLINE_PY_WORKER"], "--py-modules",
                               str(tmp_path / "probe.py"), "--uses", "Probe", "--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(worker.stdout.readline().rsplit(":", 1)[1].split(",")[0])
        flow = tmp_path / "hosts.yml"
        flow.write_text(json.dumps({"executors": [{"name": "probe", "hosts": [f"127.0.0.1:{port}"]}]}))
        image = pattern("uint8", (224, 224, 3), 6)
        with flowline.Flow.load(flow) as f:
            out = f.post("/", [flowline.Document("plus one", tensor=image)])
        assert same_bits(out[0].tensor, image + 1) and out[0].tags["via"] == "bytearray"
    finally:
        worker.kill()
        worker.wait(timeout=30)
