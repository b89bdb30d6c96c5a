"""SentenceEncoder and Reranker: the C++ flow's results bit for bit, sentence-transformers' within
cos 0.99999 (its committed goldens here; live where sentence-transformers imports), threads at once."""
import json
import subprocess
import threading

import numpy as np
import pytest

import flowline

from conftest import CROSS_ENCODER, GOLDENS, LAUNCHER, MODEL, encoder_flow_text, golden_rows


def launcher_embeddings(texts, tmp_path, request_size=1024):
    """The same texts through `flowline run` (the C++ flow, its .npy output), in requests of `request_size`: a
    forward pass's rows (which texts share it) can move the last bits of its results on some CPUs' kernels."""
    flow = tmp_path / "encode.yml"
    flow.write_text(encoder_flow_text(request_size))
    inputs = tmp_path / "texts.jsonl"
    inputs.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    out = tmp_path / "out.npy"
    result = subprocess.run([str(LAUNCHER), "run", str(flow), "--input", str(inputs), "--input-format", "jsonl",
                             "--output", str(out), "--progress", "never"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return np.load(out)


def test_encode_equals_the_cpp_flow_bit_for_bit(encoder, tmp_path):
    texts = [t for _, t in golden_rows()]
    expected = launcher_embeddings(texts, tmp_path)
    got = encoder.encode(texts)
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert np.array_equal(got, expected)
    # Flow.load and post() of the same flow give the same bits, document by document.
    (tmp_path / "flow.yml").write_text(encoder_flow_text())
    with flowline.Flow.load(tmp_path / "flow.yml") as flow:
        docs = flow.post("/encode", texts)
    assert np.array_equal(np.stack([d.embedding for d in docs]), expected)


def test_encode_streams_many_requests_in_order_and_refuses_bad_texts(encoder, tmp_path):
    # encode() converts each request's texts as the flow reads them and copies each answer into its rows as it
    # arrives (python/src/module.cpp): over many small requests the rows are still the texts' own, in order.
    texts = [t for _, t in golden_rows()]
    expected = launcher_embeddings(texts, tmp_path, request_size=3)
    got = encoder._flow._encode("/encode", texts, None, 3)
    assert np.array_equal(got, expected)
    with pytest.raises(TypeError, match=r"sentences\[2\]: expected a str, not int"):
        encoder.encode(["a", "b", 3])
    # A lone surrogate has no UTF-8: the texts before it are answered, then its index is named.
    with pytest.raises(ValueError, match=r"sentences\[4\]: .*surrogate"):
        encoder._flow._encode("/encode", texts[:4] + ["\ud800"] + texts[:3], None, 2)
    five = tmp_path / "five"
    five.mkdir()
    assert np.array_equal(encoder.encode(texts[:5]), launcher_embeddings(texts[:5], five))  # the encoder serves on


def cosines(a, b):
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_encode_matches_sentence_transformers_goldens(encoder):
    from safetensors.numpy import load_file

    rows = golden_rows()
    goldens = load_file(str(GOLDENS / "embeddings.safetensors"))["embeddings"][[i for i, _ in rows]]
    got = encoder.encode([t for _, t in rows])
    assert cosines(got, goldens).min() >= 0.99999


def test_encode_matches_sentence_transformers_live(encoder):
    st = pytest.importorskip("sentence_transformers")
    torch = pytest.importorskip("torch")
    model = st.SentenceTransformer(str(MODEL), device="cpu")
    texts = [t for _, t in golden_rows()][:16]
    for kwargs in ({}, {"normalize_embeddings": True}, {"prompt": "query: "}):
        expected = model.encode(texts, **kwargs)
        got = encoder.encode(texts, **kwargs)
        assert type(got) is type(expected) and got.shape == expected.shape and got.dtype == expected.dtype
        assert cosines(got, expected).min() >= 0.99999
    single = encoder.encode(texts[0], convert_to_tensor=True)
    assert isinstance(single, torch.Tensor) and single.shape == model.encode(texts[0], convert_to_tensor=True).shape
    rows = encoder.encode(texts[:2], convert_to_numpy=False)
    assert isinstance(rows, list) and len(rows) == 2 and isinstance(rows[0], torch.Tensor)


def test_encode_returns_what_sentence_transformers_returns(encoder):
    one = encoder.encode("a single text")
    assert isinstance(one, np.ndarray) and one.shape == (384,)
    many = encoder.encode(["a single text", "two"])
    # A batch of two is another matrix shape than one text alone: LibTorch's CPU kernels may sum in another
    # order (on an AMD EPYC machine with two threads the rows differed by 2e-8), so close, not bit-equal.
    assert many.shape == (2, 384) and np.allclose(many[0], one, rtol=1e-5, atol=1e-7)
    empty = encoder.encode([])
    assert isinstance(empty, np.ndarray) and empty.shape == (0,)
    normalized = encoder.encode(["two"], normalize_embeddings=True)
    assert abs(float(np.linalg.norm(normalized[0])) - 1.0) < 1e-6
    assert not np.array_equal(encoder.encode(["two"], prompt="query: "), many[1:])
    with pytest.raises(ValueError, match=r"sentences\[1\]: the encoder gave it no embedding"):
        encoder.encode(["a", ""])  # flowline passes a text-less document through without one


def test_threads_posting_at_once_get_their_own_answers(encoder):
    texts = [t for _, t in golden_rows()][:32]
    groups = [texts[k::4] for k in range(4)]
    expected = [encoder.encode(g) for g in groups]
    results = [None] * 4
    errors = []

    def work(k):
        try:
            for _ in range(3):
                got = encoder.encode(groups[k])
                assert np.array_equal(got, expected[k])
            results[k] = got
        except Exception as e:  # noqa: BLE001 - reported below with the thread's number
            errors.append((k, e))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(np.array_equal(results[k], expected[k]) for k in range(4))


def test_rank_is_cross_encoders_rank_on_its_pairs():
    from safetensors.numpy import load_file

    pairs = [json.loads(line) for line in open(str(CROSS_ENCODER) + ".pairs.jsonl", encoding="utf-8")]
    scores = load_file(str(CROSS_ENCODER) + ".pairs.safetensors")["scores"]
    query = pairs[0]["query"]
    documents = [p["document"] for p in pairs]
    with flowline.Reranker(CROSS_ENCODER, device="cpu") as reranker:
        ranked = reranker.rank(query, documents, return_documents=True)
        top = reranker.rank(query, documents, top_k=2)
    assert [r["corpus_id"] for r in ranked] == sorted(range(len(documents)), key=lambda i: -scores[i])
    for r in ranked:
        assert r["score"] == pytest.approx(float(scores[r["corpus_id"]]), abs=1e-5)
        assert r["text"] == documents[r["corpus_id"]]
    assert top == [{"corpus_id": r["corpus_id"], "score": r["score"]} for r in ranked[:2]]
