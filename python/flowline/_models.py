"""SentenceEncoder and Reranker: sentence-transformers' encode() and CrossEncoder.rank() over flowline.

Each object owns a started flowline.Flow of one real executor (SentenceEncoder or Reranker, the plugins
`flowline run` loads), so its embeddings and scores are the C++ flow's, bit for bit. Methods may be called
from several threads at once: the flow runs them side by side with the GIL released. close() (or the
context manager, or garbage collection) closes the flow.
"""

import json
import os

import numpy as np

from ._flowline import Flow

# The forward passes are the executor's batch_size (sorted by length within each request); a request
# holds this many texts, as flows/encode.yml's request_size.
_REQUEST_SIZE = 1024


def _model_path(model):
    model = os.fspath(model)
    return os.path.abspath(model) if os.path.exists(model) else model


def _one_executor_flow(uses, name, device, replicas, params):
    executor = {"name": name, "uses": uses, "device": device, "with": params}
    if replicas is not None:
        executor["replicas"] = replicas
    config = {"jtype": "Flow", "executors": [executor]}
    # JSON is YAML: the flow text is the config as JSON, anchored in the working directory.
    return Flow.from_yaml(json.dumps(config, indent=1), os.path.join(os.getcwd(), f"<flowline.{uses}>.yml"))


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"convert_to_tensor and convert_to_numpy=False return torch tensors: {e}") from e
    return torch


class _FlowOwner:
    _flow = None

    def close(self):
        """Closes the flow (waits for calls in flight). Idempotent."""
        if self._flow is not None:
            self._flow.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


class SentenceEncoder(_FlowOwner):
    """sentence-transformers' SentenceTransformer.encode() on flowline's SentenceEncoder executor.

    model: a sentence-transformers checkpoint folder (or ORG/NAME in the local Hugging Face cache).
    device: auto, cpu, cuda, cuda:N. dtype: None (fp32), fp16, bf16. replicas: None (auto: 8 per GPU, one
    on the CPU). batch_size: sequences per forward pass, None (auto: sized to the GPU's memory; 64 on the CPU).
    """

    def __init__(self, model, device="auto", dtype=None, replicas=None, batch_size=None):
        params = {"model": _model_path(model), "batch_size": "auto" if batch_size is None else int(batch_size)}
        if dtype is not None:
            params["dtype"] = str(dtype).replace("torch.", "")
        self._flow = _one_executor_flow("SentenceEncoder", "encoder", device,
                                        "auto" if replicas is None else int(replicas), params)

    def encode(self, sentences, batch_size=32, normalize_embeddings=False, convert_to_numpy=True,
               convert_to_tensor=False, prompt_name=None, prompt=None, show_progress_bar=False):
        """As sentence-transformers' encode: a str gives a 1-D embedding, a list an [N, D] array.

        Returns a float32 numpy array (convert_to_numpy), a torch tensor (convert_to_tensor, which wins), or
        a list of 1-D torch tensors (both False). The tensors share the numpy array's memory. prompt (a
        text) or prompt_name (one of the checkpoint's prompts) is put before every sentence. batch_size and
        show_progress_bar are accepted for compatibility: the forward passes are the executor's batch_size.
        """
        del batch_size, show_progress_bar
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        parameters = {}
        if prompt is not None:
            parameters["prompt"] = prompt
        elif prompt_name is not None:
            parameters["prompt_name"] = prompt_name
        matrix = self._flow._encode("/encode", texts, parameters or None, _REQUEST_SIZE) if texts else None
        if matrix is None:
            if convert_to_tensor:
                return _torch().tensor([])
            return np.array([]) if convert_to_numpy else []
        if normalize_embeddings:
            # torch.nn.functional.normalize's formula (x / max(||x||, 1e-12)), as sentence-transformers.
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix = matrix / np.maximum(norms, np.float32(1e-12))
        if convert_to_tensor:
            out = _torch().from_numpy(matrix)
            return out[0] if single else out
        if not convert_to_numpy:
            rows = list(_torch().from_numpy(matrix))
            return rows[0] if single else rows
        return matrix[0] if single else matrix


class Reranker(_FlowOwner):
    """sentence-transformers' CrossEncoder.rank() on flowline's Reranker executor (a one-label checkpoint)."""

    def __init__(self, model, device="auto", dtype=None, replicas=None, batch_size=None):
        params = {"model": _model_path(model)}
        if dtype is not None:
            params["dtype"] = str(dtype).replace("torch.", "")
        if batch_size is not None:
            params["batch_size"] = int(batch_size)
        self._flow = _one_executor_flow("Reranker", "reranker", device,
                                        "auto" if replicas is None else int(replicas), params)

    def rank(self, query, documents, top_k=None, return_documents=False):
        """The documents' scores for the query, best first: [{"corpus_id", "score"[, "text"]}], cut to top_k."""
        if not isinstance(query, str):
            raise TypeError(f"query: expected a str, not {type(query).__name__}")
        documents = list(documents)
        for i, d in enumerate(documents):
            if not isinstance(d, str):
                raise TypeError(f"documents[{i}]: expected a str, not {type(d).__name__}")
        if not documents:
            return []
        (answer,) = self._flow.post("/rerank", [{"text": query, "tags": {"documents": documents}}],
                                    {"top_n": 0 if top_k is None else int(top_k)})
        results = []
        for match in answer.matches:
            index = int(match.tags["index"])
            result = {"corpus_id": index, "score": match.scores["relevance_score"]}
            if return_documents:
                result["text"] = documents[index]
            results.append(result)
        return results
