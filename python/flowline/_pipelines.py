"""pipeline(): transformers' text-classification, token-classification (NER) and zero-shot image classification
pipelines over flowline.

`from flowline import pipeline` in place of transformers' is the migration: the same call, the same answers
(labels and scores; entities with their words, code-point offsets and scores), computed by flowline's
SequenceClassifier, TokenClassifier and ClipEncoder executors (the plugins `flowline run` loads) in a started
flowline.Flow this object owns. What transformers decides in Python around the model — the legacy shapes of a
text-classification answer, the order of labels, which settings are refused — is done here as transformers 5
does it. Calls may come from several threads at once; close() (or the context manager, or garbage
collection) closes the flow.
"""

import inspect
import os

import numpy as np

from ._flowline import Document
from ._models import _REQUEST_SIZE, _dtype_param, _FlowOwner, _image_document, _model_path

_TASKS = {"text-classification": "text-classification", "sentiment-analysis": "text-classification",
          "token-classification": "token-classification", "ner": "token-classification",
          "zero-shot-image-classification": "zero-shot-image-classification"}
_FUNCTIONS = ("sigmoid", "softmax", "none")
_STRATEGIES = ("none", "simple", "first", "average", "max")
_UNSET = object()  # top_k not given (transformers' "": its None means every label)


def _device(device):
    if device is None:
        return "auto"
    if isinstance(device, int):
        return "cpu" if device < 0 else f"cuda:{device}"
    return str(device)  # "cpu", "cuda:1", or a torch.device


def _name(value, allowed, what):
    value = getattr(value, "value", value)  # transformers' enums (AggregationStrategy, ClassificationFunction)
    if not isinstance(value, str) or value.lower() not in allowed:
        raise ValueError(f"{what}: {value!r} is not one of {', '.join(allowed)}")
    return value.lower()


class _Pipeline(_FlowOwner):
    _uses = _executor = _endpoint = None
    _executor_params = {}  # the executor's own parameters the task fixes

    def __init__(self, model, device=None, dtype="auto", replicas=None, batch_size=None, **settings):
        params = {"model": _model_path(model), **self._executor_params}
        if dtype is not None and str(dtype) != "auto":
            params["dtype"] = _dtype_param(dtype)
        if batch_size is not None:
            params["batch_size"] = int(batch_size)
        self._settings = self._checked(settings)
        self._start_flow(self._uses, self._executor, _device(device), "auto" if replicas is None else int(replicas),
                         params)

    def _post(self, inputs, parameters):
        return self._flow.post(self._endpoint, inputs, parameters, _REQUEST_SIZE)

    @classmethod
    def _checked(cls, settings):
        """The task's settings, sanitized; a name the task does not take is a TypeError naming the ones it does."""
        known = [n for n in inspect.signature(cls._sanitize).parameters if n != "batch_size"]
        unknown = sorted(set(settings) - set(known) - {"batch_size"})
        if unknown:
            hint = "; texts are cut at the model's maximum length" if {"max_length", "padding"} & set(unknown) else ""
            raise TypeError(f"{', '.join(unknown)}: not a setting of flowline's {cls._task} pipeline (it takes "
                            f"{', '.join(known)}{hint})")
        return cls._sanitize(**settings)


class TextClassificationPipeline(_Pipeline):
    """transformers' TextClassificationPipeline on the SequenceClassifier executor.

    Settings (at creation or per call): top_k (1 by default, None for every label) and function_to_apply
    (sigmoid, softmax, none; default as the pipeline decides from config.json). An input is a str, a
    {"text", "text_pair"} dict, or a list of those; the answer has transformers' shape for each.
    """

    _uses, _executor, _endpoint = "SequenceClassifier", "classifier", "/classify"
    _task = "text-classification"

    @staticmethod
    def _sanitize(top_k=_UNSET, function_to_apply=None, truncation=None, batch_size=None):
        # truncation: flowline always cuts a text to the model's max_seq_length (transformers' truncation=True).
        del truncation, batch_size
        out = {}
        if top_k is not _UNSET:
            if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
                raise ValueError(f"top_k: expected a positive int or None, not {top_k!r}")
            out["top_k"] = top_k
        if function_to_apply is not None:
            out["function_to_apply"] = _name(function_to_apply, _FUNCTIONS, "function_to_apply")
        return out

    @staticmethod
    def _document(x, where):
        if isinstance(x, str):
            return {"text": x}
        if isinstance(x, list) and len(x) == 1 and isinstance(x[0], list) and len(x[0]) == 2:
            x = {"text": x[0][0], "text_pair": x[0][1]}  # transformers' older form of a pair, still taken
        elif isinstance(x, list):
            raise ValueError("The pipeline received invalid inputs, if you are trying to send text pairs, you can "
                             'try to send a dictionary `{"text": "My text", "text_pair": "My pair"}` in order to '
                             "send a text pair.")
        if not isinstance(x, dict):
            raise TypeError(f"{where}: expected a str or a {{'text', 'text_pair'}} dict, not {type(x).__name__}")
        unknown = set(x) - {"text", "text_pair"}
        if unknown or not isinstance(x.get("text"), str) or not isinstance(x.get("text_pair", ""), str):
            raise ValueError(f"{where}: a pair is {{'text': str, 'text_pair': str}}"
                             + (f", not keys {sorted(unknown)}" if unknown else ""))
        return {"text": x["text"], "tags": {"text_pair": x["text_pair"]}} if "text_pair" in x else {"text": x["text"]}

    def __call__(self, inputs, **kwargs):
        settings = {**self._settings, **self._checked(kwargs)}
        legacy = "top_k" not in settings  # no top_k anywhere: one {"label", "score"} per input
        top_k = settings.get("top_k")
        single = isinstance(inputs, (str, dict))
        items = [inputs] if single else list(inputs)
        docs = [self._document(x, f"inputs[{i}]") for i, x in enumerate(items)]
        parameters = {"top_k": 0, "function_to_apply": settings.get("function_to_apply", "auto")}
        results = []
        for answer in self._post(docs, parameters) if docs else []:
            labels = [{"label": s["label"], "score": s["score"]} for s in answer.tags["labels"]]  # best first
            results.append(labels[0] if legacy else labels[:top_k])
        result = results[0] if single else results
        # transformers' own quirk, kept: a str input without top_k in the call answers inside a list.
        return [result] if isinstance(inputs, str) and "top_k" not in kwargs else result


class TokenClassificationPipeline(_Pipeline):
    """transformers' TokenClassificationPipeline (task "ner") on the TokenClassifier executor.

    Settings (at creation or per call): aggregation_strategy (none by default, as transformers; simple, first,
    average, max), ignore_labels (["O"]) and stride (windows over long texts). A str gives its entities
    ({"entity", "score", "index", "word", "start", "end"}, or "entity_group" without "index" when
    aggregated; start and end count code points), a list of str a list of those.
    """

    _uses, _executor, _endpoint = "TokenClassifier", "tagger", "/token-classification"
    _task = "token-classification"

    def __init__(self, model, device=None, dtype="auto", replicas=None, batch_size=None, **settings):
        if settings.get("aggregation_strategy") is None:  # not given, or None: transformers' default
            settings["aggregation_strategy"] = "none"
        super().__init__(model, device, dtype, replicas, batch_size, **settings)

    @staticmethod
    def _sanitize(ignore_labels=None, aggregation_strategy=None, stride=None, offset_mapping=None,
                  is_split_into_words=False, delimiter=None, batch_size=None):
        del delimiter, batch_size
        if offset_mapping is not None or is_split_into_words:
            raise ValueError("offset_mapping and is_split_into_words are not supported by flowline's tagger: it "
                             "tokenizes each text itself and gives offsets into it")
        out = {}
        if aggregation_strategy is not None:
            out["aggregation_strategy"] = _name(aggregation_strategy, _STRATEGIES, "aggregation_strategy")
        if ignore_labels is not None:
            if isinstance(ignore_labels, str) or not all(isinstance(x, str) for x in ignore_labels):
                raise TypeError(f"ignore_labels: expected a list of str, not {ignore_labels!r}")
            out["ignore_labels"] = list(ignore_labels)
        if stride is not None:
            if not isinstance(stride, int) or stride < 0:
                raise ValueError(f"stride: expected an int >= 0, not {stride!r}")
            out["stride"] = stride
        return out

    def __call__(self, inputs, **kwargs):
        settings = {**self._settings, **self._checked(kwargs)}
        if "stride" in settings and settings["aggregation_strategy"] == "none":
            raise ValueError('`stride` was provided to process all the text but `aggregation_strategy="none"`, '
                             "please select another one instead.")
        if isinstance(inputs, dict):
            raise TypeError("inputs: expected a str or a list of str, not a dict")
        single = isinstance(inputs, str)
        texts = [inputs] if single else list(inputs)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"inputs[{i}]: expected a str, not {type(t).__name__}")
        parameters = {"aggregation_strategy": settings["aggregation_strategy"],
                      "ignore_labels": settings.get("ignore_labels", ["O"])}
        if "stride" in settings:
            parameters["stride"] = settings["stride"]
        results = [[self._entity(c) for c in answer.chunks] for answer in (self._post(texts, parameters) if texts
                                                                            else [])]
        return results[0] if single else results

    @staticmethod
    def _entity(chunk):
        t = chunk.tags
        if "entity" in t:  # aggregation_strategy none: one per token
            return {"entity": t["entity"], "score": np.float32(t["score"]), "index": int(t["index"]),
                    "word": chunk.text, "start": int(t["start"]), "end": int(t["end"])}
        return {"entity_group": t["entity_group"], "score": np.float32(t["score"]), "word": chunk.text,
                "start": int(t["start"]), "end": int(t["end"])}


def _loaded_image(image, timeout):
    """transformers' load_image: a path, an http(s) URL, a data: URI or base64 text, or a PIL image, upright (its
    EXIF orientation applied) and in RGB; needs Pillow, as transformers' vision pipelines do."""
    import base64
    import io

    try:
        from PIL import Image, ImageOps
    except ImportError as e:
        raise ImportError(f"an image given as a path, URL or PIL image needs Pillow (pip install pillow): {e}") from e
    if isinstance(image, str):
        if image.startswith(("http://", "https://")):
            import urllib.request

            with urllib.request.urlopen(image, timeout=timeout) as response:  # noqa: S310 - the caller's own URL
                image = Image.open(io.BytesIO(response.read()))
        elif os.path.isfile(image):
            image = Image.open(image)
        else:
            text = image.split(",", 1)[1] if image.startswith("data:image/") else image
            try:
                image = Image.open(io.BytesIO(base64.decodebytes(text.encode())))
            except Exception as e:  # noqa: BLE001 - named in the error
                raise ValueError(f"Incorrect image source. Must be a valid URL starting with `http://` or "
                                 f"`https://`, a valid path to an image file, or a base64 encoded string. Got "
                                 f"{image[:80]}. Failed with {e}") from None
    return ImageOps.exif_transpose(image).convert("RGB")


class ZeroShotImageClassificationPipeline(_Pipeline):
    """transformers' ZeroShotImageClassificationPipeline on the ClipEncoder's /rank: each candidate label put in
    hypothesis_template, scored against the image by the model's logit scale — softmax over the labels for CLIP,
    sigmoid with the logit bias for SigLIP — best first.

    An image is what transformers' load_image takes (a path, an http(s) URL, a data: URI or base64 text, a PIL
    image: upright and RGB, with Pillow), or here also a numpy array of pixels or an image file's bytes (decoded
    by the executor and turned upright as well); a list of images gives a list of answers.
    """

    _uses, _executor, _endpoint = "ClipEncoder", "clip", "/rank"
    _task = "zero-shot-image-classification"
    _executor_params = {"exif_orientation": True}  # image bytes turned upright, as load_image turns a file

    @staticmethod
    def _sanitize(candidate_labels=None, hypothesis_template=None, timeout=None, batch_size=None):
        del batch_size
        out = {}
        if candidate_labels is not None:
            if isinstance(candidate_labels, str) or not all(isinstance(x, str) for x in candidate_labels):
                raise TypeError(f"candidate_labels: expected a list of str, not {candidate_labels!r:.80}")
            out["candidate_labels"] = list(candidate_labels)
        if hypothesis_template is not None:
            out["hypothesis_template"] = str(hypothesis_template)
        if timeout is not None:
            out["timeout"] = timeout
        return out

    def __call__(self, image=None, candidate_labels=None, **kwargs):
        if image is None:
            image = kwargs.pop("images", None)
        if image is None:
            raise ValueError("Cannot call the zero-shot-image-classification pipeline without an images argument!")
        settings = {**self._settings, **self._checked({"candidate_labels": candidate_labels, **kwargs})}
        labels = settings.get("candidate_labels")
        if not labels:
            raise ValueError("candidate_labels: give the labels to choose from (a list of str)")
        template = settings.get("hypothesis_template", "This is a photo of {}.")
        single = not isinstance(image, (list, tuple))
        queries = []
        for i, x in enumerate([image] if single else image):
            if isinstance(x, (np.ndarray, bytes, bytearray)):
                query = _image_document(x)
            elif isinstance(x, str) or hasattr(x, "getbands"):
                query = _image_document(np.asarray(_loaded_image(x, settings.get("timeout"))))
            else:
                raise TypeError(f"image[{i}]: expected a path, URL, PIL image, numpy array of pixels or image "
                                f"bytes, not {type(x).__name__}")
            query.id = f"image-{i}"
            query.matches = [Document(template.format(label), id=str(k)) for k, label in enumerate(labels)]
            queries.append(query)
        results = []
        for answer in self._post(queries, None):
            # Best first (the executor's stable sort: ties keep the labels' order, as transformers' sorted()).
            results.append([{"score": float(m.scores["clip_score"]), "label": labels[int(m.id)]}
                            for m in answer.matches])
        return results[0] if single else results


def pipeline(task, model=None, tokenizer=None, device=None, dtype="auto", replicas=None, batch_size=None,
             **kwargs):
    """transformers' pipeline(task, model, ...) for text-classification ("sentiment-analysis"),
    token-classification ("ner") and zero-shot-image-classification, on flowline's executors.

    model: a checkpoint folder (or ORG/NAME in the local Hugging Face cache; nothing is downloaded). tokenizer:
    None or the same folder (the model's tokenizer.json is read). device: None (flowline's auto: a GPU when
    there is one), -1 or "cpu", N or "cuda:N". dtype: "auto" (float32), float16 or bfloat16 (torch's or as
    text). replicas: executor replicas (None: auto). batch_size: sequences per forward pass. Other keywords are
    the task's settings (top_k, function_to_apply; aggregation_strategy, ignore_labels, stride;
    candidate_labels, hypothesis_template, timeout).
    """
    if task not in _TASKS:
        raise ValueError(f"task {task!r}: flowline's pipeline() runs {', '.join(_TASKS)}")
    if model is None:
        raise ValueError("model: a checkpoint folder (or ORG/NAME in the local Hugging Face cache); flowline "
                         "picks no default model and downloads nothing")
    if tokenizer is not None and (not isinstance(tokenizer, (str, os.PathLike))
                                  or _model_path(tokenizer) != _model_path(model)):
        raise ValueError("tokenizer: flowline reads the tokenizer of the model folder; give None or that folder")
    cls = {"text-classification": TextClassificationPipeline, "token-classification": TokenClassificationPipeline,
           "zero-shot-image-classification": ZeroShotImageClassificationPipeline}[_TASKS[task]]
    return cls(model, device=device, dtype=dtype, replicas=replicas, batch_size=batch_size, **kwargs)
