#!/usr/bin/env python3
"""Hugging Face's own client against a running `flowline serve` whose flow has a TokenClassifier (flows/ner.yml):
huggingface_hub's InferenceClient(base_url=URL/token-classification).token_classification(text, ...) and
`requests` with a list of texts on POST /token-classification.

    .venv-clients/bin/python tests/gateway/clients/token_classification_client_test.py --url http://127.0.0.1:PORT \
        --goldens tests/data/tiny-models/bert-token-classifier.entities.jsonl [--tolerance 1e-4] [--timeout 120]

GOLDENS holds one line per text, {"text", "results": {RUN: entities}}, the entities transformers'
token-classification pipeline gave for each RUN: a strategy (none, simple, first, average, max),
"<strategy>+stride<N>" or "simple+keep_o" (ignore_labels=[]) (scripts/tiny_token_classifiers.py). Checks:

  1. InferenceClient.token_classification(text, aggregation_strategy=..., stride=..., ignore_labels=...) for
     every text and run: the client's TokenClassificationOutputElement list has the pipeline's entities (same
     entity_group or entity, word, start, end; score within --tolerance);
  2. requests.post(URL/token-classification, {"inputs": [texts], "parameters": {...}}) per run: one list per
     text in input order, the same entities (with strategy none each token's index too);
  3. a bad aggregation_strategy through the client raises its HTTP error with status 422.

Exit 0 when all pass, 1 with a message naming the failed check, 2 on bad arguments or a missing package,
3 on the watchdog (--timeout seconds for the whole run, so the test never hangs).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_check import CheckFailed, check, make_log, run_script, start_watchdog  # noqa: E402

NAME = 'token_classification_client_test'
log = make_log(NAME)


def read_goldens(path):
    with open(path, encoding='utf-8') as f:
        goldens = [json.loads(line) for line in f if line.strip()]
    check(goldens, f'{path}: no texts')
    return goldens


def run_parameters(run):
    """The request parameters of a run as the script that made the goldens names it."""
    strategy, _, extra = run.partition('+')
    p = {'aggregation_strategy': strategy}
    if extra == 'keep_o':
        p['ignore_labels'] = []
    elif extra.startswith('stride'):
        p['stride'] = int(extra[len('stride'):])
    return p


def compare(what, got, expected, tolerance):
    """got: [dict] with the pipeline's keys (index only where the answer has it)."""
    check(len(got) == len(expected), f'{what}: {len(got)} entities, the pipeline {len(expected)}: {got} vs {expected}')
    for i, (g, e) in enumerate(zip(got, expected)):
        for key in e:
            if key == 'score':
                check(abs(g['score'] - e['score']) <= tolerance, f'{what}: entity {i}: score {g["score"]}, the '
                                                                 f'pipeline {e["score"]}')
            elif key in g:
                check(g[key] == e[key], f'{what}: entity {i}: {key} {g[key]!r}, the pipeline {e[key]!r}')
            else:
                check(key == 'index', f'{what}: entity {i} has no {key}: {g}')


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--url', required=True, help='http://127.0.0.1:PORT of the running server')
    p.add_argument('--goldens', required=True)
    p.add_argument('--tolerance', type=float, default=1e-4)
    p.add_argument('--timeout', type=float, default=120)
    args = p.parse_args()
    start_watchdog(NAME, args.timeout)
    try:
        import requests
        from huggingface_hub import InferenceClient
        from huggingface_hub.errors import HfHubHTTPError
    except ImportError as e:
        log(f'missing package: {e} (run scripts/setup-clients.sh)')
        return 2
    goldens = read_goldens(args.goldens)
    runs = sorted({run for g in goldens for run in g['results']})
    check('simple+stride16' in runs and 'simple+keep_o' in runs and 'none' in runs, f'{args.goldens}: runs {runs}')
    route = args.url.rstrip('/') + '/token-classification'

    # 1. huggingface_hub's InferenceClient, one text a call (as its token_classification takes them).
    client = InferenceClient(base_url=route, timeout=60)
    calls = 0
    for run in runs:
        parameters = run_parameters(run)
        for g in goldens:
            if run not in g['results']:
                continue
            out = client.token_classification(g['text'], **parameters)
            got = [{k: v for k, v in {'entity_group': x.entity_group, 'entity': x.entity, 'score': x.score,
                                      'word': x.word, 'start': x.start, 'end': x.end}.items() if v is not None}
                   for x in out]
            compare(f'InferenceClient.token_classification({g["text"][:30]!r}..., {parameters})', got,
                    g['results'][run], args.tolerance)
            calls += 1
    log(f'InferenceClient.token_classification: {calls} calls over {len(runs)} runs, the pipeline\'s entities')

    # 2. A list of texts in one request, with requests.
    for run in runs:
        texts = [g['text'] for g in goldens if run in g['results']]
        answer = requests.post(route, json={'inputs': texts, 'parameters': run_parameters(run)}, timeout=60)
        check(answer.status_code == 200, f'POST /token-classification ({run}): HTTP {answer.status_code}: '
                                         f'{answer.text[:200]}')
        lists = answer.json()
        check(len(lists) == len(texts), f'{run}: {len(lists)} lists for {len(texts)} texts')
        for g, got in zip([g for g in goldens if run in g['results']], lists):
            compare(f'requests POST /token-classification ({run}) {g["text"][:30]!r}', got, g['results'][run],
                    args.tolerance)
    log(f'requests POST /token-classification: {len(runs)} lists of texts, the pipeline\'s entities in input order')

    # 3. A bad strategy is the client's HTTP error 422.
    try:
        client.token_classification('Alice', aggregation_strategy='biggest')
        raise CheckFailed('aggregation_strategy="biggest" was answered')
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        check(status == 422, f'aggregation_strategy="biggest": HTTP {status}, expected 422 ({e})')
    log('a bad aggregation_strategy: HTTP 422')
    log('PASSED')
    return 0


if __name__ == '__main__':
    run_script(NAME, main, 'huggingface_hub or requests', detail=str)
