#!/usr/bin/env python3
"""Rerank clients against a running `flowline serve` whose flow has a Reranker: Cohere's official Python
package on /v1/rerank (cohere.Client) and /v2/rerank (cohere.ClientV2), and `requests` on TEI's /rerank.

    .venv-clients/bin/python tests/gateway/clients/rerank_client_test.py --url http://127.0.0.1:PORT \
        --pairs PAIRS.jsonl --scores PAIRS.safetensors [--tolerance 1e-4] [--timeout 120]

PAIRS.jsonl holds {"query", "document"} lines (one query); PAIRS.safetensors the tensor "scores" [N] that
sentence-transformers' CrossEncoder gave each pair (tests/data/tiny-models/*.pairs.*). Checks:

  1. cohere.Client.rerank(query, documents, top_n=3, return_documents=True): 3 results, best first, each
     index a distinct candidate, relevance_score within --tolerance of CrossEncoder's, document.text the
     candidate's text; the order is CrossEncoder's top 3;
  2. cohere.ClientV2.rerank(query, documents): every candidate once, best first, the same scores;
  3. requests.post(URL/rerank, {"query", "texts", "return_text": true}): TEI's array, every candidate once,
     best first, the same scores and texts.

Exit 0 when all pass, 1 with a message naming the failed check, 2 on bad arguments or a missing package,
3 on the watchdog (--timeout seconds for the whole run, so the test never hangs).
"""
import argparse
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_check import CheckFailed, check, make_log, run_script, start_watchdog  # noqa: E402

NAME = 'rerank_client_test'
log = make_log(NAME)


def read_scores(path):
    """The float32 tensor "scores" of a safetensors file (8-byte header size, JSON header, raw data)."""
    with open(path, 'rb') as f:
        data = f.read()
    (size,) = struct.unpack('<Q', data[:8])
    header = json.loads(data[8:8 + size])
    entry = header['scores']
    check(entry['dtype'] == 'F32', f'{path}: scores are {entry["dtype"]}, expected F32')
    begin, end = entry['data_offsets']
    raw = data[8 + size + begin:8 + size + end]
    return list(struct.unpack(f'<{len(raw) // 4}f', raw))


def read_pairs(path):
    query, documents = None, []
    with open(path) as f:
        for line in f:
            o = json.loads(line)
            query = o['query']
            documents.append(o['document'])
    check(query is not None and documents, f'{path}: no pairs')
    return query, documents


def check_ranking(what, results, expected, documents, tolerance, top_n=None):
    """results: [(index, score, text or None)] as the client parsed them."""
    want = sorted(range(len(expected)), key=lambda i: -expected[i])[: top_n or len(expected)]
    check(len(results) == len(want), f'{what}: {len(results)} results, expected {len(want)}')
    indices = [r[0] for r in results]
    check(len(set(indices)) == len(indices), f'{what}: an index twice: {indices}')
    scores = [r[1] for r in results]
    check(scores == sorted(scores, reverse=True), f'{what}: not best first: {scores}')
    for index, score, text in results:
        check(0 <= index < len(expected), f'{what}: index {index} out of range')
        diff = abs(score - expected[index])
        check(diff <= tolerance, f'{what}: candidate {index} scored {score}, CrossEncoder {expected[index]} '
                                 f'(|diff| {diff:.3g} > {tolerance:g})')
        if text is not None:
            check(text == documents[index], f'{what}: candidate {index} came back as {text!r}')
    check(indices == want, f"{what}: order {indices}, CrossEncoder's {want}")
    log(f'{what}: {len(results)} results in CrossEncoder\'s order, scores within {tolerance:g}')


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--url', required=True, help='http://127.0.0.1:PORT of the running server')
    p.add_argument('--pairs', required=True)
    p.add_argument('--scores', required=True)
    p.add_argument('--tolerance', type=float, default=1e-4)
    p.add_argument('--timeout', type=float, default=120)
    args = p.parse_args()
    start_watchdog(NAME, args.timeout)
    try:
        import cohere
        import requests
    except ImportError as e:
        log(f'missing package: {e} (run scripts/setup-clients.sh)')
        return 2
    query, documents = read_pairs(args.pairs)
    expected = read_scores(args.scores)
    check(len(expected) == len(documents), 'pairs and scores differ in length')

    # 1. Cohere v1
    v1 = cohere.Client(base_url=args.url, api_key='unused', timeout=60)
    r = v1.rerank(model='tiny-cross-encoder', query=query, documents=documents, top_n=3, return_documents=True)
    check_ranking('cohere.Client.rerank top_n=3',
                  [(x.index, x.relevance_score, x.document.text if x.document else None) for x in r.results],
                  expected, documents, args.tolerance, top_n=3)
    check(all(x.document is not None for x in r.results), 'cohere v1: return_documents=True without documents')

    # 2. Cohere v2
    v2 = cohere.ClientV2(base_url=args.url, api_key='unused', timeout=60)
    r = v2.rerank(model='tiny-cross-encoder', query=query, documents=documents)
    check_ranking('cohere.ClientV2.rerank', [(x.index, x.relevance_score, None) for x in r.results], expected,
                  documents, args.tolerance)

    # 3. TEI's /rerank with requests
    answer = requests.post(args.url + '/rerank', json={'query': query, 'texts': documents, 'return_text': True},
                           timeout=60)
    check(answer.status_code == 200, f'TEI /rerank: HTTP {answer.status_code}: {answer.text[:200]}')
    check_ranking('requests POST /rerank (TEI)', [(x['index'], x['score'], x['text']) for x in answer.json()],
                  expected, documents, args.tolerance)
    log('PASSED')
    return 0


if __name__ == '__main__':
    run_script(NAME, main, 'the cohere package or requests', detail=str)
