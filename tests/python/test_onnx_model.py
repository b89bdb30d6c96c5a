"""OnnxModel (issue 53 §3): the shipped Python executor, run by a flow's worker, against onnxruntime called
directly on the same tiny BERT (tests/data/tiny-models/bert-onnx/model.onnx, made by
scripts/export_tiny_onnx.py with torch.onnx): allclose 1e-5, requests merged by flowline's batcher."""
import json
import threading

import pytest

import flowline
from conftest import SOURCE_DIR

np = pytest.importorskip("numpy")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed in this Python (scripts/setup.sh "
                                                 "installs it into .venv)")
MODEL = SOURCE_DIR / "tests/data/tiny-models/bert-onnx/model.onnx"


def token_rows(count, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(5, 900, size=int(rng.integers(3, 9))).astype(np.int64) for _ in range(count)]


def direct(rows):
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    out = []
    for ids in rows:
        ids = ids[None, :]
        out.append(session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0][0])
    return out


def flow_file(tmp_path, executor=None, **with_):
    flow = tmp_path / "flow.yml"
    flow.write_text(json.dumps({"executors": [{
        "name": "onnx", "uses": "OnnxModel", "py_modules": ["flowline:onnx_model"], "replicas": 2,
        "batching": {"max_batch_size": 32, "max_delay_ms": 20},
        "with": {"model": str(MODEL), **with_}, **(executor or {})}]}))
    return flow


def test_onnx_model_in_a_flow_equals_onnxruntime_called_directly(tmp_path):
    rows = token_rows(48)
    expected = direct(rows)
    with flowline.Flow.load(flow_file(tmp_path)) as flow:
        results = {}

        def post(k):
            part = list(range(k, 48, 4))
            docs = flow.post("/", [flowline.Document(f"doc {i}", tensor=rows[i]) for i in part], request_size=3)
            results.update({i: d for i, d in zip(part, docs)})

        threads = [threading.Thread(target=post, args=(k,)) for k in range(4)]  # requests merged across clients
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = flow.stats()
    assert sorted(results) == list(range(48))
    for i, want in enumerate(expected):
        got = results[i].embedding
        assert got.shape == (32,) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert results[i].text == f"doc {i}"
    onnx = [e for e in stats["executors"] if e["executor"] == "onnx"][0]
    assert onnx["batches"] < 48 // 3  # the batcher merged requests


def test_onnx_model_reports_a_missing_model_and_a_document_without_a_tensor_passes(tmp_path):
    with pytest.raises(flowline.FlowError, match=r"OnnxModel: model .*nowhere.onnx does not exist"):
        flowline.Flow.load(flow_file(tmp_path, model="nowhere.onnx"))
    with flowline.Flow.load(flow_file(tmp_path, output="tensor")) as flow:
        docs = flow.post("/", ["no tensor", flowline.Document("t", tensor=token_rows(1)[0])])
        assert docs[0].tensor is None and docs[0].embedding is None
        assert docs[1].tensor.shape == (32,)


@pytest.mark.parametrize("named_by", ["with", "the executor's device"])
def test_onnx_model_on_a_gpu_equals_the_cpu(tmp_path, named_by):
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("no CUDA execution provider in this onnxruntime (a GPU machine with onnxruntime-gpu runs this)")
    rows = token_rows(16, seed=3)
    expected = direct(rows)
    # OnnxModel refuses to start when the CUDA provider does not (rather than running on the CPU)
    flow = flow_file(tmp_path, device="cuda") if named_by == "with" else flow_file(tmp_path, {"device": "cuda"})
    with flowline.Flow.load(flow) as flow:
        docs = flow.post("/", [flowline.Document(f"{i}", tensor=r) for i, r in enumerate(rows)], request_size=4)
    for d, want in zip(docs, expected):
        # fp32 on both (TF32 off): GPU kernels differ in the last bits only (with TF32, by 2.6e-4 on an H200)
        np.testing.assert_allclose(d.embedding, want, rtol=1e-4, atol=1e-5)
