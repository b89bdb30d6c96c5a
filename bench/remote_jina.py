#!/usr/bin/env python3
"""Jina's side of bench/remote_flow.py: a Jina 3.34.0 Flow with three no-op executors, each its own
process with gRPC between them (Jina's way of running executors as services), fed by Jina's own client
over gRPC with 100-document requests. Prints docs/s; run it beside remote_flow.py in one command:

    .venv-clients/bin/python bench/remote_jina.py [--docs 100000] [--runs 2]
    python3 bench/remote_flow.py --runs 2 --in-flight 4

(--docs defaults to 100,000: Jina's rate makes a million a several-minute run; docs/s is what is compared.)
"""
import argparse
import time

from docarray import DocList
from docarray.documents import TextDoc
from jina import Executor, Flow, requests


class NoOp(Executor):
    @requests
    def f(self, docs: DocList[TextDoc], **kwargs) -> DocList[TextDoc]:
        return docs


def main():
    a = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--docs", type=int, default=100_000)
    a.add_argument("--request-size", type=int, default=100)
    a.add_argument("--runs", type=int, default=2)
    o = a.parse_args()
    docs = DocList[TextDoc]([TextDoc(text=f"document {i} of the remote benchmark") for i in range(o.docs)])
    flow = Flow(protocol="grpc").add(uses=NoOp, name="first").add(uses=NoOp, name="mid").add(uses=NoOp, name="last")
    with flow:
        flow.post("/", inputs=docs[:1000], request_size=o.request_size, return_type=DocList[TextDoc])  # warm-up
        for r in range(o.runs):
            started = time.time()
            out = flow.post("/", inputs=docs, request_size=o.request_size, return_type=DocList[TextDoc])
            seconds = time.time() - started
            if len(out) != o.docs:
                raise SystemExit(f"Jina returned {len(out)} of {o.docs} documents")
            print(f"run {r + 1} jina: {o.docs:,} docs in {seconds:.3f} s = {o.docs / seconds:,.0f} docs/s", flush=True)


if __name__ == "__main__":
    main()
