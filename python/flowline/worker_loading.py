"""Loading a Python executor's files for its worker (pyworker.py): each py_modules file imported with its
folder first on sys.path, the class found, and every failure a LoadError with the Python file's file:line,
which the flow's validate reports (docs/python.md). Standard library only, as pyworker.py."""

import importlib.util
import os
import sys
import traceback


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
