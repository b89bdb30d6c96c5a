"""SentenceEncoder and Reranker: the C++ flow's results bit for bit, sentence-transformers' within
cos 0.99999 (its committed goldens here; live where sentence-transformers imports), threads at once."""
import json
import subprocess
import threading

import numpy as np
import pytest

import flowline

from conftest import CROSS_ENCODER, GOLDENS, LAUNCHER, MODEL, SOURCE_DIR, encoder_flow_text, golden_rows


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


PROMPTED = CROSS_ENCODER.parent / "bert-prompt-excluded"  # prompts query "query: ", passage "passage: "
CLASSIFIER = CROSS_ENCODER.parent / "bert-sequence-classifier"  # three labels: a cross-encoder for predict()


def test_similarity_is_sentence_transformers_for_every_function(encoder):
    texts = [t for _, t in golden_rows()][:5]
    a, b = encoder.encode(texts[:3]), encoder.encode(texts[2:])
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    unit_a = a64 / np.linalg.norm(a64, axis=1, keepdims=True)
    unit_b = b64 / np.linalg.norm(b64, axis=1, keepdims=True)
    expected = {"cosine": unit_a @ unit_b.T, "dot": a64 @ b64.T,
                "euclidean": -np.linalg.norm(a64[:, None] - b64[None], axis=2),
                "manhattan": -np.abs(a64[:, None] - b64[None]).sum(axis=2)}
    assert encoder.similarity_fn_name == "cosine"  # the checkpoint's config_sentence_transformers.json
    try:
        for name, matrix in expected.items():
            encoder.similarity_fn_name = name
            got = np.asarray(encoder.similarity(a, b))
            assert got.shape == (3, 3) and np.allclose(got, matrix, rtol=1e-5, atol=2e-5), name
            pairwise = np.asarray(encoder.similarity_pairwise(a, b))
            assert pairwise.shape == (3,) and np.allclose(pairwise, np.diag(matrix), rtol=1e-5, atol=2e-5), name
        encoder.similarity_fn_name = "cosine"
        assert np.asarray(encoder.similarity(a[0], list(b))).shape == (1, 3)  # a row; a list of rows
        with pytest.raises(ValueError, match="similarity_fn_name: 'maxsim' is not one of"):
            encoder.similarity_fn_name = "maxsim"
        with pytest.raises(ValueError, match="embedding sizes 384 and 8 differ"):
            encoder.similarity(a, b[:, :8])
    finally:
        encoder.similarity_fn_name = None


def test_encode_truncates_quantizes_and_reports_its_dimension(encoder):
    texts = [t for _, t in golden_rows()][:6]
    full = encoder.encode(texts)
    assert encoder.get_embedding_dimension() == encoder.get_sentence_embedding_dimension() == 384
    assert np.array_equal(encoder.encode(texts, truncate_dim=64), full[:, :64])
    short = encoder.encode(texts, truncate_dim=64, normalize_embeddings=True)  # truncated, then normalized
    assert np.allclose(np.linalg.norm(short, axis=1), 1, atol=1e-6)
    with encoder.truncate_embeddings(16):
        assert encoder.get_embedding_dimension() == 16 and encoder.encode(texts[0]).shape == (16,)
    assert encoder.encode(texts[0]).shape == (384,)
    ubinary = encoder.encode(texts, precision="ubinary")
    assert ubinary.dtype == np.uint8 and np.array_equal(ubinary, np.packbits(full > 0, axis=1))
    binary = encoder.encode(texts, precision="binary")
    assert binary.dtype == np.int8 and np.array_equal(binary.astype(np.int16), ubinary.astype(np.int16) - 128)
    int8 = encoder.encode(texts, precision="int8")
    # Each dimension's range over the call's embeddings into 256 buckets: its smallest value -128, its largest the
    # top bucket (127, or 126 where float32's division falls just short of it, as in sentence-transformers).
    assert int8.dtype == np.int8 and (int8.min(axis=0) == -128).all() and (int8.max(axis=0) >= 126).all()
    order = np.argsort(full, axis=0)  # buckets keep each dimension's order
    assert (np.diff(np.take_along_axis(int8.astype(np.int16), order, axis=0), axis=0) >= 0).all()
    with pytest.raises(ValueError, match="at least two texts"):
        encoder.encode(texts[0], precision="uint8")
    with pytest.raises(ValueError, match="Precision 'float16' is not supported"):
        encoder.encode(texts, precision="float16")
    with pytest.raises(ValueError, match="output_value='token_embeddings': flowline's encode gives sentence"):
        encoder.encode(texts, output_value="token_embeddings")
    with pytest.raises(TypeError, match="not a dict"):
        encoder.encode({"text": texts[0]})  # not its keys encoded as texts
    assert np.array_equal(encoder.encode(sentences=texts[:2]), full[:2])  # sentence-transformers 5's keyword


def test_prompts_are_resolved_as_sentence_transformers_6_resolves_them():
    texts = ["Alice was tired", "a whale hunt"]
    with flowline.SentenceTransformer(PROMPTED, device="cpu") as model:
        assert model.prompts == {"query": "query: ", "document": "", "passage": "passage: "}
        assert model.default_prompt_name is None
        plain = model.encode(texts)
        assert np.array_equal(model.encode_query(texts), model.encode(texts, prompt="query: "))
        assert not np.array_equal(model.encode_query(texts), plain)
        # "document" is always a prompt ("" unless the checkpoint has one), so it comes before "passage".
        assert np.array_equal(model.encode_document(texts), plain)
        passages = model.encode_document(texts, prompt_name="passage")
        assert np.array_equal(passages, model.encode(texts, prompt="passage: "))
        with pytest.raises(ValueError, match="Prompt name 'nope' not found in the configured prompts dictionary"):
            model.encode(texts, prompt_name="nope")
    with flowline.SentenceTransformer(PROMPTED, device="cpu", default_prompt_name="passage") as model:
        assert np.array_equal(model.encode(texts), model.encode(texts, prompt="passage: "))
        assert np.array_equal(model.encode_query(texts), model.encode(texts, prompt="query: "))
    with pytest.raises(ValueError, match="Default prompt name 'nope' not found"):
        flowline.SentenceTransformer(PROMPTED, device="cpu", default_prompt_name="nope")


def test_predict_is_cross_encoders_predict_for_one_label_and_several():
    from safetensors.numpy import load_file

    pairs = [(p["query"], p["document"]) for p in
             (json.loads(line) for line in open(str(CROSS_ENCODER) + ".pairs.jsonl", encoding="utf-8"))]
    scores = load_file(str(CROSS_ENCODER) + ".pairs.safetensors")["scores"]
    with flowline.CrossEncoder(CROSS_ENCODER, device="cpu") as model:
        assert model.num_labels == 1
        got = model.predict(pairs)
        assert got.dtype == np.float32 and got.shape == (len(pairs),) and np.allclose(got, scores, atol=1e-5)
        single = model.predict(pairs[2])
        assert isinstance(single, np.float32) and abs(single - scores[2]) < 1e-5
        # Pairs of several queries, interleaved: each score back at its pair.
        mixed = [pairs[0], ("another query", pairs[1][1]), pairs[3], ("another query", pairs[4][1]), pairs[5]]
        got = model.predict(mixed)
        assert np.allclose(got[[0, 2, 4]], scores[[0, 3, 5]], atol=1e-5)
        assert np.allclose(got[[1, 3]], model.predict(mixed[1::2]), atol=1e-6)
        assert model.predict([]).shape == (0,)
        assert model.rank(pairs[0][0], [d for _, d in pairs], top_k=0) == []  # as sentence-transformers slices
        with pytest.raises(TypeError, match=r"inputs\[1\]: expected a pair of str"):
            model.predict([pairs[0], ("only one",)])
        with pytest.raises(ValueError, match="prompt='q: ': flowline's cross-encoders take no prompts"):
            model.predict(pairs, prompt="q: ")
        assert np.array_equal(model.predict(sentences=pairs), model.predict(pairs))
        with pytest.raises(TypeError, match="give inputs or sentences"):
            model.predict(pairs, sentences=pairs)
    rows = [json.loads(line) for line in open(str(CLASSIFIER) + ".texts.jsonl", encoding="utf-8")]
    logits = load_file(str(CLASSIFIER) + ".texts.safetensors")["none"]
    with_pair = [i for i, r in enumerate(rows) if "text_pair" in r]
    with flowline.CrossEncoder(CLASSIFIER, device="cpu") as model:
        assert model.num_labels == 3
        got = model.predict([(rows[i]["text"], rows[i]["text_pair"]) for i in with_pair])
        assert got.shape == (len(with_pair), 3) and np.allclose(got, logits[with_pair], atol=1e-5)  # no activation
        soft = model.predict([(rows[i]["text"], rows[i]["text_pair"]) for i in with_pair], apply_softmax=True)
        assert np.allclose(soft.sum(axis=1), 1, atol=1e-6) and (soft.argmax(1) == got.argmax(1)).all()
        with pytest.raises(ValueError, match=r"rank\(\) only works for models with num_labels=1"):
            model.rank("q", ["a"])


def _cross_encoder_copy(folder, config_changes=None, st_config=None):
    """A copy of the tiny cross-encoder with config.json keys changed and, when given, a
    config_sentence_transformers.json."""
    import shutil

    shutil.copytree(CROSS_ENCODER, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.update(config_changes or {})
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    if st_config is not None:
        (folder / "config_sentence_transformers.json").write_text(json.dumps(st_config), encoding="utf-8")
    return folder


def test_a_cross_encoders_activation_is_read_where_sentence_transformers_6_reads_it(tmp_path):
    identity, tanh = "torch.nn.modules.linear.Identity", "torch.nn.modules.activation.Tanh"
    pairs = [(p["query"], p["document"]) for p in
             (json.loads(line) for line in open(str(CROSS_ENCODER) + ".pairs.jsonl", encoding="utf-8"))]
    # The executor itself follows config.json's sentence_transformers.activation_fn: its logits.
    own = _cross_encoder_copy(tmp_path / "own", {"sentence_transformers": {"activation_fn": identity}})
    with flowline.CrossEncoder(own, device="cpu") as model:
        logits = model.predict(pairs)
    with flowline.CrossEncoder(CROSS_ENCODER, device="cpu") as model:  # no key: sigmoid
        assert np.allclose(model.predict(pairs), 1 / (1 + np.exp(-logits)), atol=1e-6)
    # The pre-4.0 key (the ms-marco cross-encoders carry Identity there) and config_sentence_transformers.json
    # (where sentence-transformers 6 saves it, read first): logits too, and rank() orders by them.
    legacy = _cross_encoder_copy(tmp_path / "legacy", {"sbert_ce_default_activation_function": identity})
    saved = _cross_encoder_copy(tmp_path / "saved", {"sentence_transformers": {"activation_fn": tanh}},
                                {"activation_fn": "torch.nn.Identity"})
    for folder in (legacy, saved):
        with flowline.CrossEncoder(folder, device="cpu") as model:
            assert np.array_equal(model.predict(pairs), logits), folder.name
            query = pairs[0][0]
            ranked = model.rank(query, [d for _, d in pairs], top_k=3)
            with flowline.CrossEncoder(own, device="cpu") as reference:
                assert ranked == reference.rank(query, [d for _, d in pairs], top_k=3)
    tanh_legacy = _cross_encoder_copy(tmp_path / "tanh", {"sbert_ce_default_activation_function": tanh})
    with flowline.CrossEncoder(tanh_legacy, device="cpu") as model:
        assert np.allclose(model.predict(pairs), np.tanh(logits), atol=1e-6)
    # A path outside torch is not imported (sentence-transformers without trust_remote_code): the default, warned.
    untrusted = _cross_encoder_copy(tmp_path / "untrusted", {"sbert_ce_default_activation_function": "os.system"})
    with pytest.warns(UserWarning, match="'os.system' is not trusted"):
        model = flowline.CrossEncoder(untrusted, device="cpu")
    with model:
        assert np.allclose(model.predict(pairs), 1 / (1 + np.exp(-logits)), atol=1e-6)
    with pytest.raises(TypeError, match="activation_fn: expected a callable"):
        flowline.CrossEncoder(CROSS_ENCODER, device="cpu", activation_fn="sigmoid")


def test_the_python_api_refuses_or_takes_arguments_as_the_references_do(encoder, tmp_path):
    texts = ["Alice was tired", "a whale hunt", "the Queen"]
    full = encoder.encode(texts)
    assert np.array_equal(encoder.encode(texts, truncate_dim=np.int64(5)), full[:, :5])  # numpy ints are ints
    with pytest.raises(ValueError, match="truncate_dim: expected a positive int"):
        encoder.encode(texts, truncate_dim=True)
    # Bad arguments are refused before a model is loaded (no flow left behind).
    with pytest.raises(ValueError, match="similarity_fn_name: 'cos' is not one of"):
        flowline.SentenceTransformer(MODEL, device="cpu", similarity_fn_name="cos")
    with pytest.raises(ValueError, match="truncate_dim: expected a positive int"):
        flowline.SentenceTransformer(MODEL, device="cpu", truncate_dim=0)
    model = flowline.SentenceTransformer(MODEL, device="cpu")
    model.close()
    with pytest.raises(ValueError, match="max_seq_length: this SentenceEncoder is closed"):
        model.max_seq_length = 64
    with flowline.SentenceTransformer(TINY_CLIP, device="cpu") as clip:
        # A numpy array of str is a batch of texts (sentence-transformers 6's is_singular_input), not an image.
        batch = clip.encode(np.array(["a cat", "a dog"]))
        assert batch.shape[0] == 2 and np.array_equal(batch, clip.encode(["a cat", "a dog"]))


def test_the_sentence_transformers_extras_equal_it_live(encoder, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    torch = pytest.importorskip("torch")
    texts = [t for _, t in golden_rows()][:6]
    theirs = st.SentenceTransformer(str(MODEL), device="cpu")
    ours_e, theirs_e = encoder.encode(texts), theirs.encode(texts)
    assert encoder.get_embedding_dimension() == theirs.get_embedding_dimension()
    try:
        for name in ("cosine", "dot", "euclidean", "manhattan"):
            theirs.similarity_fn_name = encoder.similarity_fn_name = name
            got = encoder.similarity(ours_e, ours_e[::-1])
            assert isinstance(got, torch.Tensor)
            assert torch.allclose(got, theirs.similarity(theirs_e, theirs_e[::-1].copy()), rtol=1e-5, atol=2e-5)
    finally:
        encoder.similarity_fn_name = None
    for kwargs in ({"precision": "binary"}, {"precision": "ubinary"}, {"precision": "int8"},
                   {"truncate_dim": 32, "normalize_embeddings": True}):
        expected, got = theirs.encode(texts, **kwargs), encoder.encode(texts, **kwargs)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        # int8: a value on a bucket's edge may fall either side for embeddings 1e-7 apart.
        atol = 1 if kwargs.get("precision") == "int8" else 1e-5
        assert np.allclose(got.astype(np.float32), expected.astype(np.float32), atol=atol), kwargs
    long_text = " ".join(t for _, t in golden_rows()[:3])
    theirs.max_seq_length = 16
    with flowline.SentenceTransformer(MODEL, device="cpu") as ours:
        ours.max_seq_length = 16
        assert cosines(ours.encode([long_text]), theirs.encode([long_text])).min() >= 0.99999
    prompted = st.SentenceTransformer(str(PROMPTED), device="cpu")
    with flowline.SentenceTransformer(PROMPTED, device="cpu") as ours:
        assert ours.prompts == prompted.prompts
        for method in ("encode_query", "encode_document"):
            assert cosines(getattr(ours, method)(texts), getattr(prompted, method)(texts)).min() >= 0.99999
    cross = st.CrossEncoder(str(CROSS_ENCODER), device="cpu")
    pairs = [(texts[0][:40], t[:80]) for t in texts] + [(texts[1][:40], texts[2][:80])]
    with flowline.CrossEncoder(CROSS_ENCODER, device="cpu") as ours:
        assert np.allclose(ours.predict(pairs), cross.predict(pairs), atol=1e-5)
        identity = torch.nn.Identity()
        assert np.allclose(ours.predict(pairs, activation_fn=identity), cross.predict(pairs, activation_fn=identity),
                           atol=1e-5)
    # The pre-4.0 activation key (ms-marco's Identity): logits, as sentence-transformers 6 gives them.
    legacy = _cross_encoder_copy(tmp_path / "legacy",
                                 {"sbert_ce_default_activation_function": "torch.nn.modules.linear.Identity"})
    theirs_legacy = st.CrossEncoder(str(legacy), device="cpu")
    with flowline.CrossEncoder(legacy, device="cpu") as ours:
        assert np.allclose(ours.predict(pairs), theirs_legacy.predict(pairs), atol=1e-5)
        documents = [d for _, d in pairs]
        got, expected = ours.rank(pairs[0][0], documents), theirs_legacy.rank(pairs[0][0], documents)
        # The same scores (random weights put some within 1e-6 of each other, so ties may fall either way), best
        # first.
        expected_scores = {r["corpus_id"]: r["score"] for r in expected}
        assert np.allclose([r["score"] for r in got], [expected_scores[r["corpus_id"]] for r in got], atol=1e-5)
        assert all(a["score"] >= b["score"] for a, b in zip(got, got[1:]))
    nli = st.CrossEncoder(str(CLASSIFIER), device="cpu")
    with flowline.CrossEncoder(CLASSIFIER, device="cpu") as ours:
        for kwargs in ({}, {"apply_softmax": True}):
            assert np.allclose(ours.predict(pairs, **kwargs), nli.predict(pairs, **kwargs), atol=1e-5)


TINY_CLIP = CROSS_ENCODER.parent / "clip"


def png_bytes(pixels):
    """A PNG file of uint8 [H, W, 3] pixels (8-bit RGB, no filter), written here so the test needs no Pillow."""
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    h, w, _ = pixels.shape
    rows = b"".join(b"\0" + pixels[y].tobytes() for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def test_a_clip_folder_encodes_texts_and_images_as_sentence_transformers_clip():
    from safetensors.numpy import load_file

    goldens = load_file(str(TINY_CLIP) + ".goldens.safetensors")
    texts = [json.loads(line)["text"] for line in open(str(TINY_CLIP) + ".texts.jsonl", encoding="utf-8")]
    files = [json.loads(line)["file"] for line in open(str(TINY_CLIP) + ".images.jsonl", encoding="utf-8")]
    kept = [i for i, t in enumerate(texts) if t]  # flowline gives a text-less document no embedding
    with flowline.SentenceTransformer(TINY_CLIP, device="cpu") as model:
        assert model.get_embedding_dimension() == 24 and model.similarity_fn_name == "cosine"
        assert cosines(model.encode([texts[i] for i in kept]), goldens["text_embeds"][kept]).min() >= 0.9999
        # Image files' bytes: decoded as Pillow's convert("RGB"), then the checkpoint's processor (the goldens').
        blobs = [(SOURCE_DIR / f).read_bytes() for f in files]
        assert cosines(model.encode(blobs), goldens["file_embeds"]).min() >= 0.9999
        one = model.encode(blobs[0])
        assert one.shape == (24,) and np.array_equal(one, model.encode(blobs[:1])[0])
        # Pixels as numpy arrays embed as the same pixels' PNG; RGBA is composited onto white first, as
        # transformers 5's convert_to_rgb does; texts and images may share a call.
        rng = np.random.default_rng(7)
        rgb = rng.integers(0, 256, size=(30, 20, 3), dtype=np.uint8)
        alpha = rng.integers(0, 256, size=(30, 20, 1), dtype=np.uint8)
        over_white = np.round(alpha / 255 * rgb + (1 - alpha / 255) * 255).astype(np.uint8)
        mixed = model.encode([texts[0], rgb, png_bytes(rgb), np.concatenate([rgb, alpha], 2), png_bytes(over_white)])
        assert np.array_equal(mixed[1], mixed[2]) and np.array_equal(mixed[3], mixed[4])
        assert np.allclose(mixed[0], model.encode(texts[0]), atol=1e-6)
        with pytest.raises(TypeError, match=r"inputs\[1\]: expected a str \(a text\), a PIL image, a numpy array"):
            model.encode(["a text", 3.5])


def test_a_clip_folder_equals_sentence_transformers_live():
    st = pytest.importorskip("sentence_transformers")
    image = pytest.importorskip("PIL.Image")
    files = [json.loads(line)["file"] for line in open(str(TINY_CLIP) + ".images.jsonl", encoding="utf-8")]
    files += [str(p) for p in sorted((SOURCE_DIR / "tests/clip_encoder/data/images").iterdir())]
    pictures = [image.open(SOURCE_DIR / f) for f in files]  # RGBA, palette with transparency, CMYK, gray, ...
    texts = ["a photo of a cat", "two dogs playing in the snow", "x"]
    theirs = st.SentenceTransformer(str(TINY_CLIP), device="cpu")
    with flowline.SentenceTransformer(TINY_CLIP, device="cpu") as ours:
        assert cosines(ours.encode(texts), theirs.encode(texts)).min() >= 0.99999
        assert cosines(ours.encode(pictures), theirs.encode(pictures)).min() >= 0.99999
        arrays = [np.asarray(p.convert("RGBA")) for p in pictures[:4]]
        assert cosines(ours.encode(arrays), theirs.encode(arrays)).min() >= 0.99999
        assert ours.get_embedding_dimension() == theirs.get_embedding_dimension()


def test_setting_max_seq_length_cuts_texts_there_as_sentence_transformers_does():
    long_text = " ".join(t for _, t in golden_rows()[:3])  # far past 16 tokens
    flow_text = json.dumps({"executors": [{"name": "encoder", "uses": "SentenceEncoder", "device": "cpu",
                                           "with": {"model": str(MODEL), "max_seq_length": 16}}]})
    with flowline.Flow.from_yaml(flow_text, "cut.yml") as flow:
        (cut,) = flow.post("/encode", [long_text])
    with flowline.SentenceTransformer(MODEL, device="cpu") as model:
        assert model.max_seq_length == 256  # the checkpoint's sentence_bert_config.json
        whole = model.encode(long_text)
        model.max_seq_length = 16
        assert model.max_seq_length == 16
        assert np.array_equal(model.encode(long_text), cut.embedding) and not np.array_equal(cut.embedding, whole)
        with pytest.raises(flowline.FlowError, match="max_seq_length': 100000 is outside 2..512"):
            model.max_seq_length = 100000  # past the model's positions: refused, the encoder serves on
        assert model.max_seq_length == 16 and np.array_equal(model.encode(long_text), cut.embedding)
        with pytest.raises(ValueError, match="max_seq_length: expected an int of at least 2"):
            model.max_seq_length = "16"


def test_a_cross_encoders_max_length_cuts_pairs_there():
    pairs = [("who is it " * 30, "a long document " * 40), ("q", "d")]
    with flowline.CrossEncoder(CROSS_ENCODER, device="cpu", max_length=16) as cut:
        expected = cut.predict(pairs)
        assert cut.max_length == cut.max_seq_length == 16
    with flowline.CrossEncoder(CROSS_ENCODER, device="cpu") as model:
        assert model.max_length == 64  # the checkpoint's tokenizer_config.json model_max_length
        whole = model.predict(pairs)
        model.max_seq_length = 16
        got = model.predict(pairs)
        assert np.array_equal(got, expected) and got[0] != whole[0] and got[1] == whole[1]
        with pytest.raises(flowline.FlowError, match="max_seq_length': 3 is outside 5..64"):
            model.max_length = 3
        assert np.array_equal(model.predict(pairs), expected)  # refused: the cross-encoder serves on
