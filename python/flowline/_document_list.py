"""DocumentList: what flowline.Flow.post returns — a list of flowline.Document with docarray's bulk accessors.

A Jina user reads a whole answer at once: docarray < 0.30's DocumentArray gives `da.embeddings` and `da.tensors`
as one stacked array and `da.texts` as a list; docarray 0.30+'s DocList gives each field as a list
(`docs.text`, `docs.embedding`). Both spellings work here; everything else is a plain Python list.
"""

import numpy as np


class DocumentList(list):
    """A list of flowline.Document (Flow.post's answer), with docarray's bulk accessors."""

    def _column(self, field):
        return [getattr(d, field) for d in self]

    def _stacked(self, field):
        values = self._column(field)
        missing = [i for i, v in enumerate(values) if v is None]
        if missing:
            raise ValueError(f"{field}s: document {missing[0]} ({self[missing[0]].id!r}) has no {field}"
                             + (f", nor {len(missing) - 1} more" if len(missing) > 1 else ""))
        if not values:
            return np.zeros((0,), np.float32)
        try:
            return np.stack(values)
        except ValueError as e:  # shapes differ
            raise ValueError(f"{field}s: the documents' {field}s have different shapes ({e})") from None

    @property
    def embeddings(self):
        """Every document's embedding stacked, [N, D] (docarray < 0.30's da.embeddings)."""
        return self._stacked("embedding")

    @property
    def tensors(self):
        """Every document's tensor stacked, [N, ...] (docarray < 0.30's da.tensors)."""
        return self._stacked("tensor")

    @property
    def texts(self):
        """Every document's text (docarray < 0.30's da.texts)."""
        return self._column("text")

    @property
    def ids(self):
        return self._column("id")

    # docarray 0.30+'s DocList: a field's values as a list, None where a document has none.
    id = ids
    text = texts

    @property
    def embedding(self):
        return self._column("embedding")

    @property
    def tensor(self):
        return self._column("tensor")
