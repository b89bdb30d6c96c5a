"""flowline.pipeline(): transformers' text-classification and token-classification pipelines, answer for answer.

Against the goldens scripts/make_tiny_models.py committed from transformers' own pipelines (every tiny
token classifier's entities for every strategy, windows and ignore_labels; the sequence classifier's scores),
and, where transformers imports (.venv-ref), against the live pipeline called the same way.
"""
import json

import numpy as np
import pytest
from safetensors.numpy import load_file

import flowline
from conftest import SOURCE_DIR

TINY = SOURCE_DIR / "tests/data/tiny-models"
TAGGERS = ["bert", "distilbert", "xlm-roberta", "roberta", "deberta", "mpnet", "modernbert", "qwen3"]
CLASSIFIER = TINY / "bert-sequence-classifier"


def same(expected, got, where="answer"):
    """Equal in shape, keys (in order), types and values; scores within 1e-4."""
    if isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), (where, expected, got)
        for i, (e, g) in enumerate(zip(expected, got)):
            same(e, g, f"{where}[{i}]")
    elif isinstance(expected, dict):
        assert isinstance(got, dict) and list(got) == list(expected), (where, expected, got)
        for k in expected:
            same(expected[k], got[k], f"{where}.{k}")
    elif isinstance(expected, (float, np.floating)):
        # transformers' entity scores are numpy float32, its label scores Python floats: the same types here
        # (a golden's score, read from JSON, is a float either way).
        kinds = (type(expected),) if isinstance(expected, np.floating) else (float, np.floating)
        assert isinstance(got, kinds) and abs(float(got) - float(expected)) <= 1e-4, (where, expected, got)
    else:
        assert got == expected and type(got) is type(expected), (where, expected, got)


def run_settings(run):
    """A golden run's name ("first", "simple+keep_o", "max+stride16") as the pipeline's keywords."""
    strategy, _, extra = run.partition("+")
    settings = {"aggregation_strategy": strategy}
    if extra == "keep_o":
        settings["ignore_labels"] = []
    elif extra.startswith("stride"):
        settings["stride"] = int(extra[len("stride"):])
    return settings


@pytest.mark.parametrize("name", TAGGERS)
def test_the_ner_pipeline_gives_transformers_entities_for_every_strategy(name):
    goldens = [json.loads(line) for line in open(TINY / f"{name}-token-classifier.entities.jsonl", encoding="utf-8")]
    runs = sorted({run for g in goldens for run in g["results"]})
    assert {"none", "simple", "first", "average", "max", "simple+keep_o", "simple+stride16"} <= set(runs)
    compared = 0
    with flowline.pipeline("ner", model=TINY / f"{name}-token-classifier", device="cpu") as tagger:
        for run in runs:
            texts = [g["text"] for g in goldens if run in g["results"]]
            expected = [g["results"][run] for g in goldens if run in g["results"]]
            got = tagger(texts, **run_settings(run))
            same(expected, got, f"{name} {run}")
            compared += sum(len(e) for e in expected)
        # One str gives its entities alone; transformers' default strategy is none (one entity a token).
        first = goldens[0]
        same(first["results"]["none"], tagger(first["text"]))
        assert all(isinstance(e["score"], np.float32) for e in tagger(first["text"]))
    assert compared > 100


def test_the_ner_pipeline_refuses_what_transformers_refuses():
    with flowline.pipeline("token-classification", model=TINY / "bert-token-classifier", device="cpu",
                           aggregation_strategy="simple") as tagger:
        with pytest.raises(ValueError, match='`stride` was provided .* `aggregation_strategy="none"`'):
            tagger("Alice", aggregation_strategy="none", stride=4)
        with pytest.raises(ValueError, match="aggregation_strategy: 'best' is not one of"):
            tagger("Alice", aggregation_strategy="best")
        with pytest.raises(ValueError, match="is_split_into_words are not supported"):
            tagger(["Alice", "ran"], is_split_into_words=True)
        with pytest.raises(TypeError, match=r"inputs\[1\]: expected a str, not int"):
            tagger(["Alice", 3])
        with pytest.raises(TypeError, match="inputs: expected a str or a list of str, not a dict"):
            tagger({"text": "Alice"})  # not its keys tagged as texts
        assert tagger([]) == [] and tagger("") == []
        with pytest.raises(TypeError, match="max_length: not a setting of flowline's token-classification pipeline"):
            tagger("Alice", max_length=8)
    # aggregation_strategy=None is transformers' "not given": the default (none), per token.
    with flowline.pipeline("ner", model=TINY / "bert-token-classifier", device="cpu",
                           aggregation_strategy=None) as tagger:
        assert all("entity" in e and "index" in e for e in tagger("Alice went to Paris", ignore_labels=[]))
    with pytest.raises(TypeError, match="padding: not a setting of flowline's text-classification pipeline"):
        flowline.pipeline("text-classification", model=CLASSIFIER, device="cpu", padding=True)
    with pytest.raises(ValueError, match="task 'summarization': flowline's pipeline\\(\\) runs"):
        flowline.pipeline("summarization", model=TINY / "bert-token-classifier")
    with pytest.raises(ValueError, match="model: a checkpoint folder"):
        flowline.pipeline("ner")
    with pytest.raises(ValueError, match="tokenizer: flowline reads the tokenizer of the model folder"):
        flowline.pipeline("ner", model=TINY / "bert-token-classifier", tokenizer=TINY / "roberta-token-classifier")


def classifier_goldens():
    rows = [json.loads(line) for line in open(str(CLASSIFIER) + ".texts.jsonl", encoding="utf-8")]
    tensors = load_file(str(CLASSIFIER) + ".texts.safetensors")
    labels = ["negative", "neutral", "positive"]  # config.json's id2label
    return rows, tensors, labels


def ranked(row, labels):
    order = sorted(range(len(labels)), key=lambda i: -row[i])  # stable: ties keep the label order
    return [{"label": labels[i], "score": float(row[i])} for i in order]


def test_the_text_classification_pipeline_answers_in_transformers_shapes():
    rows, tensors, labels = classifier_goldens()
    softmax, sigmoid = tensors["softmax"], tensors["sigmoid"]
    single = [i for i, r in enumerate(rows) if "text_pair" not in r]
    pairs = [i for i, r in enumerate(rows) if "text_pair" in r]
    assert len(single) >= 4 and pairs
    texts = [rows[i]["text"] for i in single]
    with flowline.pipeline("sentiment-analysis", model=CLASSIFIER, device="cpu") as classify:
        # No top_k anywhere: the best label alone, a str's answer inside a list (transformers' legacy shape).
        same([ranked(softmax[single[0]], labels)[0]], classify(texts[0]))
        same([ranked(softmax[i], labels)[0] for i in single], classify(texts))
        same([ranked(softmax[i], labels) for i in single], classify(texts, top_k=None))
        same(ranked(softmax[single[0]], labels)[:2], classify(texts[0], top_k=2))
        same(ranked(sigmoid[single[1]], labels)[:1], classify(texts[1], top_k=1, function_to_apply="sigmoid"))
        pair = {"text": rows[pairs[0]]["text"], "text_pair": rows[pairs[0]]["text_pair"]}
        same(ranked(softmax[pairs[0]], labels)[0], classify(pair))
        same([ranked(softmax[pairs[0]], labels)[0]], classify([pair]))
        same(classify(pair), classify([[[pair["text"], pair["text_pair"]]]])[0])  # the older pair form
        with pytest.raises(ValueError, match="if you are trying to send text pairs"):
            classify([[pair["text"], pair["text_pair"]]])
        with pytest.raises(ValueError, match="function_to_apply: 'relu' is not one of"):
            classify(texts[0], function_to_apply="relu")
        with pytest.raises(ValueError, match=r"inputs\[0\]: a pair is .* not keys \['pair'\]"):
            classify([{"text": "a", "pair": "b"}])
    # top_k given when the pipeline is made: lists, and a str's list inside another (transformers' quirk).
    with flowline.pipeline("text-classification", model=CLASSIFIER, device="cpu", top_k=None) as classify:
        same([ranked(softmax[single[0]], labels)], classify(texts[0]))
        same([ranked(softmax[i], labels) for i in single[:3]], classify(texts[:3]))


def test_the_pipelines_equal_transformers_live():
    transformers = pytest.importorskip("transformers")
    texts = [json.loads(line)["text"] for line in open(TINY / "bert-token-classifier.entities.jsonl", encoding="utf-8")]
    short = [t for t in texts if len(t) < 200]  # within the classifier's model_max_length (no truncation there)
    for name in ("bert", "xlm-roberta"):
        model = TINY / f"{name}-token-classifier"
        theirs = transformers.pipeline("ner", model=str(model), device="cpu")
        with flowline.pipeline("ner", model=model, device="cpu") as ours:
            for settings in ({}, {"aggregation_strategy": "first"}, {"aggregation_strategy": "max", "stride": 16}):
                same(theirs(texts, **settings), ours(texts, **settings), f"{name} {settings}")
    theirs = transformers.pipeline("text-classification", model=str(CLASSIFIER), device="cpu")
    with flowline.pipeline("text-classification", model=CLASSIFIER, device="cpu") as ours:
        for settings in ({}, {"top_k": None}, {"top_k": 1}, {"function_to_apply": "none", "top_k": 2}):
            for inputs in (short[0], short[:4], {"text": short[0], "text_pair": short[1]}):
                same(theirs(inputs, **settings), ours(inputs, **settings), f"{settings} {inputs!r:.40}")


@pytest.mark.parametrize("kind", ["clip", "siglip"])
def test_zero_shot_image_classification_scores_labels_as_the_model_does(kind):
    goldens = load_file(str(TINY / f"{kind}.goldens.safetensors"))
    texts = [json.loads(line)["text"] for line in open(TINY / f"{kind}.texts.jsonl", encoding="utf-8")]
    files = [json.loads(line)["file"] for line in open(TINY / f"{kind}.images.jsonl", encoding="utf-8")]
    # The goldens' image embeddings are of the stored pixels (Image.open); the pipeline turns an image upright by
    # its EXIF orientation first, as load_image does (the next test), so the EXIF-rotated file is left out here.
    images = [k for k, f in enumerate(files) if "exif_rotated" not in f]
    assert len(images) == len(files) - 1
    kept = [i for i, t in enumerate(texts) if t][:6]
    labels = [texts[i] for i in kept]
    unit = goldens["text_embeds"][kept].astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    with flowline.pipeline("zero-shot-image-classification", model=TINY / kind, device="cpu") as classify:
        answers = classify([(SOURCE_DIR / files[k]).read_bytes() for k in images], candidate_labels=labels,
                           hypothesis_template="{}")
        assert len(answers) == len(images)
        for k, answer in zip(images, answers):
            image = goldens["file_embeds"][k].astype(np.float64)
            logits = unit @ (image / np.linalg.norm(image)) * float(goldens["logit_scale"][0])
            if kind == "siglip":  # sigmoid of each label's logit, with the bias
                probs = 1 / (1 + np.exp(-(logits + float(goldens["logit_bias"][0]))))
            else:  # softmax over the labels
                probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
            expected = [{"score": float(p), "label": label}
                        for p, label in sorted(zip(probs, labels), key=lambda x: -x[0])]
            same(expected, answer, f"{files[k]}")
        one = classify(images=(SOURCE_DIR / files[0]).read_bytes(), candidate_labels=labels, hypothesis_template="{}")
        same(answers[0], one)
        templated = classify((SOURCE_DIR / files[0]).read_bytes(), candidate_labels=["cat", "dog"])
        assert sorted(a["label"] for a in templated) == ["cat", "dog"]  # "This is a photo of {}." around each
        with pytest.raises(ValueError, match="candidate_labels: give the labels"):
            classify((SOURCE_DIR / files[0]).read_bytes())
        with pytest.raises(TypeError, match=r"image\[1\]: expected a path, URL, PIL image"):
            classify([(SOURCE_DIR / files[0]).read_bytes(), 3], candidate_labels=labels)


def test_zero_shot_image_classification_equals_transformers_live():
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("PIL")
    files = [str(SOURCE_DIR / json.loads(line)["file"]) for line in open(TINY / "clip.images.jsonl", encoding="utf-8")]
    labels = ["cat", "dog", "red square", "gradient", "snow"]
    for kind in ("clip", "siglip"):
        theirs = transformers.pipeline("zero-shot-image-classification", model=str(TINY / kind), device="cpu")
        with flowline.pipeline("zero-shot-image-classification", model=TINY / kind, device="cpu") as ours:
            expected, got = theirs(files, candidate_labels=labels), ours(files, candidate_labels=labels)
            for e, g in zip(expected, got):
                # The same labels in the same order; scores within 2e-3: transformers' processor resizes with
                # Pillow, flowline's on the device (pixels within 1/255), and the logit scale magnifies it.
                assert [x["label"] for x in g] == [x["label"] for x in e]
                assert max(abs(x["score"] - y["score"]) for x, y in zip(e, g)) < 2e-3


def test_zero_shot_image_classification_turns_image_bytes_upright_as_load_image_does():
    folder = SOURCE_DIR / "tests/data/images/orientation"
    manifest = json.loads((folder / "manifest.json").read_text())
    labels = ["a photo of a cat", "two dogs playing in the snow", "x"]
    with flowline.pipeline("zero-shot-image-classification", model=TINY / "clip", device="cpu") as classify:
        for entry in manifest:
            upright = np.frombuffer((folder / entry["golden"]).read_bytes(), np.uint8).reshape(
                entry["height"], entry["width"], 3)
            got = classify((folder / entry["file"]).read_bytes(), candidate_labels=labels, hypothesis_template="{}")
            same(classify(upright, candidate_labels=labels, hypothesis_template="{}"), got, entry["file"])
