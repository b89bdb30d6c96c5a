"""Shared set-up of the Python package's tests (tests/python, run by ctest as python_package).

Where things are comes from the environment ctest sets (FLOWLINE_LAUNCHER, FLOWLINE_SOURCE_DIR; PYTHONPATH
names build/python), with the build tree's defaults when pytest runs by hand from the repository root:
    PYTHONPATH=build/python .venv/bin/python -m pytest tests/python
"""
import json
import os
import pathlib

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("FLOWLINE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
LAUNCHER = pathlib.Path(os.environ.get("FLOWLINE_LAUNCHER", SOURCE_DIR / "build/src/flowline"))
MODEL = SOURCE_DIR / "models/all-MiniLM-L6-v2"
CROSS_ENCODER = SOURCE_DIR / "tests/data/tiny-models/bert-cross-encoder"
GOLDENS = SOURCE_DIR / "tests/data/goldens"


def golden_rows():
    """(row, text) of sentence-transformers' goldens this suite encodes: 24 corpus paragraphs and the hard
    cases (the goldens' own "" is left out: flowline gives a text-less document no embedding)."""
    texts = [json.loads(line)["text"] for line in open(GOLDENS / "embedding_texts.jsonl", encoding="utf-8")]
    rows = list(range(24)) + list(range(501, len(texts)))
    return [(i, texts[i]) for i in rows if texts[i]]


def encoder_flow_text(request_size=1024):
    """One SentenceEncoder on the CPU, as JSON (which is YAML)."""
    return json.dumps({"jtype": "Flow", "with": {"request_size": request_size},
                       "executors": [{"name": "encoder", "uses": "SentenceEncoder", "device": "cpu",
                                      "with": {"model": str(MODEL)}}]})


@pytest.fixture(scope="session")
def encoder():
    import flowline

    with flowline.SentenceEncoder(MODEL, device="cpu") as e:
        yield e
