"""Reranker: sentence-transformers' CrossEncoder (predict, rank) over flowline's cross-encoder executors.

A checkpoint of one label runs on the Reranker executor, one of several labels on the SequenceClassifier; the
scores' activation is resolved as sentence-transformers 6 resolves it (_default_activation). Methods may be
called from several threads at once; close() (or the context manager, or garbage collection) closes the flow.
`CrossEncoder` is the same class under sentence-transformers' name.
"""

import math
import os
import warnings

import numpy as np

from ._flowline import _locate_model
from ._models import (_REQUEST_SIZE, _dtype_param, _FlowOwner, _inputs, _model_path, _only_default, _read_json,
                      _torch)


def _is_pair(x):
    return isinstance(x, (list, tuple)) and len(x) == 2 and all(isinstance(t, str) for t in x)


_ACTIVATIONS = {  # numpy forms of the torch.nn activations a CrossEncoder's config may name
    "Identity": lambda x: x,
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Tanh": np.tanh,
    "ReLU": lambda x: np.maximum(x, 0),
    "GELU": np.vectorize(lambda v: 0.5 * v * (1 + math.erf(v / math.sqrt(2))), otypes=[np.float32]),
}


def _activation_name(path, where):
    """The class name of a torch.nn activation path ("torch.nn.Sigmoid", "torch.nn.modules.activation.Sigmoid");
    None for a path outside torch, which sentence-transformers ignores (with a warning) without trust_remote_code."""
    if not isinstance(path, str):
        raise ValueError(f"{where}: activation_fn: expected a dotted path (str), not {path!r}")
    if not path.startswith("torch."):
        warnings.warn(f"{where}: activation function path {path!r} is not trusted; the default is used instead, as "
                      "sentence-transformers does without trust_remote_code", stacklevel=3)
        return None
    name = path.rsplit(".", 1)[-1]
    if not path.startswith("torch.nn.") or name not in _ACTIVATIONS:
        raise ValueError(f"{where}: activation_fn {path!r} is not supported ({', '.join(_ACTIVATIONS)} of torch.nn)")
    return name


def _default_activation(folder, config, labels):
    """The activation sentence-transformers 6's CrossEncoder applies by default, by class name: the
    config_sentence_transformers.json's activation_fn, else config.json's sentence_transformers.activation_fn,
    else its pre-4.0 key sbert_ce_default_activation_function, else Sigmoid for one label and Identity for several."""
    saved = {} if folder is None else _read_json(folder, "config_sentence_transformers.json")
    st = config.get("sentence_transformers") if isinstance(config.get("sentence_transformers"), dict) else {}
    for path, where in ((saved.get("activation_fn"), "config_sentence_transformers.json"),
                        (st.get("activation_fn"), "config.json's sentence_transformers"),
                        (config.get("sbert_ce_default_activation_function"),
                         "config.json's sbert_ce_default_activation_function")):
        if path is not None:
            name = _activation_name(path, where)
            if name is not None:
                return name
    return "Sigmoid" if labels == 1 else "Identity"


class Reranker(_FlowOwner):
    """sentence-transformers' CrossEncoder (predict and rank) on flowline's cross-encoder executors.

    A checkpoint of one label runs on the Reranker executor, one of several labels (an NLI model) on the
    SequenceClassifier. Scores get the activation CrossEncoder gives them: activation_fn (a callable on torch
    tensors), else the checkpoint's as sentence-transformers 6 reads it (config_sentence_transformers.json, then
    config.json's sentence_transformers and its pre-4.0 sbert_ce_default_activation_function — the ms-marco
    cross-encoders name Identity there, so their scores are logits), else sigmoid for one label and none for
    several. max_length: tokens of a pair (default: the checkpoint's).
    """

    def __init__(self, model, device="auto", dtype=None, replicas=None, batch_size=None, max_length=None,
                 activation_fn=None):
        folder, problem = _locate_model(os.fspath(model))
        # No config.json to read (a missing folder, a name not in the cache): the Reranker's validation says why.
        config = {} if problem else _read_json(folder, "config.json")
        labels = config.get("id2label")
        if isinstance(labels, dict) and labels:
            self._labels = [labels[k] for k in sorted(labels, key=lambda k: int(k))]
        else:
            count = config.get("num_labels", 2 if config else 1)  # transformers' default is two labels
            self._labels = [f"LABEL_{i}" for i in range(int(count))]
        self.num_labels = len(self._labels)
        params = {"model": _model_path(model)}
        if dtype is not None:
            params["dtype"] = _dtype_param(dtype)
        if batch_size is not None:
            params["batch_size"] = int(batch_size)
        if max_length is not None:
            params["max_seq_length"] = int(max_length)
        if activation_fn is not None and not callable(activation_fn):
            raise TypeError(f"activation_fn: expected a callable (e.g. torch.nn.Sigmoid()), not {activation_fn!r}")
        self.activation_fn = activation_fn
        self._default = _default_activation(None if problem else folder, config, self.num_labels)
        # What the Reranker executor applies itself (checkpoint.cpp): config.json's sentence_transformers
        # activation_fn, else sigmoid. Its scores are used as they come when that is the activation wanted.
        st = config.get("sentence_transformers") if isinstance(config.get("sentence_transformers"), dict) else {}
        own = st.get("activation_fn")
        self._executor_activation = own.rsplit(".", 1)[-1] if isinstance(own, str) else "Sigmoid"
        uses, name = ("Reranker", "reranker") if self.num_labels == 1 else ("SequenceClassifier", "classifier")
        self._start_flow(uses, name, device, "auto" if replicas is None else int(replicas), params)

    @property
    def max_length(self):
        """Tokens a (query, document) pair is cut to: max_length given, else the checkpoint's."""
        return self._metric("max_seq_length")

    @max_length.setter
    def max_length(self, value):
        # As CrossEncoder's attribute; the executor takes it at start, so it starts again with it (set it before
        # predicting, not during).
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"max_length: expected a positive int, not {value!r}")
        self._restart_with(max_seq_length=value)

    max_seq_length = max_length  # sentence-transformers 6's name

    def _executor_scores(self, activation_fn):
        """Whether the Reranker executor's own scores are the ones wanted: one label, no callable given, and the
        checkpoint's default activation the one the executor applies (then they are the C++ flow's, as they
        come)."""
        return activation_fn is None and self.num_labels == 1 and self._default == self._executor_activation

    def _logits_or_scores(self, pairs, raw):
        """[len(pairs)] scores (one label; logits when raw) or [len(pairs), labels] logits, float32."""
        if self.num_labels != 1:
            docs = [{"text": q, "tags": {"text_pair": d}} for q, d in pairs]
            answers = self._flow.post("/classify", docs, {"top_k": 0, "raw_scores": True}, _REQUEST_SIZE)
            return np.array([[a.scores[label] for label in self._labels] for a in answers], np.float32)
        # One request document per query, its candidates in tags.documents: each query is tokenized once.
        groups = {}
        for i, (q, d) in enumerate(pairs):
            groups.setdefault(q, []).append((i, d))
        queries = list(groups)
        docs = [{"text": q, "tags": {"documents": [d for _, d in groups[q]]}} for q in queries]
        answers = self._flow.post("/rerank", docs, {"top_n": 0, "raw_scores": bool(raw)}, _REQUEST_SIZE)
        out = np.empty(len(pairs), np.float32)
        for q, answer in zip(queries, answers):
            for match in answer.matches:
                out[groups[q][int(match.tags["index"])][0]] = match.scores["relevance_score"]
        return out

    def predict(self, inputs=None, prompt_name=None, prompt=None, batch_size=32, show_progress_bar=None,
                activation_fn=None, apply_softmax=False, convert_to_numpy=True, convert_to_tensor=False,
                device=None, *, sentences=None):
        """As CrossEncoder.predict: scores of (query, document) pairs, [N] for one label, [N, labels] else.

        One pair gives its score alone. activation_fn (a callable on torch tensors) replaces the model's
        activation (the constructor's activation_fn, else the checkpoint's); apply_softmax (several labels) makes
        each row sum to 1. batch_size and show_progress_bar are accepted for compatibility (the passes are the
        executor's batch_size).
        """
        del batch_size, show_progress_bar
        inputs = _inputs("predict", inputs, sentences, "the pairs")
        _only_default("prompt", prompt, None, "flowline's cross-encoders take no prompts")
        _only_default("prompt_name", prompt_name, None, "flowline's cross-encoders take no prompts")
        _only_default("device", device, None, "the device is the cross-encoder's, chosen when it was made")
        if isinstance(inputs, np.ndarray):
            inputs = inputs.tolist()
        single = _is_pair(inputs)
        pairs = [inputs] if single else list(inputs)
        for i, p in enumerate(pairs):
            if not _is_pair(p):
                raise TypeError(f"inputs[{i}]: expected a pair of str (query, document), not {p!r:.80}")
        if not pairs:
            scores = np.array([])
        else:
            fn = activation_fn if activation_fn is not None else self.activation_fn
            own = self._executor_scores(fn)
            scores = self._logits_or_scores(pairs, raw=not own)
            if fn is not None:
                scores = np.asarray(fn(_torch().from_numpy(scores)), np.float32)
            elif not own:
                scores = _ACTIVATIONS[self._default](scores).astype(np.float32, copy=False)
            if apply_softmax and scores.ndim > 1:
                e = np.exp(scores - scores.max(axis=1, keepdims=True))
                scores = e / e.sum(axis=1, keepdims=True)
        if convert_to_tensor:
            out = _torch().from_numpy(np.ascontiguousarray(scores))
        elif convert_to_numpy:
            out = scores
        else:
            out = list(_torch().from_numpy(np.ascontiguousarray(scores)))
        return out[0] if single else out

    def rank(self, query, documents, top_k=None, return_documents=False, prompt_name=None, prompt=None,
             batch_size=32, show_progress_bar=None, activation_fn=None):
        """The documents' scores for the query, best first: [{"corpus_id", "score"[, "text"]}], cut to top_k."""
        del batch_size, show_progress_bar
        if self.num_labels != 1:
            raise ValueError("CrossEncoder.rank() only works for models with num_labels=1. "
                             "Consider using CrossEncoder.predict() with input pairs instead.")
        _only_default("prompt", prompt, None, "flowline's cross-encoders take no prompts")
        _only_default("prompt_name", prompt_name, None, "flowline's cross-encoders take no prompts")
        if not isinstance(query, str):
            raise TypeError(f"query: expected a str, not {type(query).__name__}")
        documents = list(documents)
        for i, d in enumerate(documents):
            if not isinstance(d, str):
                raise TypeError(f"documents[{i}]: expected a str, not {type(d).__name__}")
        if not documents:
            return []
        if not self._executor_scores(activation_fn if activation_fn is not None else self.activation_fn):
            # Scored here (another activation than the executor's): sorted as sentence-transformers sorts, stably.
            scores = self.predict([(query, d) for d in documents], activation_fn=activation_fn).tolist()
            matches = sorted(enumerate(scores), key=lambda m: m[1], reverse=True)
        else:
            top_n = top_k if isinstance(top_k, int) and top_k > 0 else 0  # the executor cuts; Python slices below
            (answer,) = self._flow.post("/rerank", [{"text": query, "tags": {"documents": documents}}],
                                        {"top_n": top_n})
            matches = [(int(m.tags["index"]), m.scores["relevance_score"]) for m in answer.matches]
        results = []
        for index, score in matches:
            result = {"corpus_id": index, "score": score}
            if return_documents:
                result["text"] = documents[index]
            results.append(result)
        return results[:top_k]


CrossEncoder = Reranker
