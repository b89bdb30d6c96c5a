#!/usr/bin/env python3
"""Jina's own Python client sending request parameters to a running `flowline serve` of a VectorIndex
followed by a Reranker (issue 51 §2: request parameters declared, checked once, typed), over HTTP and gRPC.

    .venv-clients/bin/python tests/gateway/clients/jina_params_test.py --url http://127.0.0.1:PORT \
        --grpc-url grpc://127.0.0.1:PORT [--timeout 120]

The flow's index (4 dimensions) gets 12 documents with embeddings from the client; then, over each protocol:

  1. /search with {"limit": 5.0, "top_n": 3.0} (whole numbers sent as doubles, as protobuf's Struct sends
     every number) is answered: the index found 5, the reranker kept 3, best first by relevance_score;
  2. {"limit": 5.5} is refused, the error naming 'limit' and "expected an integer";
  3. {"top_n": "3"} is refused, the error naming 'top_n' and "expected an integer";
  4. the server still answers the next good request.

Exit 0 when all pass, 1 with a message naming the failed check, 2 on bad arguments or a missing package,
3 on the watchdog.
"""
import os
import sys
from typing import Optional

os.environ.setdefault('JINA_LOG_LEVEL', 'ERROR')
os.environ.setdefault('JINA_OPTOUT_TELEMETRY', '1')

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_check import begin, check, make_log, new_parser, run_script  # noqa: E402

NAME = 'jina_params_test'
log = make_log(NAME)


def main():
    p = new_parser(__doc__, 'http://127.0.0.1:PORT of the running server', 'unused')
    p.add_argument('--grpc-url', required=True, help='grpc://127.0.0.1:PORT of the same server')
    args = p.parse_args()
    u = begin(NAME, args)
    if u is None:
        return 2
    g = begin(NAME, argparse_namespace(args.grpc_url, args.timeout), schemes=('grpc',))
    if g is None:
        return 2
    try:
        from docarray import BaseDoc, DocList
        from docarray.typing import NdArray
        from jina import Client
    except ImportError as e:
        log(f'cannot import the Jina client ({e}); run with .venv-clients/bin/python')
        return 2

    class Doc(BaseDoc):
        text: Optional[str] = None
        embedding: Optional[NdArray] = None
        tags: dict = {}

    class Match(BaseDoc):
        text: Optional[str] = None
        scores: dict = {}
        tags: dict = {}

    class Query(BaseDoc):
        text: Optional[str] = None
        embedding: Optional[NdArray] = None
        matches: Optional[DocList[Match]] = None

    import numpy as np
    words = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta', 'iota', 'kappa', 'lambda', 'mu']
    docs = DocList[Doc]([Doc(id=f'd{i}', text=f'the {w} paragraph',
                             embedding=np.array([1.0, i / 12, (i % 3) / 3, 0.5], dtype=np.float32))
                         for i, w in enumerate(words)])
    timeout = max(1, int(args.timeout))
    http = Client(protocol='http', host=u.hostname, port=u.port)
    grpc = Client(protocol='grpc', host=g.hostname, port=g.port)
    indexed = http.post('/index', inputs=docs, return_type=DocList[Doc], timeout=timeout)
    check(len(indexed) == 12, f'/index answered {len(indexed)} documents')
    query = DocList[Query]([Query(text='the beta paragraph', embedding=np.array([1.0, 0.1, 0.3, 0.5],
                                                                                 dtype=np.float32))])

    for name, client in (('http', http), ('grpc', grpc)):
        def search(**parameters):
            return client.post('/search', inputs=query, parameters=parameters, return_type=DocList[Query],
                               timeout=timeout)

        out = search(limit=5.0, top_n=3.0)
        matches = out[0].matches
        check(matches is not None and len(matches) == 3, f'{name}: limit 5.0, top_n 3.0 gave '
                                                         f'{0 if matches is None else len(matches)} matches, not 3')
        # Over HTTP a score is Jina's {"value": x}; over gRPC docarray gives the number itself.
        scores = [m.scores['relevance_score'] for m in matches]
        scores = [s['value'] if isinstance(s, dict) else s for s in scores]
        check(scores == sorted(scores, reverse=True), f'{name}: matches not best first: {scores}')
        log(f'1. {name}: limit 5.0 and top_n 3.0 are the integers 5 and 3')

        for parameters, named in (({'limit': 5.5}, "parameter 'limit'"), ({'top_n': '3'}, "parameter 'top_n'")):
            try:
                search(**parameters)
                check(False, f'{name}: {parameters} was answered')
            except Exception as e:  # Jina raises BadServer / BadServerFlow / ValueError by protocol
                text = str(e).replace('\\', '')  # the HTTP client's message is a repr of the answer
                check(named in text and 'expected an integer' in text, f'{name}: {parameters} refused as {text!r}')
        log(f'2-3. {name}: limit 5.5 and top_n "3" refused, naming the parameter')
        check(len(search(limit=2)[0].matches) == 2, f'{name}: the next request (limit 2) was not answered')
        log(f'4. {name}: the next request is answered')
    log('PASSED')
    return 0


def argparse_namespace(url, timeout):
    class Args:
        pass

    a = Args()
    a.url, a.timeout = url, timeout
    return a


if __name__ == '__main__':
    run_script(NAME, main, 'the Jina client')
