"""Serves a Python executor to flowline flows over flowline's binary protocol (issue 53 §2, first part).

    python -m flowline.worker --py-modules my_executors.py --uses Upper [--with '{"suffix": "!"}']
        [--name upper] [--replicas 1] [--host 127.0.0.1] [--port 9000]

Imports the modules (each file's folder on sys.path first, so its siblings import), builds a flow of the one
executor `uses` (a flowline.Executor subclass those modules define) and serves it as `flowline serve FLOW
--executor NAME` serves a C++ one: a flow lists it under `hosts:` (docs/remote-executors.md) and gets
batching, failover and accounting from the remote machinery; a handler that raises fails its request alone,
the error naming the traceback's last frame. Prints `serving NAME on HOST:PORT` once it listens; SIGTERM or
SIGINT stops it (answers in flight go out first). A flow file that names the class with `py_modules:` needs
none of this: the flow starts, restarts and stops its own workers (pyworker.py, docs/python.md).
"""

import argparse
import json
import os
import signal
import sys
import threading

import flowline
from flowline import _flowline, pyworker


def import_file(path):
    """The file's module, loaded as the workers a flow starts load theirs (pyworker.import_file); a file that
    cannot be loaded ends the worker with its message and file:line."""
    try:
        return pyworker.import_file(path)
    except pyworker.LoadError as e:
        where = f"{e.file}:{e.line}: " if e.line else ""
        raise SystemExit(f"flowline.worker: {where}{e.message}") from None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m flowline.worker", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--py-modules", nargs="+", required=True, help="Python files defining the executor")
    parser.add_argument("--uses", required=True, help="the flowline.Executor subclass to serve")
    parser.add_argument("--with", dest="with_", default="{}", help="its __init__ keywords, as JSON")
    parser.add_argument("--name", default=None, help="the executor's name (default: --uses)")
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000, help="0: a free port (printed)")
    args = parser.parse_args(argv)
    for path in args.py_modules:
        import_file(path)
    name = args.name or args.uses
    config = {"executors": [{"name": name, "uses": args.uses, "replicas": args.replicas,
                             "with": json.loads(args.with_)}]}
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with flowline.Flow.from_yaml(json.dumps(config), os.path.join(os.getcwd(), f"<worker {name}>.yml")) as flow:
        server = flow._serve(name, args.host, args.port)
        print(f"serving {name} on {args.host}:{server.port}", flush=True)
        while not stop.wait(0.5):
            pass
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
