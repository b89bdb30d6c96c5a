"""Python executors: a class deriving from flowline.Executor, handlers marked with @flowline.requests.

    class Upper(flowline.Executor):
        def __init__(self, suffix="", **kwargs):
            super().__init__(**kwargs)
            self.suffix = suffix

        @flowline.requests(on="/upper")
        def upper(self, docs, parameters, **kwargs):
            for d in docs:
                d.text = d.text.upper() + self.suffix

Defining the class registers it under its name, so a flow in this process names it with `uses: Upper` and
`with: {suffix: "!"}` (Jina's `uses_with`); each `__init__` keyword is a parameter of any JSON type, required
when it has no default. A handler gets `docs` (a list of flowline.Document), `parameters` (the request's,
a dict) and keyword arguments (`endpoint`); it changes the documents in place or returns a list of
documents to replace them. `@requests` without `on` is the default endpoint (every endpoint not bound
otherwise). Handlers run on the flow's replica threads, each replica its own instance, holding the GIL
while they run; an exception fails its request alone, its message and the traceback's last frame in the
error. The flow closes an instance with its close() method. A flow file names the class with `py_modules:`
instead to run it in worker processes of its own (pyworker.py; docs/python.md).
"""

import inspect
import json

from . import _flowline

_DEFAULT = "*"


def requests(func=None, *, on=None):
    """Marks a method as the handler of endpoint `on` (a str or a list of them; None: the default endpoint)."""
    if on is None:
        endpoints = [_DEFAULT]
    elif isinstance(on, str):
        endpoints = [on]
    else:
        endpoints = list(on)
        if not endpoints or not all(isinstance(e, str) for e in endpoints):
            raise TypeError(f"requests(on=...): expected a str or a list of str, not {on!r}")

    def mark(f):
        f._flowline_endpoints = endpoints
        return f

    return mark(func) if func is not None else mark


def _json_default(value):
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _parameters(cls):
    params = []
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        required = p.default is p.empty
        default = None if required or not _json_default(p.default) else p.default
        params.append((name, required, default))
    return params


def _handlers(cls):
    table = {}
    for attr in dir(cls):
        f = getattr(cls, attr, None)
        for endpoint in getattr(f, "_flowline_endpoints", ()):
            if endpoint in table and table[endpoint] != attr:
                raise TypeError(f"{cls.__name__}: endpoint {endpoint!r} has two handlers, {table[endpoint]} and {attr}")
            table[endpoint] = attr
    return table


class RequestError(ValueError):
    """Raised by a handler when the request itself is wrong (a parameter out of its bounds, a document the
    executor cannot take): the request fails with this message alone, as the request's own fault — a served
    flow answers 422 with it (a C++ executor's flowline::RequestError), where any other exception is the
    executor's fault (500, with the traceback's last frame). The same class name in a worker's light
    `flowline` module (pyworker.py) does the same for `py_modules` executors."""


def _call(instance, method, docs, parameters, endpoint):
    """What a replica thread calls (holding the GIL) for one batch; returns the documents to hand on."""
    result = getattr(instance, method)(docs, parameters, endpoint=endpoint)
    return docs if result is None else result


class Executor:
    """The base of Python executors; subclasses are registered by their class name when defined."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        handlers = _handlers(cls)
        help_text = (inspect.getdoc(cls) or f"Python executor {cls.__qualname__}").splitlines()[0]
        _flowline._register_python_executor(cls.__name__, cls, help_text, handlers, _parameters(cls), _call)

    def __init__(self, **kwargs):
        # Jina passes metas, requests and runtime_args too; flowline passes `runtime` (name, replica, replicas).
        self.runtime = kwargs.get("runtime", {})

    def close(self):
        """Called once when the flow closes this replica."""
