#!/usr/bin/env python3
"""Jina's own Python HTTP client against a running `flowline serve`.

    .venv-clients/bin/python tests/gateway/clients/jina_client_test.py --url http://127.0.0.1:PORT \
        --expect-dim 384 [--reference REF.json] [--endpoint /encode] [--timeout 60]

The server must already be running (the C++ test harness starts it). Uses
`jina.Client(protocol='http')` with docarray v2 (`DocList[TextDoc]`), as a Jina user would, and checks:

  1. 3 texts posted to the endpoint come back as 3 docs, in order, with the same texts, each with a finite
     embedding of --expect-dim floats (and, with --reference {"text": [floats], ...}, within --tolerance of
     the reference for every posted text the file has; the 3 texts are then the file's first keys);
  2. 250 docs in ONE HTTP request (request_size=250; Jina's own gateway returns only the first 100 of such
     a request) all come back, in order;
  3. the same 250 docs with the client's default request_size (100): three requests sent concurrently,
     reassembled in order (results_in_order=True), the same embeddings as in 2 within --tolerance;
  4. a LegacyDocument with a tensor comes back with the same values, read by the client (the answer's tensor
     is a nested list, as docarray writes it).

--expect-dim 0 skips every embedding check (for a flow that sets none, e.g. a no-op). Exit 0 when all pass,
1 with a message naming the failed check, 2 on bad arguments or a missing package, 3 on the watchdog
(--timeout seconds for the whole run, so the test never hangs).
"""
import os
import sys
import time

os.environ.setdefault('JINA_LOG_LEVEL', 'ERROR')
os.environ.setdefault('JINA_OPTOUT_TELEMETRY', '1')

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_check import (DEFAULT_TEXTS, begin, check, load_reference, make_log, new_parser,  # noqa: E402
                          run_script)

NAME = 'jina_client_test'
log = make_log(NAME)


def parse_args():
    p = new_parser(__doc__, 'http://127.0.0.1:PORT of the running server', 'embedding dimension; 0 = no embedding checks')
    p.add_argument('--endpoint', default='/encode', help="the `on=` of client.post (default /encode)")
    p.add_argument('--require-openapi', action='store_true',
                   help='fail unless GET /openapi.json lists the endpoint (so the client posts to it, '
                        'not to /post)')
    return p.parse_args()


def embeddings_of(docs, dim, what):
    """Checks every doc has a finite embedding of `dim` floats; returns them as a list of numpy arrays."""
    import numpy as np

    out = []
    for i, d in enumerate(docs):
        e = d.embedding
        check(e is not None, f'{what}: doc {i} ({d.text[:40]!r}) has no embedding')
        a = np.asarray(e, dtype=np.float64)
        check(a.shape == (dim,), f'{what}: doc {i} embedding has shape {a.shape}, expected ({dim},)')
        check(bool(np.all(np.isfinite(a))), f'{what}: doc {i} embedding has a non-finite value')
        out.append(a)
    return out


def texts_in_order(docs, texts, what):
    got = [d.text for d in docs]
    check(len(got) == len(texts), f'{what}: got {len(got)} docs back, sent {len(texts)}')
    for i, (g, t) in enumerate(zip(got, texts)):
        check(g == t, f'{what}: doc {i} came back with text {g!r}, sent {t!r} (wrong order or content)')


def main():
    args = parse_args()
    u = begin(NAME, args)
    if u is None:
        return 2
    try:
        import numpy as np
        from docarray import DocList
        from docarray.documents import TextDoc
        from jina import Client
    except ImportError as e:
        log(f'cannot import the Jina client ({e}); run with .venv-clients/bin/python '
            f'(created by scripts/setup-clients.sh)')
        return 2

    reference, texts = load_reference(args.reference)
    dim = args.expect_dim
    client = Client(protocol='http', host=u.hostname, port=u.port)
    http_timeout = max(1, int(args.timeout))

    # 1. three texts
    t0 = time.monotonic()
    docs = client.post(args.endpoint, inputs=DocList[TextDoc]([TextDoc(text=t) for t in texts]),
                       return_type=DocList[TextDoc], timeout=http_timeout)
    ms = (time.monotonic() - t0) * 1000
    endpoints = list(getattr(client, '_endpoints', []))
    ep = args.endpoint.strip('/')
    posted_to = ('/' + ep) if ep and ep in endpoints else '/default' if 'default' in endpoints else '/post'
    log(f'GET /openapi.json listed POST routes {sorted("/" + e for e in endpoints)}; '
        f'so the client posted to {posted_to}')
    if args.require_openapi:
        check(posted_to == '/' + ep, f'/openapi.json does not list POST /{ep}: the client fell back to {posted_to}')
    check(isinstance(docs, DocList), f'3 texts: client returned {type(docs).__name__}, expected a DocList')
    texts_in_order(docs, texts, '3 texts')
    if dim > 0:
        embs = embeddings_of(docs, dim, '3 texts')
        log(f'3 texts: 3 docs back in order, same texts, finite {dim}-dim embeddings ({ms:.0f} ms)')
        if reference is not None:
            compared = 0
            for t, e in zip(texts, embs):
                if t not in reference:
                    continue
                r = np.asarray(reference[t], dtype=np.float64)
                check(r.shape == e.shape, f'reference for {t[:40]!r} has {r.size} floats, server gave {e.size}')
                diff = float(np.max(np.abs(r - e)))
                check(diff <= args.tolerance,
                      f'3 texts: embedding of {t[:40]!r} differs from the reference by {diff:.3g} '
                      f'(> {args.tolerance:g})')
                compared += 1
                log(f'  {t[:40]!r}: max |server - reference| = {diff:.3g} <= {args.tolerance:g}')
            check(compared > 0, 'the reference file has none of the posted texts')
    else:
        log(f'3 texts: 3 docs back in order, same texts ({ms:.0f} ms; --expect-dim 0: embeddings not checked)')

    # 2. 250 docs in one request
    many = [f'document {i:03d}: {DEFAULT_TEXTS[i % 3]}' for i in range(250)]
    t0 = time.monotonic()
    one = client.post(args.endpoint, inputs=DocList[TextDoc]([TextDoc(text=t) for t in many]),
                      return_type=DocList[TextDoc], request_size=len(many), timeout=http_timeout)
    ms = (time.monotonic() - t0) * 1000
    texts_in_order(one, many, '250 docs in one request')
    one_embs = embeddings_of(one, dim, '250 docs in one request') if dim > 0 else None
    log(f'250 docs in one request: all 250 back in order ({ms:.0f} ms)')

    # 3. 250 docs in 3 concurrent requests of <= 100 (the client's default request_size)
    t0 = time.monotonic()
    split = client.post(args.endpoint, inputs=DocList[TextDoc]([TextDoc(text=t) for t in many]),
                        return_type=DocList[TextDoc], results_in_order=True, timeout=http_timeout)
    ms = (time.monotonic() - t0) * 1000
    texts_in_order(split, many, '250 docs as 3 requests')
    if dim > 0:
        split_embs = embeddings_of(split, dim, '250 docs as 3 requests')
        worst = max(float(np.max(np.abs(a - b))) for a, b in zip(one_embs, split_embs))
        check(worst <= args.tolerance,
              f'250 docs: embeddings differ by {worst:.3g} between one request and three (> {args.tolerance:g})')
        log(f'250 docs as 3 requests of <= 100: all back in order, embeddings equal to the one-request run '
            f'within {worst:.3g} ({ms:.0f} ms)')
    else:
        log(f'250 docs as 3 requests of <= 100: all back in order ({ms:.0f} ms)')

    # 4. A document with a tensor (docarray's LegacyDocument): the answer's tensor reads back in the client
    from docarray.documents.legacy import LegacyDocument

    sent = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    back = client.post(args.endpoint, inputs=DocList[LegacyDocument]([LegacyDocument(text=DEFAULT_TEXTS[0],
                                                                                     tensor=sent)]),
                       return_type=DocList[LegacyDocument], timeout=http_timeout)
    check(len(back) == 1 and back[0].tensor is not None, f'a document with a tensor came back as {back!r:.200}')
    check(np.array_equal(np.asarray(back[0].tensor), sent),
          f'a [2, 4, 3] tensor came back as {np.asarray(back[0].tensor)!r:.200}')
    log('a LegacyDocument with a [2, 4, 3] tensor: the same values back, read by the client')
    log('PASSED')
    return 0


if __name__ == '__main__':
    run_script(NAME, main, 'the Jina client', detail=repr)
