#!/usr/bin/env python3
"""Jina's own Python HTTP client indexing and searching through a running `flowline serve` of an
encoder + VectorIndex flow (flows/search.yml's shape).

    .venv-clients/bin/python tests/gateway/clients/jina_search_test.py --url http://127.0.0.1:PORT \
        --corpus PARAGRAPHS.txt [--timeout 120]

Uses `jina.Client(protocol='http')` with docarray v2 document types, as a Jina user would, and checks:

  1. /index of 60 paragraphs (the corpus file's first, blank-line separated) with the client's own ids and
     tags {"book", "n"} is answered with the same 60 documents;
  2. /status answers one document whose tags say count 60, dimension 384, metric cosine, backend exact;
  3. /search with a paragraph's own text and parameters {"limit": 5} gets 5 matches, best first, the first
     being that paragraph (its id, text and tags) with scores {"cosine": {"value": ~1}};
  4. /search with a filter on tags returns only matching documents;
  5. /delete of that paragraph, then the same search no longer finds it; /update of another's tags is seen.

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

NAME = 'jina_search_test'
log = make_log(NAME)


def parse_args():
    p = new_parser(__doc__, 'http://127.0.0.1:PORT of the running server', 'unused')
    p.add_argument('--corpus', required=True, help='a text file of blank-line separated paragraphs')
    return p.parse_args()


def main():
    args = parse_args()
    u = begin(NAME, args)
    if u is None:
        return 2
    try:
        from docarray import BaseDoc, DocList
        from jina import Client
    except ImportError as e:
        log(f'cannot import the Jina client ({e}); run with .venv-clients/bin/python')
        return 2

    class Paragraph(BaseDoc):
        text: Optional[str] = None
        tags: dict = {}

    class Match(BaseDoc):
        text: Optional[str] = None
        tags: dict = {}
        scores: dict = {}

    class Query(BaseDoc):
        text: Optional[str] = None
        tags: dict = {}
        matches: Optional[DocList[Match]] = None

    with open(args.corpus, encoding='utf-8') as f:
        paragraphs = [p.strip() for p in f.read().split('\n\n') if len(p.strip()) > 40][:60]
    check(len(paragraphs) == 60, f'{args.corpus} has fewer than 60 paragraphs')
    client = Client(protocol='http', host=u.hostname, port=u.port)
    timeout = max(1, int(args.timeout))

    def post(endpoint, docs, return_type, **parameters):
        return client.post(endpoint, inputs=docs, parameters=parameters, return_type=return_type, timeout=timeout)

    # 1. index with the client's own ids
    sent = DocList[Paragraph]([Paragraph(id=f'para-{i}', text=t, tags={'book': 'even' if i % 2 == 0 else 'odd',
                                                                        'n': i})
                               for i, t in enumerate(paragraphs)])
    indexed = post('/index', sent, DocList[Paragraph])
    check(len(indexed) == 60, f'/index answered {len(indexed)} documents, sent 60')
    check([d.id for d in indexed] == [d.id for d in sent], '/index answered other ids than the client sent')
    log('/index: 60 paragraphs indexed with the client\'s ids')

    # 2. status
    status = post('/status', DocList[Paragraph]([Paragraph()]), DocList[Paragraph])
    tags = status[0].tags
    check(int(tags.get('count', -1)) == 60, f'/status count is {tags.get("count")}, expected 60')
    check(int(tags.get('dimension', -1)) == 384, f'/status dimension is {tags.get("dimension")}, expected 384')
    check(tags.get('metric') == 'cosine' and tags.get('backend') == 'exact', f'/status says {tags}')
    log(f'/status: {tags}')

    # 3. search by a paragraph's own text
    target = 17
    found = post('/search', DocList[Query]([Query(text=paragraphs[target])]), DocList[Query], limit=5)
    matches = found[0].matches
    check(matches is not None and len(matches) == 5, f'/search limit 5 gave {0 if matches is None else len(matches)}')
    best = matches[0]
    check(best.id == f'para-{target}', f'/search: the best match is {best.id}, expected para-{target}')
    check(best.text == paragraphs[target], '/search: the best match came back without its text')
    check(best.tags.get('book') == 'odd' and int(best.tags.get('n')) == target, f'match tags {best.tags}')
    values = [m.scores['cosine']['value'] for m in matches]
    check(abs(values[0] - 1.0) < 1e-3, f'/search: the paragraph\'s own score is {values[0]}, expected ~1')
    check(values == sorted(values, reverse=True), f'/search: scores not best first: {values}')
    log(f'/search: 5 matches, best para-{target} at cosine {values[0]:.6f}, then {[round(v, 3) for v in values[1:]]}')

    # 4. filter
    filtered = post('/search', DocList[Query]([Query(text=paragraphs[target])]), DocList[Query], limit=10,
                    filter={'book': 'even', 'n': {'$lt': 30}})
    ms = filtered[0].matches
    check(len(ms) == 10, f'filtered /search gave {len(ms)} matches, expected 10')
    check(all(m.tags['book'] == 'even' and int(m.tags['n']) < 30 for m in ms), 'a filtered match fails the filter')
    log('/search with filter {"book": "even", "n": {"$lt": 30}}: 10 matches, all passing it')

    # 5. delete and update
    post('/delete', DocList[Paragraph]([Paragraph(id=f'para-{target}')]), DocList[Paragraph])
    again = post('/search', DocList[Query]([Query(text=paragraphs[target])]), DocList[Query], limit=60)[0].matches
    check(len(again) == 59 and all(m.id != f'para-{target}' for m in again), '/delete: the paragraph is still found')
    post('/update', DocList[Paragraph]([Paragraph(id='para-3', tags={'book': 'moved', 'n': 3})]), DocList[Paragraph])
    moved = post('/search', DocList[Query]([Query(text=paragraphs[3])]), DocList[Query], limit=1,
                 filter={'book': 'moved'})[0].matches
    check(len(moved) == 1 and moved[0].id == 'para-3' and moved[0].text == paragraphs[3], '/update not seen')
    log('/delete and /update: seen by the next search')
    log('PASSED')
    return 0


if __name__ == '__main__':
    run_script(NAME, main, 'the Jina client', detail=repr)
