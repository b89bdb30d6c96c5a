"""A Python executor's worker process, started by a flow for `uses: Class` with `py_modules:` (issue 53 §2).

    python pyworker.py --py-modules FILE.py [...] --uses Class --name NAME [--with JSON] [--port P]
    python pyworker.py --check --py-modules FILE.py [...] --uses Class

Run as a script by its path, never as `flowline.pyworker`: it must not import the flowline package, whose
extension needs LibTorch and the torch wheel it was built against. It needs only the standard library (and
numpy where tensors cross), so any interpreter runs it — the one with jina for Jina 3 classes.

Serving: imports the modules (each file's folder first on sys.path), builds the class with `with:` and serves
it over flowline's binary protocol (docs/remote-protocol.md, versions 1..4) on 127.0.0.1:PORT, one request at a
time (one process is one replica), or N at once on N threads for a class whose `concurrent_requests` is N (it is
then safe to call from N threads: OnnxModel, whose onnxruntime releases the GIL while it runs, so one request's
Python work overlaps another's model). Prints `serving NAME on 127.0.0.1:PORT, N at once` once it listens
(`failed ERROR` when the class cannot be built), then sends its stdout to stderr. The flow
(src/core/python_workers.cpp) reads that line, connects as to a `hosts:` executor with N + 1 requests in flight,
and restarts the process when it exits; it exits when its stdin (a
pipe the flow holds) closes, so it never outlives the flow.

Documents arrive as the protocol's frames and become `flowline.Document`s of this file (plain Python: no
pickling, no LibTorch); a tensor is a numpy array over the frame's own bytes (no copy), and a large one in the
answer is sent from its array's memory. With the flow that started it (wire version 4), each connection shares a
memfd segment: a large tensor is a numpy array over the segment (valid during its call only: a handler that keeps
one longer keeps a copy), and the answer's large tensors are named by offset (the request's own, unchanged or
changed in place) or copied into the request's region (docs/python.md, "What crosses without a copy"). A module's `import flowline` gets this file's light `flowline` module
(Executor, requests, Document, RequestError). A jina Executor is driven through its `@requests` table with
docarray DocLists (jina_adapter.py).

--check imports the modules and finds the class, printing one JSON line: {"ok": true, "kind": ...} or
{"ok": false, "error": ..., "file": ..., "line": ...} (the flow's validate reports it).
"""

import argparse
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
MAX_FRAME_BYTES = 256 << 20  # as flowline's executor server: a longer frame closes the connection


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


class RequestError(Exception):
    """Raised by a handler: the request itself is wrong, not the executor. It fails with this message alone, a
    gateway answers 422 (a C++ executor's flowline::RequestError); another exception is a 500 naming its frame."""


class Executor:
    """The base of Python executors (the worker's light twin of flowline.Executor)."""

    def __init__(self, **kwargs):
        self.runtime = kwargs.get("runtime", {})

    def close(self):
        """Called once when the worker stops."""


def light_flowline_module():
    module = types.ModuleType("flowline")
    module.__doc__ = "flowline inside a Python executor's worker: Executor, requests, Document, RequestError"
    module.Document, module.Executor, module.requests = Document, Executor, requests
    module.RequestError = RequestError
    module.__file__ = os.path.abspath(__file__)
    return module


# ---- loading ----------------------------------------------------------------------------------------------

# LoadError, import_file, find_class: in worker_loading.py beside this file (a sibling when run as a script,
# flowline.worker_loading when imported as flowline.pyworker by flowline.worker).
try:
    from .worker_loading import LoadError, find_class, import_file
except ImportError:
    from worker_loading import LoadError, find_class, import_file


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


# ---- the wire protocol (docs/remote-protocol.md, versions 1 to 4) ----------------------------------------

# As flowline's executor server: a Hello offering min..max gets the highest version both speak. Version 2's
# Response status 2 is the request's own error; a version 1 client gets status 1 with the same message.
# Version 3's deadline is read and not acted on (a request here runs to its end: Python cannot stop a
# handler) and its Cancel frames are ignored (one request at a time per connection: a Cancel arrives after
# the answer it would have stopped). Version 4 adds a shared-memory segment per connection (Segment frame).
MIN_VERSION, VERSION = 1, 4
SHARED_BIT = 0x80  # version 4: a tensor's dtype byte with this bit holds an offset into the segment
STATUS_OK, STATUS_FAILED, STATUS_REQUEST_ERROR = 0, 1, 2

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
        self.region = None  # version 4: (Segment, begin, end) of the request being read
        self.received = {}  # id(array) -> (array, offset) of the tensors it read from the segment

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


U8, U32, U64, F32 = (struct.Struct(f) for f in ("<B", "<I", "<Q", "<f"))
STRING_FIELDS = {0: "id", 1: "text", 6: "mime_type", 7: "uri", 11: "parent_id"}
MAX_DEPTH = 8


def short(at, need, left):
    return ValueError(f"bad frame at byte {at}: a field needs {need} bytes, {left} left in the frame")


def read_tensor(r, numpy):
    code, rank = r.take(2, "tensor dtype and rank")
    if rank > 8:
        raise ValueError(f"bad frame at byte {r.at}: tensor rank {rank} (at most 8)")
    shape_at = r.at
    r.take(8 * rank + 8, "tensor shape and size")
    *shape, size = tensor_head_in(rank).unpack_from(r.view, shape_at)
    shape = tuple(shape)
    offset = None
    if code & SHARED_BIT:
        code &= ~SHARED_BIT
        at = r.at
        offset = r.u64()
        data = region_bytes(r.region, offset, size, at)
    else:
        data = r.take(size, "tensor data")
    if code not in SIZES:
        raise ValueError(f"bad frame at byte {r.at}: unknown tensor dtype {code}")
    count = 1
    for n in shape:
        count *= n
    if count * SIZES[code] != len(data):
        raise ValueError(f"bad frame at byte {r.at}: tensor data of {len(data)} bytes for shape {list(shape)}")
    if numpy is None or code not in DTYPES:
        return RawTensor(code, shape, bytes(data))
    array = numpy.frombuffer(data, dtype=DTYPES[code]).reshape(shape)  # a view of the frame's or segment's bytes
    if offset is not None:
        r.received[id(array)] = (array, offset)  # answered unchanged: named by its offset, not copied
    return array


SHAPES_IN = {}  # rank -> struct.Struct of a tensor's shape and size as read


def tensor_head_in(rank):
    head = SHAPES_IN.get(rank)
    if head is None:
        head = SHAPES_IN[rank] = struct.Struct(f"<{rank}QQ")
    return head


def region_bytes(region, offset, size, at):
    """A tensor's bytes in the connection's segment (version 4), checked to lie within the request's region."""
    if region is None:
        raise ValueError(f"bad frame at byte {at}: a tensor in a shared segment on a connection without one")
    segment, begin, end = region
    if offset < begin or offset > end or size > end - offset:
        raise ValueError(f"bad frame at byte {at}: a tensor of {size} bytes at offset {offset} of the shared "
                         f"segment, outside this request's region [{begin}, {end})")
    return segment.view[offset:offset + size]


def blank_document():
    d = Document.__new__(Document)
    d.id, d.text, d.blob, d.tensor, d.embedding, d.mime_type, d.uri, d.parent_id = "", None, None, None, None, None, None, None
    d.tags, d.scores, d.chunks, d.matches = {}, {}, [], []
    return d


def read_documents(r, numpy, depth=0):
    """The hot path: plain offsets into the frame, one bounds check per length read."""
    if depth >= MAX_DEPTH:
        raise ValueError(f"bad frame at byte {r.at}: documents nested deeper than {MAX_DEPTH}")
    buf, view, at, end = r.view.obj, r.view, r.at, len(r.view)
    if at + 4 > end:
        raise short(at, 4, end - at)
    (count,) = U32.unpack_from(buf, at)
    at += 4
    docs = []
    for _ in range(count):
        if at >= end:
            raise short(at, 1, 0)
        d = blank_document()
        fields = buf[at]
        at += 1
        for _ in range(fields):
            if at + 1 > end:
                raise short(at, 1, 0)
            tag = buf[at]
            at += 1
            name = STRING_FIELDS.get(tag)
            if name is not None or tag in (2, 5):
                if at + 4 > end:
                    raise short(at, 4, end - at)
                (length,) = U32.unpack_from(buf, at)
                at += 4
                if at + length > end:
                    raise short(at, length, end - at)
                raw = view[at:at + length]
                at += length
                if name is not None:
                    setattr(d, name, str(raw, "utf-8"))
                elif tag == 2:
                    d.blob = bytes(raw)
                else:
                    d.tags = json.loads(str(raw, "utf-8"))
                continue
            r.at = at
            if tag in (3, 4):
                setattr(d, "tensor" if tag == 3 else "embedding", read_tensor(r, numpy))
            elif tag == 8:
                d.scores = {}
                for _ in range(r.u32()):
                    key = r.str()
                    d.scores[key] = F32.unpack_from(r.take(4, "score"))[0]
            elif tag in (9, 10):
                setattr(d, "chunks" if tag == 9 else "matches", read_documents(r, numpy, depth + 1))
            else:
                raise ValueError(f"bad frame at byte {at - 1}: unknown document field tag {tag}")
            at = r.at
        docs.append(d)
    r.at = at
    return docs


def put_str(out, value):
    data = value if isinstance(value, (bytes, bytearray, memoryview)) else str(value).encode("utf-8")
    out += U32.pack(len(data))
    out += data


def put_tensor(out, value, numpy, where):
    shared = out.shared if type(out) is Frame else None
    if shared is not None:
        known = shared.received.get(id(value))
        if known is not None and known[0] is value:  # a tensor of the request, answered as it is (or changed in
            out += tensor_head(value.ndim, True).pack(  # place): its offset
                tensor_code(value.dtype, numpy) | SHARED_BIT, value.ndim, *value.shape, value.nbytes, known[1])
            return
    if isinstance(value, RawTensor):
        code, shape, data = value.code, value.shape, value.data
    else:
        if numpy is None:
            raise TypeError(f"{where}: a tensor needs numpy in this Python")
        if hasattr(value, "detach"):  # a torch tensor
            value = value.detach().cpu().numpy()
        array = value if type(value) is numpy.ndarray else numpy.asarray(value)
        if array.dtype == numpy.float64 and not isinstance(value, numpy.ndarray):
            array = array.astype(numpy.float32)  # a list of Python floats: flowline's float32
        code = tensor_code(array.dtype, numpy)
        if code is None and array.dtype.byteorder == ">":  # big-endian: the same values in flowline's order
            array = array.astype(array.dtype.newbyteorder("<"))
            code = tensor_code(array.dtype, numpy)
        if code is None:
            raise TypeError(f"{where}: dtype {array.dtype} cannot cross to flowline")
        shape = array.shape
        # (memoryview cannot cast a view with a 0 in its shape: an empty tensor has no bytes anyway)
        data = memoryview(numpy.ascontiguousarray(array)).cast("B") if array.size else b""
    if shared is not None and len(data) >= SHARED_MIN_BYTES and shared.end - shared.at >= len(data):
        at = shared.at  # into the part of the request's region the client left for the answer
        shared.segment.view[at:at + len(data)] = data
        shared.at = at + (len(data) + SHARED_ALIGN - 1) // SHARED_ALIGN * SHARED_ALIGN
        out += tensor_head(len(shape), True).pack(code | SHARED_BIT, len(shape), *shape, len(data), at)
        return
    out += tensor_head(len(shape), False).pack(code, len(shape), *shape, len(data))
    spill = getattr(out, "spill", None)
    if spill is not None and len(data) >= LARGE_TENSOR_BYTES:
        spill.append((len(out), data))  # sent from the array's own memory (send_frame), not copied into `out`
    else:
        out += data


CODE_OF = None  # numpy dtype -> the wire's dtype code (native byte order only), made on first use


def tensor_code(dtype, numpy):
    """The wire's code of a numpy dtype, None when it cannot cross (a dict lookup: dtype.name costs ~1.5 us)."""
    global CODE_OF
    if CODE_OF is None:
        CODE_OF = {numpy.dtype(name): code for name, code in CODES.items()}
    return CODE_OF.get(dtype)


TENSOR_HEADS = {}  # (rank, shared) -> struct.Struct of a tensor's head: dtype, rank, shape, size (, offset)


def tensor_head(rank, shared):
    head = TENSOR_HEADS.get((rank, shared))
    if head is None:
        head = TENSOR_HEADS[(rank, shared)] = struct.Struct(f"<BB{rank}QQ{'Q' if shared else ''}")
    return head


# A tensor this large in an answer is not copied into the answer's bytearray: the socket sends it from the
# array's memory (sendmsg of the frame's parts), one copy fewer of each image-sized tensor.
LARGE_TENSOR_BYTES = 64 << 10


# Version 4: tensors of at least this many bytes go through the segment (as flowline's client sends them), each
# at a multiple of SHARED_ALIGN.
SHARED_MIN_BYTES, SHARED_ALIGN = 16 << 10, 64


class Segment:
    """A connection's shared-memory segment (version 4): the client's memfd, mapped here."""

    def __init__(self, mapping):
        self.mapping, self.view, self.size = mapping, memoryview(mapping), len(mapping)


def map_segment(offer):
    """Maps the segment a Segment frame offers: (Segment, "") or (None, why not)."""
    import mmap

    size, pid, fd = struct.unpack_from("<QII", offer.take(16, "segment"))
    token = bytes(offer.raw("token"))
    if offer.at != len(offer.view):
        raise ValueError(f"bad frame at byte {offer.at}: bytes after the last field")
    path = f"/proc/{pid}/fd/{fd}"
    try:
        handle = os.open(path, os.O_RDWR)
    except OSError as e:
        return None, f"cannot open {path}: {e.strerror}"
    try:
        if os.fstat(handle).st_size < size or size < len(token) or len(token) != 16:
            return None, f"{path} is not a segment of {size} bytes"
        mapping = mmap.mmap(handle, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError) as e:
        return None, f"cannot map {path}: {e}"
    finally:
        os.close(handle)
    if mapping[:16] != token:
        mapping.close()
        return None, f"{path} is not the client's segment (its token differs)"
    return Segment(mapping), ""


class Cursor:
    """Where an answer's tensors go in the request's region: [at, end) of the segment; `received` names the
    request's own tensors (answered by offset)."""

    __slots__ = ("segment", "at", "end", "received")

    def __init__(self, segment, at, end, received):
        self.segment, self.at, self.end, self.received = segment, at, end, received


class Frame(bytearray):
    """An answer frame whose large tensors are kept aside in `spill`: (offset in this bytearray, bytes), or,
    with a Cursor in `shared`, written into the connection's segment."""

    def __init__(self, *args):
        super().__init__(*args)
        self.spill = []
        self.shared = None

    def size(self):
        return len(self) + sum(len(data) for _, data in self.spill)


def send_frame(conn, out):
    """Sends a Frame with its spilled tensors in place, without joining them. The arrays are read while the
    answer goes out, as they always were while it was encoded (outside the executor's lock): a handler must
    not change an array it returned once another request (another connection's) may run."""
    whole, parts, at = memoryview(out), [], 0
    for offset, data in out.spill:
        parts += (whole[at:offset], data)
        at = offset
    parts = [p for p in parts + [whole[at:]] if len(p)]
    while parts:
        sent = conn.sendmsg(parts[:512])  # IOV_MAX is 1024 on Linux
        while sent and sent >= len(parts[0]):
            sent -= len(parts.pop(0))
        if sent:
            parts[0] = parts[0][sent:]


def put_documents(out, docs, numpy, where="docs"):
    """Appends the documents to `out`, a bytearray (the hot path: no list of parts, few calls)."""
    out += U32.pack(len(docs))
    for i, d in enumerate(docs):
        if type(d) is not Document and not isinstance(d, Document):
            raise TypeError(f"{where}[{i}]: expected a flowline.Document, not {type(d).__name__}")
        count_at = len(out)
        out.append(0)
        fields = 0
        for tag, value in ((0, d.id), (1, d.text), (2, d.blob), (6, d.mime_type), (7, d.uri), (11, d.parent_id)):
            if value:
                out.append(tag)
                data = value if isinstance(value, (bytes, bytearray, memoryview)) else str(value).encode("utf-8")
                out += U32.pack(len(data))
                out += data
                fields += 1
        for tag, name in ((3, "tensor"), (4, "embedding")):
            value = getattr(d, name)
            if value is not None:
                out.append(tag)
                put_tensor(out, value, numpy, f"{where}[{i}].{name}")
                fields += 1
        if d.tags:
            out.append(5)
            put_str(out, json.dumps(dict(d.tags)))
            fields += 1
        if d.scores:
            out.append(8)
            out += U32.pack(len(d.scores))
            for k, v in d.scores.items():
                put_str(out, k)
                out += F32.pack(float(v))
            fields += 1
        for tag, name in ((9, "chunks"), (10, "matches")):
            value = getattr(d, name)
            if value:
                out.append(tag)
                put_documents(out, value, numpy, f"{where}[{i}].{name}")
                fields += 1
        out[count_at] = fields


def frame(kind, body):
    """A whole frame: the length prefix, the type and `body` (bytes-like)."""
    return U32.pack(1 + len(body)) + U8.pack(kind) + body


# ---- serving ----------------------------------------------------------------------------------------------

class Served:
    """The executor instance and how to call it: one request at a time, or as many as the class's
    `concurrent_requests` says (a class that is safe to call from that many threads at once)."""

    def __init__(self, cls, kind, name, with_, runtime):
        self.name, self.kind, self.type = name, kind, cls.__name__
        if kind == "jina":
            sys.path.insert(0, HERE)
            import jina_adapter  # noqa: E402 — beside this file, imported only for Jina classes

            self.adapter = jina_adapter.JinaAdapter(cls, with_, name, Document, RequestError)
        else:
            self.adapter = None
            self.instance = cls(**with_, runtime=runtime)
            self.handlers = {}
            for attr in dir(cls):
                for endpoint in getattr(getattr(cls, attr, None), "_flowline_endpoints", ()):
                    self.handlers[endpoint] = attr
        # read from the instance, which may decide by its settings (OnnxModel: two on a GPU, one on the CPU)
        self.concurrency = concurrency_of(self.instance) if self.adapter is None else 1
        self.lock = threading.Lock() if self.concurrency == 1 else threading.BoundedSemaphore(self.concurrency)

    def call(self, endpoint, docs, parameters):
        if self.adapter is not None:
            return self.adapter.call(endpoint, docs, parameters)
        method = self.handlers.get(endpoint) or self.handlers.get(DEFAULT)
        if method is None:
            return docs  # no handler for this endpoint: documents pass through, as in Jina
        result = getattr(self.instance, method)(docs, parameters, endpoint=endpoint)
        return docs if result is None else list(result)


def concurrency_of(instance):
    """An executor's `concurrent_requests` (a class or instance attribute, default 1): how many requests its
    worker runs at once on it."""
    value = getattr(instance, "concurrent_requests", 1)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 64:
        raise ValueError(f"{type(instance).__name__}.concurrent_requests must be an integer from 1 to 64, "
                         f"got {value!r}")
    return value


def error_text(e):
    if isinstance(e, RequestError):
        return str(e)  # the client's mistake: its message is the whole story
    frames = traceback.extract_tb(e.__traceback__)
    where = f" ({os.path.basename(frames[-1].filename)}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(e).__name__}: {e}{where}"


def read_exact(conn, n):
    buf, got = bytearray(n), 0
    view = memoryview(buf)
    while got < n:
        k = conn.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return buf


def negotiate(r):
    """The version a Hello's body (after the magic) gets, or raises ValueError with the Error frame's text."""
    low, high = struct.unpack_from("<HH", r.take(4, "versions"))
    version = min(high, VERSION)
    if version < low or version < MIN_VERSION:
        raise ValueError(f"unsupported protocol version {low}..{high}: this server speaks versions "
                         f"{MIN_VERSION}..{VERSION}")
    return version


def serve_connection(conn, served, numpy):
    with conn:  # closed when the peer goes or after an Error frame
        serve_frames(conn, served, numpy)


def serve_frames(conn, served, numpy):
    """Reads the connection's frames in turn. A Request is answered on this thread, or, when the executor takes
    several at once (Served.concurrency), on one of that many threads, each answer sent as soon as it is done
    (the protocol's answers carry their request's id, in any order), one frame at a time."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sending = threading.Lock()  # one frame at a time on the socket
    pool = taking = None
    if served.concurrency > 1:
        import concurrent.futures

        pool = concurrent.futures.ThreadPoolExecutor(served.concurrency, thread_name_prefix="request")
        # What the Welcome promises: N requests running and one read ahead, then no more reading until one ends
        # (the flow keeps N + 1 in flight: a request's bytes wait here, not in an unbounded queue).
        taking = threading.BoundedSemaphore(served.concurrency + 1)
    try:
        serve_frames_with(conn, served, numpy, sending, pool, taking)
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)


def respond(conn, sending, r, served, numpy, version, segment, taking):
    """A Request answered on a pool thread; a malformed frame ends the connection as on the reading thread."""
    try:
        out = answer(r, served, numpy, version, segment)
        with sending:
            send_frame(conn, out)
    except (ValueError, struct.error) as e:
        try:
            with sending:
                send_error(conn, str(e))
            conn.shutdown(socket.SHUT_RDWR)  # the reading thread sees the end
        except OSError:
            pass
    except OSError:  # the connection went while the request ran: nobody to answer
        pass
    except Exception:  # noqa: BLE001 — what would end the reading thread's connection ends it here too: the
        traceback.print_exc()  # flow then fails the requests in flight on it rather than wait for an answer
        try:
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    finally:
        taking.release()  # the reading thread may take the next request


def serve_frames_with(conn, served, numpy, sending, pool, taking):
    hello, version, segment = True, MIN_VERSION, None
    while True:
        head = read_exact(conn, 4)
        if head is None:
            return
        length = struct.unpack("<I", head)[0]
        if not 0 < length <= MAX_FRAME_BYTES:
            with sending:
                return send_error(conn, f"bad frame length {length}: 1 to {MAX_FRAME_BYTES} bytes")
        body = read_exact(conn, length)
        if body is None:
            return
        kind, r = body[0], Reader(body, 1)
        try:
            if hello:
                if kind != 1 or bytes(r.take(4, "magic")) != b"FLWL":
                    with sending:
                        return send_error(conn, "expected a Hello frame first")
                version, hello = negotiate(r), False
                welcome = bytearray(struct.pack("<H", version))
                put_str(welcome, served.name)
                put_str(welcome, served.type)
                # The requests taken before reading stops: one answered on this thread, else N + 1 (above).
                welcome += struct.pack("<II", MAX_FRAME_BYTES, 1 if pool is None else served.concurrency + 1)
                with sending:
                    conn.sendall(frame(2, welcome))
            elif kind == 3:
                if pool is not None:
                    taking.acquire()
                    pool.submit(respond, conn, sending, r, served, numpy, version, segment, taking)
                    continue
                out = answer(r, served, numpy, version, segment)
                with sending:
                    send_frame(conn, out)
            elif kind == 6:
                with sending:
                    conn.sendall(frame(7, bytes(r.take(8, "nonce"))))
            elif kind == 8 and version >= 3:
                r.take(8, "id")  # the request ran already: its answer went out before this was read
            elif kind == 9 and version >= 4:
                if segment is not None:
                    with sending:
                        return send_error(conn, "a second Segment frame")
                segment, why = map_segment(r)
                reply = bytearray(U8.pack(1 if segment else 0))
                put_str(reply, why)
                with sending:
                    conn.sendall(frame(10, reply))
            else:
                with sending:
                    return send_error(conn, f"a client may not send frame type {kind} (protocol version {version})")
        except (ValueError, struct.error) as e:  # a malformed frame: say what, close the connection
            with sending:
                return send_error(conn, str(e))


def send_error(conn, message):
    body = bytearray()
    put_str(body, message)
    conn.sendall(frame(5, body))


def answer(r, served, numpy, version=VERSION, segment=None):
    """The Response frame for the Request in `r`; a handler's exception fails its request alone (status 2 for
    a RequestError on a version 2 connection, else 1). On a version 4 connection with a segment, the request's
    tensors there are arrays over it, and the answer's tensors go there: the request's own by their offset,
    others (of SHARED_MIN_BYTES or more) copied into the region's free part while they fit, the rest inline."""
    request_id = r.u64()
    if version >= 3:
        r.u32()  # deadline_ms: a request here runs to its end
    cursor = None
    if version >= 4:
        at = r.at
        begin, size, free = struct.unpack_from("<QQQ", r.take(24, "region"))
        if size:
            if segment is None or begin > segment.size or size > segment.size - begin or not begin <= free <= begin + size:
                raise ValueError(f"bad frame at byte {at}: the request's region [{begin}, +{size}) is not within "
                                 f"the connection's shared segment")
            r.region = (segment, begin, begin + size)
            cursor = Cursor(segment, free, begin + size, r.received)
    endpoint, params = r.str(), r.str()
    docs = read_documents(r, numpy)
    if r.at != len(r.view):
        raise ValueError(f"bad frame at byte {r.at}: {len(r.view) - r.at} bytes after the last document")
    head = U32.pack(0) + U8.pack(4) + U64.pack(request_id)
    try:
        with served.lock:
            out = served.call(endpoint, docs, json.loads(params) if params else {})
        body = Frame(head + b"\0\0\0\0\0\0\0\0\0")  # status 0, no error, no error executor
        body.shared = cursor
        put_documents(body, out, numpy)
    except Exception as e:  # noqa: BLE001 — a handler's exception fails its request alone
        refused = isinstance(e, RequestError) and version >= 2
        body = Frame(head + U8.pack(STATUS_REQUEST_ERROR if refused else STATUS_FAILED))
        if cursor is not None:
            cursor.at = free
        body.shared = cursor
        put_str(body, error_text(e))
        put_str(body, served.name)
        put_documents(body, docs, numpy)
    body[0:4] = U32.pack(body.size() - 4)
    return body


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
    parser.add_argument("--device", help="the replica's device as the flow decided it, cpu or cuda:N (runtime['device']; "
                        "a worker started by hand for `hosts:` has none)")
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
    if args.device:
        runtime["device"] = args.device
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
    # the flow reads the port, and how many requests this executor takes at once (it keeps one more in flight)
    print(f"serving {name} on 127.0.0.1:{listener.getsockname()[1]}, {served.concurrency} at once", flush=True)
    os.dup2(2, 1)  # later prints go to stderr: nobody reads the pipe after the first line
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve_connection, args=(conn, served, numpy), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
