# A Jina 3 executor written for Jina (docarray v2), not for flowline: tests/python/test_python_workers.py runs
# it unchanged in a flowline flow. Nothing here may import flowline.
from typing import Optional

import numpy as np
from docarray import BaseDoc, DocList
from docarray.typing import NdArray
from jina import Executor, requests


class Passage(BaseDoc):
    text: str = ""
    embedding: Optional[NdArray] = None
    length: int = 0


class LengthEmbedder(Executor):
    """Counts characters and embeds each text as [length, vowels, scale]."""

    def __init__(self, scale: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale

    @requests(on="/embed")
    def embed(self, docs: DocList[Passage], parameters: dict, **kwargs) -> DocList[Passage]:
        for doc in docs:
            doc.length = len(doc.text)
            vowels = sum(ch in "aeiou" for ch in doc.text)
            doc.embedding = np.array([len(doc.text), vowels, self.scale * parameters.get("factor", 1)],
                                     dtype=np.float32)
        return docs

    @requests
    def shout(self, docs: DocList[Passage], **kwargs) -> DocList[Passage]:
        return DocList[Passage]([Passage(id=d.id, text=d.text.upper()) for d in docs])
