"""SentenceEncoder: sentence-transformers' SentenceTransformer over flowline, and what the other Python models
(_cross_encoder.py's Reranker, _pipelines.py's pipelines) share: _FlowOwner and the argument helpers.

Each object owns a started flowline.Flow of one real executor (SentenceEncoder or ClipEncoder; Reranker or
SequenceClassifier for a cross-encoder: the plugins `flowline run` loads), so its embeddings and scores are the
C++ flow's, bit for bit. What sentence-transformers does around the model in Python
(prompts by name, Matryoshka truncation, normalization, quantization, similarity, activations) is done
here as sentence-transformers 6 does it. Methods may be called from several threads at once: the flow runs
them side by side with the GIL released. close() (or the context manager, or garbage collection) closes
the flow. `SentenceTransformer` and `CrossEncoder` are the same classes under sentence-transformers' names.
"""

import contextlib
import functools
import json
import numbers
import os

import numpy as np

from ._flowline import Flow, _locate_model

# The forward passes are the executor's batch_size (sorted by length within each request); a request
# holds this many texts, as flows/encode.yml's request_size.
_REQUEST_SIZE = 1024

_SIMILARITY_FUNCTIONS = ("cosine", "dot", "euclidean", "manhattan")
_PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")


def _model_path(model):
    model = os.fspath(model)
    return os.path.abspath(model) if os.path.exists(model) else model


def _read_json(folder, name):
    """A JSON object of the checkpoint folder; {} when the file is not there."""
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"'{path}': {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"'{path}': expected a JSON object")
    return value


def _is_two_tower(folder):
    """A CLIP or SigLIP checkpoint: Hugging Face's folder, or sentence-transformers' CLIP layout (modules.json)."""
    if _read_json(folder, "config.json").get("model_type") in ("clip", "siglip"):
        return True
    try:
        with open(os.path.join(folder, "modules.json"), encoding="utf-8") as f:
            modules = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(modules, list) and any(isinstance(m, dict) and str(m.get("type", "")).endswith(".CLIPModel")
                                             for m in modules)


def _is_image(x):
    """What sentence-transformers' CLIP takes as an image: a PIL image or a numpy array of pixels (and here an
    image file's bytes too). A numpy array of str or objects is a batch of inputs, as sentence-transformers 6's
    is_singular_input says, not an image."""
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "biuf"
    return (hasattr(x, "getbands") and hasattr(x, "convert")) or isinstance(x, (bytes, bytearray))


def _image_document(x):
    """A document of the image: its pixels as transformers 5's image processors see a PIL image or an array
    (convert_to_rgb: transparency composited onto white), an image file's bytes as the executor decodes them."""
    from ._flowline import Document

    if isinstance(x, (bytes, bytearray)):
        d = Document()
        d.blob = bytes(x)
        return d
    if not isinstance(x, np.ndarray):  # a PIL image
        if "A" in x.getbands() or x.info.get("transparency") is not None:
            from PIL import Image

            rgba = x.convert("RGBA")
            x = Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba)
        x = np.asarray(x.convert("RGB"))
    elif x.ndim == 3 and x.shape[-1] == 4 and np.issubdtype(x.dtype, np.integer):
        alpha = x[..., 3:4] / 255
        x = np.round(alpha * x[..., :3] + (1 - alpha) * 255).astype(x.dtype)
    return Document(tensor=x)


def _dtype_param(dtype):
    return str(dtype).replace("torch.", "")


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


@functools.lru_cache(maxsize=1)
def _torch_or_none():
    # Tried once: on the light install a failed `import torch` costs milliseconds each time.
    try:
        import torch
    except ImportError:
        return None
    return torch


def _matrix(embeddings, name):
    """embeddings (a numpy array, a torch tensor, or a list of 1-D ones) as a float32 [N, D] numpy array."""
    def host(x):  # a torch tensor, on any device and in any dtype, as numpy
        return x.detach().float().cpu().numpy() if hasattr(x, "detach") else x

    if isinstance(embeddings, (list, tuple)):
        embeddings = [host(e) for e in embeddings] if embeddings else np.zeros((0, 0), np.float32)
    try:
        a = np.asarray(host(embeddings))
    except ValueError as e:  # rows of different lengths
        raise ValueError(f"{name}: {e}") from None
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name}: expected numbers (a numpy array or a torch tensor), not {a.dtype}")
    if a.ndim == 1:
        a = a[np.newaxis, :]
    if a.ndim != 2:
        raise ValueError(f"{name}: expected [embedding_dim] or [N, embedding_dim], not shape {list(a.shape)}")
    return a.astype(np.float32, copy=False)


def _normalized(a):
    # torch.nn.functional.normalize's formula (x / max(||x||, 1e-12)), as sentence-transformers.
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), np.float32(1e-12))


def _similarity(name, a, b, pairwise):
    if pairwise and a.shape != b.shape:
        raise ValueError(f"similarity_pairwise: shapes {list(a.shape)} and {list(b.shape)} differ")
    if not pairwise and a.shape[1] != b.shape[1]:
        raise ValueError(f"similarity: embedding sizes {a.shape[1]} and {b.shape[1]} differ")
    if name == "cosine":
        a, b = _normalized(a), _normalized(b)
    if name in ("cosine", "dot"):
        return (a * b).sum(axis=1) if pairwise else a @ b.T
    p = 1 if name == "manhattan" else 2
    if pairwise:
        return -np.linalg.norm(a - b, ord=p, axis=-1).astype(np.float32)
    if p == 2:  # ||a||^2 + ||b||^2 - 2ab in float64 (as torch.cdist's matrix form): memory [N1, N2], not [N1, N2, D]
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        squared = (a64 * a64).sum(1)[:, np.newaxis] + (b64 * b64).sum(1)[np.newaxis, :] - 2 * (a64 @ b64.T)
        return -np.sqrt(np.maximum(squared, 0)).astype(np.float32)
    out = np.empty((len(a), len(b)), np.float32)
    rows = max(1, (1 << 24) // max(1, len(b) * a.shape[1]))  # at most ~64 MiB of differences at once
    for first in range(0, len(a), rows):
        diff = a[first:first + rows, np.newaxis, :] - b[np.newaxis, :, :]
        out[first:first + rows] = -np.abs(diff).sum(axis=-1)
    return out


def _as_torch_if_it_imports(a):
    # sentence-transformers answers torch tensors; on flowline's light install (no importable torch), numpy.
    torch = _torch_or_none()
    return torch.from_numpy(np.ascontiguousarray(a)) if torch is not None else a


def _quantized(matrix, precision):
    """sentence-transformers' quantize_embeddings, ranges from the embeddings themselves (as its encode does)."""
    if precision == "float32":
        return matrix
    if precision in ("int8", "uint8"):
        if len(matrix) < 2:
            raise ValueError(f"precision {precision!r}: the ranges of each dimension are computed from the "
                             "embeddings of the call, which needs at least two texts")
        starts = matrix.min(axis=0)
        steps = (matrix.max(axis=0) - starts) / 255
        steps = np.where(steps == 0, 1, steps)
        q = np.clip(np.floor((matrix - starts) / steps), 0, 255)
        return q.astype(np.uint8) if precision == "uint8" else (q - 128).astype(np.int8)
    packed = np.packbits(matrix > 0, axis=-1)
    return packed if precision == "ubinary" else (packed - 128).astype(np.int8)


class _FlowOwner:
    _flow = None
    _start = None  # (uses, name, device, replicas, params): the one-executor flow this object started

    def _start_flow(self, uses, name, device, replicas, params):
        self._start = (uses, name, device, replicas, params)
        self._flow = _one_executor_flow(*self._start)

    def _restart_with(self, **changed):
        """The executor takes these parameters at start: a new flow with them replaces the old one, which is closed
        (a parameter it refuses raises and leaves the old flow serving). Not while other threads call the flow."""
        if self._flow is None or self._flow.closed:
            raise ValueError(f"{', '.join(changed)}: this {type(self).__name__} is closed")
        uses, name, device, replicas, params = self._start
        params = {**params, **changed}
        flow, self._flow = self._flow, _one_executor_flow(uses, name, device, replicas, params)
        self._start = (uses, name, device, replicas, params)
        flow.close()

    def _metric(self, name):
        """An executor metric its first replica set at start (embedding_dimension, max_seq_length)."""
        return int(self._flow.stats()["replicas"][0]["metrics"][name])

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


def _dimensions(value, name):
    """A positive whole number (a Python or numpy int; not a bool) as an int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}: expected a positive int or None, not {value!r}")
    return int(value)


def _inputs(method, inputs, sentences, what):
    """`inputs`, or `sentences` (sentence-transformers 5's name of it); not both, not neither."""
    if sentences is not None:
        if inputs is not None:
            raise TypeError(f"{method}: give inputs or sentences (its older name), not both")
        inputs = sentences
    if inputs is None:
        raise TypeError(f"{method}: missing {what} (inputs)")
    return inputs


def _only_default(name, value, default, why):
    if value != default:
        raise ValueError(f"{name}={value!r}: {why}")


class SentenceEncoder(_FlowOwner):
    """sentence-transformers' SentenceTransformer on flowline's SentenceEncoder executor.

    model: a sentence-transformers checkpoint folder (or ORG/NAME in the local Hugging Face cache); a CLIP or
    SigLIP folder runs on the ClipEncoder executor and encodes texts and images (PIL images, numpy pixel
    arrays, image files' bytes), as sentence-transformers' CLIP does. device: auto, cpu, cuda, cuda:N.
    dtype: None (fp32), fp16, bf16. replicas: None (auto: 8 per GPU, one on the CPU). batch_size: sequences
    per forward pass, None (auto: sized to the GPU's memory; 64 on the CPU).
    truncate_dim, similarity_fn_name, prompts and default_prompt_name as sentence-transformers takes them
    (the checkpoint's config_sentence_transformers.json gives the defaults).
    """

    def __init__(self, model, device="auto", dtype=None, replicas=None, batch_size=None, truncate_dim=None,
                 similarity_fn_name=None, prompts=None, default_prompt_name=None):
        params = {"model": _model_path(model), "batch_size": "auto" if batch_size is None else int(batch_size)}
        if dtype is not None:
            params["dtype"] = _dtype_param(dtype)
        folder, problem = _locate_model(os.fspath(model))
        self._clip = not problem and _is_two_tower(folder)  # a missing model: the flow says so below
        saved = {} if problem else _read_json(folder, "config_sentence_transformers.json")
        # As sentence-transformers 6: "query" and "document" are always prompts ("" unless given), then the
        # checkpoint's, then the caller's.
        self.prompts = {"query": "", "document": ""}
        for source, where in ((saved.get("prompts"), "config_sentence_transformers.json"), (prompts, "prompts")):
            if source is None:
                continue
            if not isinstance(source, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                       for k, v in source.items()):
                raise TypeError(f"{where}: expected a dict of str to str")
            self.prompts.update(source)
        self.default_prompt_name = (default_prompt_name if default_prompt_name is not None
                                    else saved.get("default_prompt_name"))
        if self.default_prompt_name is not None and self.default_prompt_name not in self.prompts:
            raise ValueError(f"Default prompt name '{self.default_prompt_name}' not found in the configured prompts "
                             f"dictionary with keys {list(self.prompts)!r}.")
        self.truncate_dim = None if truncate_dim is None else _dimensions(truncate_dim, "truncate_dim")
        self._similarity_fn_name = None
        self.similarity_fn_name = similarity_fn_name if similarity_fn_name is not None else \
            saved.get("similarity_fn_name")
        self._dimension = None
        # Started last: a bad argument above is refused before any model is loaded.
        self._start_flow("ClipEncoder" if self._clip else "SentenceEncoder", "encoder", device,
                         "auto" if replicas is None else int(replicas), params)

    @property
    def max_seq_length(self):
        """Tokens a text is cut to (the checkpoint's, e.g. sentence_bert_config.json's, unless set)."""
        return self._metric("max_seq_length")

    @max_seq_length.setter
    def max_seq_length(self, value):
        # As sentence-transformers' attribute: later encodes cut texts there. The executor takes it at start, so
        # the encoder starts again with it (its flow replaced; set it before encoding, not during).
        if self._clip:
            raise ValueError("max_seq_length: a CLIP or SigLIP text is cut at its text tower's positions")
        if not isinstance(value, int) or isinstance(value, bool) or value < 2:
            raise ValueError(f"max_seq_length: expected an int of at least 2, not {value!r}")
        self._restart_with(max_seq_length=value)

    @property
    def similarity_fn_name(self):
        """cosine, dot, euclidean or manhattan: what similarity() computes (the checkpoint's, else cosine)."""
        return self._similarity_fn_name or "cosine"

    @similarity_fn_name.setter
    def similarity_fn_name(self, value):
        value = getattr(value, "value", value)  # sentence-transformers' SimilarityFunction enum
        if value is not None and value not in _SIMILARITY_FUNCTIONS:
            raise ValueError(f"similarity_fn_name: {value!r} is not one of {', '.join(_SIMILARITY_FUNCTIONS)}")
        self._similarity_fn_name = value

    def _resolve_prompt(self, prompt, prompt_name):
        """The text put before every sentence, as sentence-transformers resolves it; None for none."""
        if prompt is not None:
            return prompt
        if prompt_name is not None:
            if prompt_name not in self.prompts:
                raise ValueError(f"Prompt name '{prompt_name}' not found in the configured prompts dictionary with "
                                 f"keys {list(self.prompts)!r}.")
            return self.prompts[prompt_name]
        if self.default_prompt_name is not None:
            return self.prompts.get(self.default_prompt_name)
        return None

    def encode(self, inputs=None, prompt_name=None, prompt=None, batch_size=32, show_progress_bar=None,
               output_value="sentence_embedding", precision="float32", convert_to_numpy=True,
               convert_to_tensor=False, device=None, normalize_embeddings=False, truncate_dim=None, *,
               sentences=None):
        """As sentence-transformers' encode: a str gives a 1-D embedding, a list an [N, D] array.

        Returns a float32 numpy array (convert_to_numpy), a torch tensor (convert_to_tensor, which wins), or
        a list of 1-D torch tensors (both False); the tensors share the numpy array's memory. prompt (a text)
        or prompt_name (a key of .prompts; default: .default_prompt_name) is put before every sentence.
        truncate_dim (default: .truncate_dim) keeps the first dimensions (Matryoshka), before normalization;
        precision int8/uint8/binary/ubinary quantizes as sentence-transformers does. batch_size and
        show_progress_bar are accepted for compatibility: the forward passes are the executor's batch_size.
        `sentences` is sentence-transformers 5's name of `inputs`.
        """
        del batch_size, show_progress_bar
        inputs = _inputs("encode", inputs, sentences, "the texts")
        _only_default("output_value", output_value, "sentence_embedding",
                      "flowline's encode gives sentence embeddings only")
        _only_default("device", device, None, "the device is the encoder's, chosen when it was made")
        if precision not in _PRECISIONS:
            raise ValueError(f"Precision {precision!r} is not supported, must be one of {_PRECISIONS}")
        truncate_dim = truncate_dim if truncate_dim is not None else self.truncate_dim
        if truncate_dim is not None:
            truncate_dim = _dimensions(truncate_dim, "truncate_dim")
        if isinstance(inputs, dict):  # sentence-transformers 6's multimodal dicts: not taken
            raise TypeError("inputs: expected a str or a list of them (or, for CLIP, images), not a dict")
        single = isinstance(inputs, str) or (self._clip and _is_image(inputs))
        texts = [inputs] if single else list(inputs)
        resolved = self._resolve_prompt(prompt, prompt_name)
        if self._clip:
            matrix = self._encode_two_tower(texts, resolved or "")
        else:
            # Always the resolved text ("" for none), so the executor's own default prompt never adds another.
            parameters = {"prompt": "" if resolved is None else resolved}
            matrix = self._flow._encode("/encode", texts, parameters, _REQUEST_SIZE) if texts else None
        if matrix is None:
            if convert_to_tensor:
                return _torch().tensor([])
            return np.array([]) if convert_to_numpy else []
        if truncate_dim is not None and truncate_dim < matrix.shape[1]:
            matrix = np.ascontiguousarray(matrix[:, :truncate_dim])
        if normalize_embeddings:
            matrix = _normalized(matrix)
        matrix = _quantized(matrix, precision)
        if convert_to_tensor:
            out = _torch().from_numpy(matrix)
            return out[0] if single else out
        if not convert_to_numpy:
            rows = list(_torch().from_numpy(matrix))
            return rows[0] if single else rows
        return matrix[0] if single else matrix

    def _encode_two_tower(self, items, prompt):
        """CLIP / SigLIP: texts (after the prompt) and images, [N, D] float32 in input order; None for none."""
        if not items:
            return None
        if all(isinstance(x, str) for x in items):
            return self._flow._encode("/encode", [prompt + x for x in items], None, _REQUEST_SIZE)
        docs = []
        for i, x in enumerate(items):
            if isinstance(x, str):
                docs.append(prompt + x)
            elif _is_image(x):
                docs.append(_image_document(x))
            else:
                raise TypeError(f"inputs[{i}]: expected a str (a text), a PIL image, a numpy array of pixels or an "
                                f"image file's bytes, not {type(x).__name__}")
        answers = self._flow.post("/encode", docs, None, _REQUEST_SIZE)
        return np.stack([np.asarray(a.embedding, dtype=np.float32) for a in answers])

    def encode_query(self, inputs=None, prompt_name=None, prompt=None, **kwargs):
        """encode() with the "query" prompt unless one is given (sentence-transformers 6's encode_query)."""
        if prompt_name is None and prompt is None and "query" in self.prompts:
            prompt_name = "query"
        return self.encode(inputs, prompt_name=prompt_name, prompt=prompt, **kwargs)

    def encode_document(self, inputs=None, prompt_name=None, prompt=None, **kwargs):
        """encode() with the first of the "document", "passage", "corpus" prompts unless one is given."""
        if prompt_name is None and prompt is None:
            prompt_name = next((p for p in ("document", "passage", "corpus") if p in self.prompts), None)
        return self.encode(inputs, prompt_name=prompt_name, prompt=prompt, **kwargs)

    def get_embedding_dimension(self):
        """The size of encode()'s embeddings: the model's, or truncate_dim when that is smaller."""
        if self._dimension is None:
            self._dimension = self._metric("embedding_dimension")
        if self.truncate_dim is not None:
            return min(self._dimension, self.truncate_dim)
        return self._dimension

    get_sentence_embedding_dimension = get_embedding_dimension  # sentence-transformers 5's name

    @contextlib.contextmanager
    def truncate_embeddings(self, truncate_dim):
        """Within the block, encode() keeps the first truncate_dim dimensions."""
        saved, self.truncate_dim = self.truncate_dim, truncate_dim
        try:
            yield
        finally:
            self.truncate_dim = saved

    def similarity(self, embeddings1, embeddings2):
        """[N1, N2] scores of similarity_fn_name between every pair of rows (1-D inputs are one row each).

        A torch tensor as sentence-transformers gives, or numpy where torch does not import (the light install).
        """
        a, b = _matrix(embeddings1, "embeddings1"), _matrix(embeddings2, "embeddings2")
        return _as_torch_if_it_imports(_similarity(self.similarity_fn_name, a, b, pairwise=False))

    def similarity_pairwise(self, embeddings1, embeddings2):
        """[N] scores of similarity_fn_name between embeddings1[i] and embeddings2[i]."""
        a, b = _matrix(embeddings1, "embeddings1"), _matrix(embeddings2, "embeddings2")
        return _as_torch_if_it_imports(_similarity(self.similarity_fn_name, a, b, pairwise=True))


SentenceTransformer = SentenceEncoder
