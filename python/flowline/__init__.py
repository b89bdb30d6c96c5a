"""flowline from Python: the C++ flows in this process, at C++ speed.

    import flowline
    with flowline.Flow.load("flows/encode.yml", overrides={"encoder.model": "models/all-MiniLM-L6-v2"}) as flow:
        docs = flow.post("/encode", ["a text", {"text": "another", "tags": {"k": 1}}])
    encoder = flowline.SentenceEncoder("models/all-MiniLM-L6-v2")   # sentence-transformers' encode()
    vectors = encoder.encode(["a text", "another"])                  # numpy [2, 384]

LibTorch is the torch wheel's (torch==2.11.0 in this Python): this file loads its libc10.so and
libtorch_cpu.so by path, without importing torch (which fails on flowline's light CPU install), before the
extension module flowline._flowline that links them. No CUDA library is mapped until a flow names a GPU.
Tensors come back as numpy arrays sharing flowline's memory; torch.from_numpy / torch.from_dlpack share it
again (no copy). docs/python.md is the guide.
"""

import atexit
import ctypes
import importlib.util
import os
import sys

from ._build_info import TORCH_VERSION as _TORCH_BUILT


def _load_libtorch():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"flowline needs the torch wheel it was built against (torch=={_TORCH_BUILT.split('+')[0]}) in this "
            "Python: pip install torch==" + _TORCH_BUILT.split("+")[0]
        )
    torch_dir = spec.submodule_search_locations[0]
    version_file = os.path.join(torch_dir, "version.py")
    installed = ""
    if os.path.exists(version_file):
        with open(version_file, encoding="utf-8") as f:
            for line in f:
                if line.startswith("__version__"):
                    installed = line.split("=", 1)[1].strip().strip("'\"")
    if installed.split("+")[0] != _TORCH_BUILT.split("+")[0]:
        raise ImportError(
            f"flowline was built against torch {_TORCH_BUILT}, but this Python has torch {installed or '(unknown)'} "
            f"in {torch_dir}: install torch=={_TORCH_BUILT.split('+')[0]} or rebuild flowline against this one"
        )
    lib = os.path.join(torch_dir, "lib")
    for name in ("libc10.so", "libtorch_cpu.so"):
        ctypes.CDLL(os.path.join(lib, name), mode=ctypes.RTLD_GLOBAL)


_load_libtorch()

# A flow started from this process runs its Python executors' workers (py_modules) with this interpreter and
# this package's worker script, unless FLOWLINE_PYTHON / `python:` name another interpreter.
os.environ.setdefault("FLOWLINE_PACKAGE_PYTHON", sys.executable)
os.environ.setdefault("FLOWLINE_PY_WORKER", os.path.join(os.path.dirname(os.path.abspath(__file__)), "pyworker.py"))

from ._flowline import ConfigError, Document, Flow, FlowError  # noqa: E402
from ._document_list import DocumentList  # noqa: E402
from ._executors import Executor, RequestError, requests  # noqa: E402
from ._flowline import _close_all_flows, set_log_level  # noqa: E402

atexit.register(_close_all_flows)
from ._cross_encoder import CrossEncoder, Reranker  # noqa: E402
from ._models import SentenceEncoder, SentenceTransformer  # noqa: E402
from ._pipelines import (TextClassificationPipeline, TokenClassificationPipeline,  # noqa: E402
                         ZeroShotImageClassificationPipeline, pipeline)

__all__ = ["ConfigError", "CrossEncoder", "Document", "DocumentList", "Executor", "Flow", "FlowError", "Reranker",
           "RequestError", "SentenceEncoder", "SentenceTransformer", "TextClassificationPipeline",
           "TokenClassificationPipeline", "ZeroShotImageClassificationPipeline", "pipeline", "requests",
           "set_log_level"]
