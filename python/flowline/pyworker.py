"""A Python executor's worker process, started by a flow for `uses: Class` with `py_modules:` (issue 53 §2).

    python pyworker.py --py-modules FILE.py [...] --uses Class --name NAME [--with JSON] [--port P]
    python pyworker.py --check --py-modules FILE.py [...] --uses Class

Run as a script by its path, never as `flowline.pyworker`: it must not import the flowline package, whose
extension needs LibTorch and the torch wheel it was built against. It needs only the standard library (and
numpy where tensors cross), so any interpreter runs it — the one with jina for Jina 3 classes.

Serving: imports the modules (each file's folder first on sys.path), builds the class with `with:` and
serves it over flowline's binary protocol (docs/remote-protocol.md) on 127.0.0.1:PORT, one request at a
time in arrival order (one process is one replica). Prints `serving NAME on 127.0.0.1:PORT` on stdout once it
listens (`failed ERROR` when the class cannot be built), then sends its stdout to stderr. The flow (src/core/python_workers.cpp) reads that line, connects
as to a `hosts:` executor, and restarts the process when it exits; the process exits when its stdin (a pipe
the flow holds) closes, so it never outlives the flow.

Documents arrive as the protocol's frames and become `flowline.Document`s of this file (plain Python: no
pickling, no LibTorch); a tensor is a numpy array over the frame's own bytes (no copy). A module's `import
flowline` gets this file's light `flowline` module (Executor, requests, Document). A class deriving from
jina's Executor is driven through its `@requests` table with docarray DocLists (jina_adapter.py).

--check imports the modules and finds the class, printing one JSON line: {"ok": true, "kind": ...} or
{"ok": false, "error": ..., "file": ..., "line": ...} (the flow's validate reports it).
"""

import argparse
import importlib.util
import json
import os
import socket
import struct
import sys
import threading
import traceback
import types

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = "*"


# ---- the light `flowline` module a worker's executors import ----------------------------------------------

class Document:
    """A document in a worker: Jina's fields as plain attributes (tensors as numpy arrays)."""

    __slots__ = ("id", "text", "blob", "tensor", "embedding", "tags", "mime_type", "uri", "scores", "chunks",
                 "matches", "parent_id")

    def __init__(self, text=None, *, id=None, tags=None, embedding=None, tensor=None, blob=None, mime_type=None,
                 uri=None, scores=None, chunks=None, matches=None, parent_id=None):
        self.id = id or ""
        self.text = text
        self.blob = blob
        self.tensor = tensor
        self.embedding = embedding
        self.tags = dict(tags or {})
        self.mime_type = mime_type
        self.uri = uri
        self.scores = dict(scores or {})
        self.chunks = list(chunks or [])
        self.matches = list(matches or [])
        self.parent_id = parent_id

    def __repr__(self):
        return f"Document(id={self.id!r}, text={self.text!r})"


def requests(func=None, *, on=None):
    """Marks a method as the handler of endpoint `on` (a str or a list of them; None: the default endpoint)."""
    endpoints = [DEFAULT] if on is None else [on] if isinstance(on, str) else list(on)

    def mark(f):
        f._flowline_endpoints = endpoints
        return f

    return mark(func) if func is not None else mark


class Executor:
    """The base of Python executors (the worker's light twin of flowline.Executor)."""

    def __init__(self, **kwargs):
        self.runtime = kwargs.get("runtime", {})

    def close(self):
        """Called once when the worker stops."""


def light_flowline_module():
    module = types.ModuleType("flowline")
    module.__doc__ = "flowline inside a Python executor's worker: Executor, requests, Document"
    module.Document, module.Executor, module.requests = Document, Executor, requests
    module.__file__ = os.path.abspath(__file__)
    return module


# ---- loading ----------------------------------------------------------------------------------------------

class LoadError(Exception):
    def __init__(self, message, file="", line=0):
        super().__init__(message)
        self.message, self.file, self.line = message, file, line


def import_file(path):
    path = os.path.abspath(path)
    if not os.path.exists(path):
        raise LoadError(f"py_modules: {path} does not exist", path, 0)
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        raise LoadError(f"syntax error: {e.msg}", e.filename or path, e.lineno or 0) from None
    except ImportError as e:
        frame = last_frame_in(e, path)
        missing = getattr(e, "name", None) or ""
        if missing.split(".")[0] == "jina" or missing.split(".")[0] == "docarray":
            raise LoadError(f"{os.path.basename(path)} imports {missing}, which this Python ({sys.executable}) "
                            "lacks: name one that has jina 3 with `python:` or FLOWLINE_PYTHON "
                            "(scripts/setup-clients.sh makes .venv-clients)", *frame) from None
        raise LoadError(f"{type(e).__name__}: {e}", *frame) from None
    except Exception as e:  # noqa: BLE001 — whatever the module raises at import is its load error
        raise LoadError(f"{type(e).__name__}: {e}", *last_frame_in(e, path)) from None
    return module


def last_frame_in(error, path):
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if os.path.abspath(f.filename) == path] or frames[-1:]
    return (mine[-1].filename, mine[-1].lineno) if mine else (path, 0)


def find_class(modules, name):
    for module in reversed(modules):
        cls = getattr(module, name, None)
        if isinstance(cls, type):
            return cls
    defined = sorted({k for m in modules for k, v in vars(m).items()
                      if isinstance(v, type) and v.__module__ == m.__name__})
    files = ", ".join(os.path.basename(m.__file__) for m in modules)
    raise LoadError(f"class '{name}' not found in {files}; it defines: {', '.join(defined) or 'no class'}",
                    modules[-1].__file__ if modules else "", 0)


def kind_of(cls):
    if issubclass(cls, Executor):
        return "flowline"
    jina = sys.modules.get("jina")
    if jina is not None and isinstance(getattr(jina, "Executor", None), type) and issubclass(cls, jina.Executor):
        return "jina"
    raise LoadError(f"class '{cls.__name__}' derives neither from flowline.Executor nor from jina's Executor",
                    sys.modules[cls.__module__].__file__, 0)


def load(py_modules, uses):
    sys.modules["flowline"] = light_flowline_module()
    modules = [import_file(p) for p in py_modules]
    cls = find_class(modules, uses)
    return cls, kind_of(cls)


# ---- the wire protocol (docs/remote-protocol.md, version 1) ---------------------------------------------

DTYPES = {1: "float32", 2: "float16", 4: "float64", 5: "int64", 6: "int32", 7: "int16", 8: "int8", 9: "uint8",
          10: "bool"}
CODES = {v: k for k, v in DTYPES.items()}
SIZES = {1: 4, 2: 2, 3: 2, 4: 8, 5: 8, 6: 4, 7: 2, 8: 1, 9: 1, 10: 1}


class RawTensor:
    """A tensor of a dtype numpy lacks (bfloat16), or any tensor where numpy is missing: handed on as is."""

    def __init__(self, code, shape, data):
        self.code, self.shape, self.data = code, shape, data


class Reader:
    def __init__(self, buffer, offset):
        self.view, self.at = memoryview(buffer), offset

    def take(self, n, what):
        if self.at + n > len(self.view):
            raise ValueError(f"bad frame at byte {self.at}: {what} needs {n} bytes, {len(self.view) - self.at} left")
        out = self.view[self.at:self.at + n]
        self.at += n
        return out

    def u8(self):
        return self.take(1, "u8")[0]

    def u32(self):
        return struct.unpack_from("<I", self.take(4, "u32"))[0]

    def u64(self):
        return struct.unpack_from("<Q", self.take(8, "u64"))[0]

    def raw(self, what="str"):
        return self.take(self.u32(), what)

    def str(self, what="str"):
        return str(self.raw(what), "utf-8")


def read_tensor(r, numpy):
    code, rank = r.u8(), r.u8()
    shape = tuple(r.u64() for _ in range(rank))
    data = r.take(r.u64(), "tensor data")
    if numpy is None or code not in DTYPES:
        return RawTensor(code, shape, bytes(data))
    return numpy.frombuffer(data, dtype=DTYPES[code]).reshape(shape)  # a view of the frame's bytes


def read_documents(r, numpy, depth=0):
    docs = []
    for _ in range(r.u32()):
        d = Document()
        for _ in range(r.u8()):
            tag = r.u8()
            if tag in (0, 1, 6, 7, 11):
                setattr(d, ("id", "text", "", "", "", "", "mime_type", "uri", "", "", "", "parent_id")[tag], r.str())
            elif tag == 2:
                d.blob = bytes(r.raw("blob"))
            elif tag == 3:
                d.tensor = read_tensor(r, numpy)
            elif tag == 4:
                d.embedding = read_tensor(r, numpy)
            elif tag == 5:
                d.tags = json.loads(r.str())
            elif tag == 8:
                d.scores = {}
                for _ in range(r.u32()):
                    name = r.str()
                    d.scores[name] = struct.unpack_from("<f", r.take(4, "score"))[0]
            elif tag in (9, 10):
                setattr(d, "chunks" if tag == 9 else "matches", read_documents(r, numpy, depth + 1))
            else:
                raise ValueError(f"bad frame at byte {r.at}: unknown document field tag {tag}")
        docs.append(d)
    return docs


def put_str(out, value):
    data = value if isinstance(value, (bytes, bytearray, memoryview)) else str(value).encode("utf-8")
    out.append(struct.pack("<I", len(data)))
    out.append(data)


def put_tensor(out, value, numpy, where):
    if isinstance(value, RawTensor):
        code, shape, data = value.code, value.shape, value.data
    else:
        if numpy is None:
            raise TypeError(f"{where}: a tensor needs numpy in this Python")
        if hasattr(value, "detach"):  # a torch tensor
            value = value.detach().cpu().numpy()
        array = numpy.asarray(value)
        if array.dtype == numpy.float64 and not isinstance(value, numpy.ndarray):
            array = array.astype(numpy.float32)  # a list of Python floats: flowline's float32
        if array.dtype.name not in CODES:
            raise TypeError(f"{where}: dtype {array.dtype} cannot cross to flowline")
        code, shape = CODES[array.dtype.name], array.shape
        data = memoryview(numpy.ascontiguousarray(array)).cast("B")
    out.append(struct.pack("<BB", code, len(shape)))
    out.append(struct.pack(f"<{len(shape)}Q", *shape))
    out.append(struct.pack("<Q", len(data)))
    out.append(data)


def put_documents(out, docs, numpy, where="docs"):
    out.append(struct.pack("<I", len(docs)))
    for i, d in enumerate(docs):
        if not isinstance(d, Document):
            raise TypeError(f"{where}[{i}]: expected a flowline.Document, not {type(d).__name__}")
        fields = []
        for tag, name in ((0, "id"), (1, "text"), (2, "blob"), (6, "mime_type"), (7, "uri"), (11, "parent_id")):
            value = getattr(d, name)
            if value:
                fields.append((tag, name, value))
        for tag, name in ((3, "tensor"), (4, "embedding")):
            if getattr(d, name) is not None:
                fields.append((tag, name, getattr(d, name)))
        for tag, name in ((5, "tags"), (8, "scores"), (9, "chunks"), (10, "matches")):
            if getattr(d, name):
                fields.append((tag, name, getattr(d, name)))
        out.append(struct.pack("<B", len(fields)))
        for tag, name, value in fields:
            out.append(struct.pack("<B", tag))
            if tag in (3, 4):
                put_tensor(out, value, numpy, f"{where}[{i}].{name}")
            elif tag == 5:
                put_str(out, json.dumps(dict(value)))
            elif tag == 8:
                out.append(struct.pack("<I", len(value)))
                for k, v in value.items():
                    put_str(out, k)
                    out.append(struct.pack("<f", float(v)))
            elif tag in (9, 10):
                put_documents(out, value, numpy, f"{where}[{i}].{name}")
            else:
                put_str(out, value)


def frame(kind, parts):
    size = 1 + sum(len(p) for p in parts)
    return [struct.pack("<IB", size, kind)] + parts


# ---- serving ----------------------------------------------------------------------------------------------

class Served:
    """The executor instance and how to call it; one request at a time."""

    def __init__(self, cls, kind, name, with_, runtime):
        self.name, self.kind, self.type = name, kind, cls.__name__
        self.lock = threading.Lock()
        if kind == "jina":
            sys.path.insert(0, HERE)
            import jina_adapter  # noqa: E402 — beside this file, imported only for Jina classes

            self.adapter = jina_adapter.JinaAdapter(cls, with_, name, Document)
        else:
            self.adapter = None
            self.instance = cls(**with_, runtime=runtime)
            self.handlers = {}
            for attr in dir(cls):
                for endpoint in getattr(getattr(cls, attr, None), "_flowline_endpoints", ()):
                    self.handlers[endpoint] = attr

    def call(self, endpoint, docs, parameters):
        if self.adapter is not None:
            return self.adapter.call(endpoint, docs, parameters)
        method = self.handlers.get(endpoint) or self.handlers.get(DEFAULT)
        if method is None:
            return docs  # no handler for this endpoint: documents pass through, as in Jina
        result = getattr(self.instance, method)(docs, parameters, endpoint=endpoint)
        return docs if result is None else list(result)


def error_text(e):
    frames = traceback.extract_tb(e.__traceback__)
    where = f" ({os.path.basename(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(e).__name__}: {e}{where}"


def read_exact(conn, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = conn.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return buf


def serve_connection(conn, served, numpy):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    hello = True
    while True:
        head = read_exact(conn, 4)
        if head is None:
            return
        body = read_exact(conn, struct.unpack("<I", head)[0])
        if body is None:
            return
        kind, r = body[0], Reader(body, 1)
        if hello:
            if kind != 1 or bytes(r.take(4, "magic")) != b"FLWL":
                conn.sendall(b"".join(frame(5, [struct.pack("<I", 15), b"expected Hello"])))
                return
            hello = False
            parts = [struct.pack("<H", 1)]
            put_str(parts, served.name)
            put_str(parts, served.type)
            parts.append(struct.pack("<II", 256 << 20, 4))
            conn.sendall(b"".join(frame(2, parts)))
        elif kind == 6:
            conn.sendall(b"".join(frame(7, [bytes(r.take(8, "nonce"))])))
        elif kind == 3:
            conn.sendall(b"".join(answer(r, served, numpy)))
        else:
            return


def answer(r, served, numpy):
    request_id = r.u64()
    endpoint, params = r.str(), r.str()
    docs = read_documents(r, numpy)
    ok, error = True, ""
    try:
        with served.lock:
            out = served.call(endpoint, docs, json.loads(params) if params else {})
        body = []
        put_documents(body, out, numpy)
    except Exception as e:  # noqa: BLE001 — a handler's exception fails its request alone
        ok, error, body = False, error_text(e), []
        put_documents(body, docs, numpy)
    parts = [struct.pack("<QB", request_id, 0 if ok else 1)]
    put_str(parts, error)
    put_str(parts, served.name if not ok else "")
    return frame(4, parts + body)


def watch_stdin():
    """The flow holds our stdin's other end: when it closes (the flow exited, even killed), so do we."""
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os._exit(0)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pyworker.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--py-modules", nargs="+", required=True)
    parser.add_argument("--uses", required=True)
    parser.add_argument("--name", default=None)
    parser.add_argument("--with", dest="with_", default="{}")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--replica", type=int, default=0)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--flow-dir", default=os.getcwd(), help="the flow file's folder (runtime['flow_dir'])")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--watch-stdin", action="store_true")
    args = parser.parse_args(argv)
    try:
        cls, kind = load(args.py_modules, args.uses)
    except LoadError as e:
        if args.check:
            print(json.dumps({"ok": False, "error": e.message, "file": e.file, "line": e.line}), flush=True)
            return 0
        print(f"pyworker: {e.file}:{e.line}: {e.message}", file=sys.stderr)
        return 2
    if args.check:
        print(json.dumps({"ok": True, "kind": kind}), flush=True)
        return 0
    if args.watch_stdin:
        threading.Thread(target=watch_stdin, daemon=True).start()
    try:
        import numpy
    except ImportError:
        numpy = None
    name = args.name or args.uses
    runtime = {"name": name, "replica": args.replica, "replicas": args.replicas, "flow_dir": args.flow_dir}
    try:
        served = Served(cls, kind, name, json.loads(args.with_), runtime)
    except Exception as e:  # noqa: BLE001 — the flow says why the executor could not be built
        traceback.print_exc()
        print(f"failed {error_text(e)}", flush=True)
        return 1
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(8)
    print(f"serving {name} on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
    os.dup2(2, 1)  # later prints go to stderr: nobody reads the pipe after the first line
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve_connection, args=(conn, served, numpy), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
