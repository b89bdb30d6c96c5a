"""Runs an unmodified Jina 3 Executor class in a flowline worker (pyworker.py imports this for Jina classes).

The class is built as Jina builds it outside a Flow (`Class(**uses_with)`), and each request calls the
handler its `@requests` table names for the endpoint (else its default endpoint's, `/default`), with the
keyword arguments Jina passes: `docs` (a docarray DocList of the handler's declared document type) or `doc`
for single-document handlers, `parameters` (a dict, or the handler's pydantic model), `docs_matrix` and
`tracing_context` (None). Coroutine handlers run to completion on an event loop of this thread.

Documents are converted both ways, per batch — the price of running the class unchanged (a flowline.Executor
class skips it): a flowline field goes to the document type's field of the same name (`blob` also to
`bytes_`, `uri` to `url`), a tag to a field named as the tag; after the call each returned (or changed)
document's fields come back the same way, and fields flowline lacks go to its tags when they are JSON values.
"""

import asyncio
import inspect

DEFAULT_ENDPOINT = "/default"
ALIASES = {"blob": ("blob", "bytes_"), "uri": ("uri", "url")}
FLOWLINE_FIELDS = ("id", "text", "blob", "tensor", "embedding", "tags", "mime_type", "uri", "parent_id")


def _validation_message(error):
    """pydantic's errors as `where: what`, joined."""
    parts = []
    for item in error.errors():
        where = ".".join(str(x) for x in item.get("loc", ())) or "(root)"
        parts.append(f"{where}: {item.get('msg', '')}")
    return "; ".join(parts)


def _fields(doc_type):
    fields = getattr(doc_type, "model_fields", None) or getattr(doc_type, "__fields__", None) or {}
    return set(fields)


class JinaAdapter:
    def __init__(self, cls, uses_with, name, document, request_error=ValueError):
        self.instance = cls(**uses_with)
        self.document = document  # the worker's Document class (pyworker runs as __main__)
        self.request_error = request_error  # the worker's RequestError: the request's own fault (422)
        self.name = name
        self.loop = None

    def handler(self, endpoint):
        table = self.instance.requests
        return table.get(endpoint) or table.get(DEFAULT_ENDPOINT)

    def call(self, endpoint, docs, parameters):
        info = self.handler(endpoint)
        if info is None:
            return docs  # Jina passes documents through an endpoint without a handler
        doc_type = getattr(info.request_schema, "doc_type", None)
        from docarray import DocList
        from pydantic import ValidationError

        # Jina's HTTP gateway validates a request against the handler's document and parameters models before
        # the executor sees it, and answers a mismatch 422 (FastAPI's validation error): here too the request is
        # refused as the client's mistake. What the handler itself raises stays the executor's fault (500).
        inputs = []
        try:
            for i, d in enumerate(docs):
                inputs.append(self.to_jina(d, doc_type))
        except ValidationError as e:
            raise self.request_error(f"docs[{i}] does not fit the handler's document type "
                                     f"{getattr(doc_type, '__name__', '?')}: {_validation_message(e)}") from None
        if info.parameters_is_pydantic_model and info.parameters_model is not None:
            try:
                parameters = info.parameters_model(**parameters)
            except ValidationError as e:
                raise self.request_error(f"the parameters do not fit the handler's "
                                         f"{info.parameters_model.__name__}: {_validation_message(e)}") from None
        kwargs = {"parameters": parameters, "docs_matrix": None, "tracing_context": None}
        if info.is_batch_docs or not getattr(info, "is_singleton_doc", False):
            batch = DocList[doc_type](inputs) if doc_type is not None else DocList(inputs)
            result = self.run(info.fn, docs=batch, **kwargs)
            out = batch if result is None or isinstance(result, dict) else result
        else:
            out = []
            for d in inputs:
                one = self.run(info.fn, doc=d, **kwargs)
                out.append(d if one is None else one)
        return [self.from_jina(d, docs[i] if i < len(docs) else None) for i, d in enumerate(out)]

    def run(self, fn, **kwargs):
        result = fn(self.instance, **kwargs)
        if inspect.isawaitable(result):
            if self.loop is None:
                self.loop = asyncio.new_event_loop()
            result = self.loop.run_until_complete(result)
        return result

    @staticmethod
    def to_jina(d, doc_type):
        names = _fields(doc_type) if doc_type is not None else set()
        open_type = doc_type is None or not names or doc_type.__name__ == "AnyDoc"
        values = {}
        for field in FLOWLINE_FIELDS:
            value = getattr(d, field)
            if value is None or (field != "id" and not isinstance(value, (bytes, str)) and not _present(value)):
                continue
            if field == "id" and not value:
                continue
            for target in ALIASES.get(field, (field,)):
                if open_type or target in names:
                    values[target] = value
                    break
        for key, value in (d.tags or {}).items():
            if key in names and key not in values:
                values[key] = value
        if doc_type is None:
            from docarray.documents import TextDoc

            doc_type = TextDoc
            values = {k: v for k, v in values.items() if k in _fields(TextDoc)}
        return doc_type(**values)

    def from_jina(self, j, before):
        d = self.document()
        tags = dict(before.tags) if before is not None else {}
        for name in _fields(type(j)) or vars(j).keys():
            value = getattr(j, name, None)
            field = next((f for f, names in ALIASES.items() if name in names), name)
            if field in ("tensor", "embedding"):
                setattr(d, field, None if value is None else _array(value))
            elif field in FLOWLINE_FIELDS:
                if value is not None:
                    setattr(d, field, dict(value) if field == "tags" else value)
            elif value is not None and _json_value(value):
                tags[name] = value
        d.tags = {**tags, **(d.tags or {})}
        if before is not None and not d.id:
            d.id = before.id
        return d


def _present(value):
    try:
        return len(value) > 0
    except TypeError:
        return True


def _array(value):
    import numpy

    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return numpy.asarray(value)


def _json_value(value):
    return isinstance(value, (str, int, float, bool, list, dict))
