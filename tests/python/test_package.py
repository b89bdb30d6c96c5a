"""The package itself: import time and what it maps, documents between Python and C++, errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import flowline

from conftest import SOURCE_DIR, encoder_flow_text

# The PyPI wheel's libtorch_cpu.so maps these two itself (tests/launcher/test_light_core.cpp says why).
GPU_LIBRARIES = ("libtorch_cuda", "libc10_cuda", "libflowline_cuda", "libnccl", "libcublas", "libcudnn", "libtorch.so")


def run_python(code):
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ.copy())
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_import_flowline_maps_no_cuda_library_and_is_not_slowed_by_one():
    # What keeps the import fast is what it maps: no CUDA library. Its time is a figure of bench/python_encode.py
    # (245-570 ms, docs/benchmarks.md), not of a test on a shared machine; loading LibTorch's CUDA part takes
    # several seconds more, so the best of three fresh interpreters is held to 5 s only as a second witness.
    reports = [run_python(
        "import json, time; t = time.perf_counter(); import flowline; s = time.perf_counter() - t; "
        "print(json.dumps({'seconds': s, 'maps': open('/proc/self/maps').read()}))") for _ in range(3)]
    assert min(r["seconds"] for r in reports) < 5.0
    for name in GPU_LIBRARIES:
        assert name not in reports[0]["maps"], name


def test_a_cpu_flow_from_python_maps_no_cuda_library():
    model = SOURCE_DIR / "models/all-MiniLM-L6-v2"
    report = run_python(
        "import json, flowline; e = flowline.SentenceEncoder(%r, device='auto'); v = e.encode('a text'); "
        "print(json.dumps({'dim': len(v), 'maps': open('/proc/self/maps').read()}))" % str(model))
    assert report["dim"] == 384
    for name in GPU_LIBRARIES:
        assert name not in report["maps"], name


def test_flowlines_log_is_warnings_on_standard_error_unless_asked_for_more():
    code = ("import flowline, sys; %s e = flowline.SentenceEncoder(%r); e.encode(['a text']); print('done')"
            % ("{}", str(SOURCE_DIR / "tests/data/tiny-bert")))
    env = {k: v for k, v in os.environ.items() if k != "FLOWLINE_LOG_LEVEL"}

    def run(prefix, **extra):
        result = subprocess.run([sys.executable, "-c", code.format(prefix)], capture_output=True, text=True,
                                env={**env, **extra})
        assert result.returncode == 0, result.stderr
        return result

    quiet = run("")
    assert quiet.stdout == "done\n"  # the program's output only
    assert "holds random weights" in quiet.stderr  # a warning (tiny-bert has a RANDOM_WEIGHTS file)
    assert "[info]" not in quiet.stderr
    assert "[info] device 'auto'" in run("", FLOWLINE_LOG_LEVEL="info").stderr
    assert "[info] device 'auto'" in run("flowline.set_log_level('info');").stderr
    assert run("flowline.set_log_level('error');").stderr == ""
    with pytest.raises(ValueError, match="log level 'loud': expected trace, debug, info"):
        flowline.set_log_level("loud")
    refused = subprocess.run([sys.executable, "-c", "import flowline"], capture_output=True, text=True,
                             env={**env, "FLOWLINE_LOG_LEVEL": "loud"})
    assert refused.returncode != 0
    assert "FLOWLINE_LOG_LEVEL='loud' in the environment: expected trace, debug, info" in refused.stderr


def test_a_document_carries_every_field_of_jinas_shape():
    doc = flowline.Document.from_dict({
        "id": "d1", "text": "t", "tags": {"n": 1, "big": 2**63, "x": [1.5, None, True, "s"], "o": {"k": "v"}},
        "embedding": [1, 2, 3], "tensor": np.arange(6, dtype=np.int64).reshape(2, 3)[:, ::2],
        "mime_type": "text/plain", "uri": "file://a", "scores": {"s": 0.5}, "parent_id": "p",
        "chunks": [{"text": "c"}], "matches": [flowline.Document("m", id="m1")]})
    assert (doc.id, doc.text, doc.mime_type, doc.uri, doc.parent_id) == ("d1", "t", "text/plain", "file://a", "p")
    assert doc.tags == {"n": 1, "big": 2**63, "x": [1.5, None, True, "s"], "o": {"k": "v"}}
    assert isinstance(doc.tags["n"], int)
    assert doc.embedding.dtype == np.float32 and doc.embedding.tolist() == [1, 2, 3]
    assert doc.tensor.dtype == np.int64 and doc.tensor.tolist() == [[0, 2], [3, 5]]
    assert doc.scores == {"s": 0.5}
    assert [c.text for c in doc.chunks] == ["c"] and doc.matches[0].id == "m1"
    doc.tags["added"] = [1]  # tags write through, as Jina's
    del doc.tags["o"]
    assert doc.tags.pop("x") == [1.5, None, True, "s"] and doc.tags == {"n": 1, "big": 2**63, "added": [1]}
    doc.blob = b"\x00\x01"
    assert doc.blob == b"\x00\x01"
    back = json.loads(doc.to_json())
    assert back["tensor"]["shape"] == [2, 2] and back["tags"] == {"n": 1, "big": 2**63, "added": [1]}


def test_a_documents_tensor_reads_without_a_copy():
    doc = flowline.Document("t", embedding=np.arange(4, dtype=np.float32))
    a, b = doc.embedding, doc.embedding
    assert a.ctypes.data == b.ctypes.data  # both views of the document's own tensor
    try:
        import torch
    except ImportError:
        return  # the light install: torch does not import (the zero-copy case is numpy's above)
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.ctypes.data and t.tolist() == [0, 1, 2, 3]


def test_bad_input_types_are_type_errors_naming_them(encoder):
    with pytest.raises(TypeError, match=r"inputs\[0\]: expected a str, a dict"):
        flowline.Document.from_dict(3)
    with pytest.raises(TypeError, match=r"Document.tags\['a'\]"):
        flowline.Document(tags={"a": object()})
    with pytest.raises(TypeError, match=r"sentences\[1\]: expected a str, not int"):
        encoder.encode(["a", 3])
    with pytest.raises(TypeError, match=r"Document.embedding: expected a numpy array"):
        flowline.Document(embedding="not an array")


def test_flowline_errors_are_flow_errors_with_the_message(encoder, tmp_path):
    with pytest.raises(flowline.ConfigError, match=r"encoder.batch_size=-3: executor 'encoder': parameter 'batch_size'"):
        flowline.Flow.load(SOURCE_DIR / "flows/encode.yml", overrides={"encoder.batch_size": -3})
    with pytest.raises(flowline.FlowError, match="cannot open file"):
        flowline.Flow.load(tmp_path / "missing.yml")
    with flowline.Flow.from_yaml(encoder_flow_text(), str(tmp_path / "flow.yml")) as flow:
        with pytest.raises(flowline.FlowError, match="executor 'encoder': prompt_name 'nope'"):
            flow.post("/encode", ["a"], parameters={"prompt_name": "nope"})
    assert issubclass(flowline.ConfigError, flowline.FlowError) and issubclass(flowline.FlowError, RuntimeError)


def test_the_context_manager_closes_the_flow_and_its_writer_completes(tmp_path):
    out = tmp_path / "out.jsonl"
    flow_file = tmp_path / "flow.yml"
    flow_file.write_text(json.dumps({"executors": [
        {"name": "stats", "uses": "TextStats"}, {"name": "writer", "uses": "JsonlWriter", "with": {"path": "x"}}]}))
    with flowline.Flow.load(flow_file, overrides={"writer.path": out}) as flow:
        docs = flow.post("/", ["one two", {"text": "three", "tags": {"k": 1}}, flowline.Document("four")],
                         parameters={}, request_size=2)
        assert [d.text for d in docs] == ["one two", "three", "four"]
        assert docs[0].tags["words"] == 2 and docs[1].tags["k"] == 1
        assert not flow.closed
    assert flow.closed
    assert [json.loads(line)["text"] for line in out.read_text().splitlines()] == ["one two", "three", "four"]
    with pytest.raises(flowline.FlowError, match="closed"):
        flow.post("/", ["again"])
    flow.close()  # idempotent


def test_request_parameters_reach_the_executor_typed(tmp_path):
    flow = flowline.Flow.from_yaml(encoder_flow_text(), tmp_path / "flow.yml")
    with flow:
        (doc,) = flow.post("/encode", ["a text"], parameters={"count_tokens": True, "dimensions": 8})
        assert doc.tags["tokens"] == 4 and doc.embedding.shape == (8,)
        with pytest.raises(flowline.FlowError, match="dimensions"):
            flow.post("/encode", ["a text"], parameters={"dimensions": 1000})


def test_post_answers_a_list_with_docarrays_bulk_accessors(tmp_path):
    flow_text = json.dumps({"executors": [{"name": "stats", "uses": "TextStats"}]})
    with flowline.Flow.from_yaml(flow_text, str(tmp_path / "flow.yml")) as flow:
        docs = flow.post("/", ["one two", {"text": "three", "embedding": [1.0, 2.0]},
                               flowline.Document("four", embedding=np.array([3.0, 4.0], np.float32))])
    assert isinstance(docs, flowline.DocumentList) and isinstance(docs, list) and len(docs) == 3
    assert docs.texts == docs.text == ["one two", "three", "four"] and docs.ids == [d.id for d in docs]
    assert docs.embedding[0] is None and list(docs.embedding[2]) == [3.0, 4.0]  # docarray 0.30+: a list
    with pytest.raises(ValueError, match=r"embeddings: document 0 \('.*'\) has no embedding"):
        docs.embeddings  # docarray < 0.30: stacked, so every document needs one
    both = flowline.DocumentList(docs[1:])
    assert both.embeddings.shape == (2, 2) and both.embeddings.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert flowline.DocumentList().embeddings.shape == (0,)
