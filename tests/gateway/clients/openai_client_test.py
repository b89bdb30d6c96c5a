#!/usr/bin/env python3
"""The official openai Python package against a running `flowline serve`'s /v1/embeddings.

    .venv-clients/bin/python tests/gateway/clients/openai_client_test.py --url http://127.0.0.1:PORT \
        --expect-dim 384 [--expect-tokens] [--reference REF.json] [--timeout 60]

The server must already be running. Uses `openai.OpenAI(base_url=URL + '/v1', api_key='x')` and checks:

  1. `client.embeddings.create(model='any', input=[3 texts])` with the package's default encoding: the
     package sends "encoding_format": "base64" and decodes the answer itself; the raw answer must hold
     base64 strings of --expect-dim little-endian float32s, and the parsed result one finite vector per
     input, in input order (data[i].index == i), object "list"/"embedding", a model string;
  2. the same with encoding_format='float': JSON numbers, the same order, and exactly the same float32
     values as the base64 answer (each JSON number, rounded to float32, has the same bits);
  3. one string as input (not a list): one embedding, equal to the first of 1;
  4. with --expect-tokens: usage.prompt_tokens > 0 and usage.total_tokens >= prompt_tokens;
  5. with --reference {"text": [floats], ...}: within --tolerance of it (the 3 texts are the file's first keys);
  and `dimensions=DIM/2` (the first values, normalised again) and `client.models.list()`.

Exit 0 when all pass, 1 with a message naming the failed check, 2 on bad arguments or a missing package,
3 on the watchdog (--timeout seconds for the whole run, so the test never hangs).
"""
import base64
import json
import math
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_check import (CheckFailed, begin, check, load_reference, make_log, new_parser,  # noqa: E402
                          run_script)

NAME = 'openai_client_test'
log = make_log(NAME)


def parse_args():
    p = new_parser(__doc__, 'http://127.0.0.1:PORT of the running server (no /v1)', 'embedding dimension')
    p.add_argument('--expect-tokens', action='store_true', help='require usage.prompt_tokens > 0')
    p.add_argument('--model', default='any', help="the model name sent (default 'any')")
    return p.parse_args()


def f32(x):
    """x rounded to the nearest float32, as the 4 bytes that float has."""
    return struct.pack('<f', x)


def create_raw(client, model, inp, **kw):
    """Calls embeddings.create through with_raw_response: returns (request body, raw JSON, parsed result)."""
    raw = client.embeddings.with_raw_response.create(model=model, input=inp, **kw)
    sent = json.loads(raw.http_request.content or b'{}')
    body = raw.http_response.json()
    return sent, body, raw.parse()


def check_shape(body, parsed, n, dim, what, want_base64):
    """Checks the raw JSON's shape and the parsed result; returns the vectors as lists of floats."""
    check(isinstance(body, dict), f'{what}: the answer is not a JSON object')
    check(body.get('object') == 'list', f'{what}: "object" is {body.get("object")!r}, expected "list"')
    check(isinstance(body.get('model'), str), f'{what}: "model" is missing or not a string')
    data = body.get('data')
    check(isinstance(data, list) and len(data) == n, f'{what}: "data" has {len(data) if isinstance(data, list) else data!r} items, expected {n}')
    for i, item in enumerate(data):
        check(item.get('object') == 'embedding', f'{what}: data[{i}].object is {item.get("object")!r}')
        check(item.get('index') == i, f'{what}: data[{i}].index is {item.get("index")!r} (wrong order?)')
        e = item.get('embedding')
        if want_base64:
            check(isinstance(e, str), f'{what}: data[{i}].embedding is a {type(e).__name__}, expected a base64 '
                                      f'string (the request said "encoding_format": "base64")')
            try:
                raw = base64.b64decode(e, validate=True)
            except Exception as ex:  # binascii.Error
                raise CheckFailed(f'{what}: data[{i}].embedding is not valid base64: {ex}')
            check(len(raw) == 4 * dim, f'{what}: data[{i}].embedding decodes to {len(raw)} bytes, '
                                       f'expected {4 * dim} ({dim} float32)')
        else:
            check(isinstance(e, list) and all(isinstance(x, (int, float)) for x in e),
                  f'{what}: data[{i}].embedding is not a list of numbers')
            check(len(e) == dim, f'{what}: data[{i}].embedding has {len(e)} numbers, expected {dim}')
    vecs = []
    check(len(parsed.data) == n, f'{what}: the parsed result has {len(parsed.data)} embeddings, expected {n}')
    for i, item in enumerate(parsed.data):
        v = list(item.embedding)
        check(len(v) == dim, f'{what}: parsed embedding {i} has {len(v)} floats, expected {dim}')
        check(all(math.isfinite(x) for x in v), f'{what}: parsed embedding {i} has a non-finite value')
        vecs.append(v)
    return vecs


def main():
    args = parse_args()
    u = begin(NAME, args, schemes=('http', 'https'))
    if u is None:
        return 2
    try:
        import openai
    except ImportError as e:
        log(f'cannot import openai ({e}); run with .venv-clients/bin/python (scripts/setup-clients.sh)')
        return 2
    dim = args.expect_dim
    reference, texts = load_reference(args.reference)

    base_url = args.url.rstrip('/') + '/v1'
    client = openai.OpenAI(base_url=base_url, api_key='x', timeout=max(1.0, args.timeout), max_retries=0)
    log(f'openai {openai.__version__}, base_url {base_url}')

    # 1. default encoding (the package asks for base64 and decodes it)
    t0 = time.monotonic()
    sent, body, parsed = create_raw(client, args.model, texts)
    ms = (time.monotonic() - t0) * 1000
    check(sent.get('encoding_format') == 'base64',
          f'the openai package sent encoding_format={sent.get("encoding_format")!r}; expected it to ask for base64')
    b64 = check_shape(body, parsed, len(texts), dim, 'default (base64) encoding', want_base64=True)
    log(f'default encoding: request had "encoding_format": "base64"; the answer had {len(texts)} base64 '
        f'embeddings of {dim} float32, index 0..{len(texts) - 1} in order, decoded by the package ({ms:.0f} ms)')

    # 2. encoding_format='float'
    t0 = time.monotonic()
    sent, body_f, parsed_f = create_raw(client, args.model, texts, encoding_format='float')
    ms = (time.monotonic() - t0) * 1000
    check(sent.get('encoding_format') == 'float', 'the request did not carry encoding_format "float"')
    flt = check_shape(body_f, parsed_f, len(texts), dim, 'float encoding', want_base64=False)
    for i, (a, b) in enumerate(zip(b64, flt)):
        for j, (x, y) in enumerate(zip(a, b)):
            check(struct.unpack('<f', f32(x))[0] == x and f32(x) == f32(y),
                  f'text {i}, component {j}: base64 gave {x!r}, float gave {y!r} (not the same float32)')
    exact_double = all(x == y for a, b in zip(b64, flt) for x, y in zip(a, b))
    log(f'encoding_format=float: {len(texts)} embeddings in order, bit-identical float32 values to the base64 '
        f'answer ({"also equal as doubles" if exact_double else "JSON numbers are float32-rounded text, not equal as doubles"}) ({ms:.0f} ms)')

    # 3. a single string as input
    sent, body_1, parsed_1 = create_raw(client, args.model, texts[0])
    one = check_shape(body_1, parsed_1, 1, dim, 'single-string input', want_base64=True)
    check(one[0] == b64[0], 'single-string input: its embedding differs from the first of the 3-text request')
    log('single string as input: one embedding, equal to the first of the 3-text request')

    # 3b. dimensions (Matryoshka: the first N values, normalised again) and models.list()
    half = max(1, dim // 2)
    sent, body_d, parsed_d = create_raw(client, args.model, texts[0], dimensions=half)
    check(sent.get('dimensions') == half, f'the request did not carry dimensions {half}')
    short = check_shape(body_d, parsed_d, 1, half, f'dimensions={half}', want_base64=True)
    norm = math.sqrt(sum(x * x for x in b64[0][:half]))
    check(all(abs(a - b / norm) < 1e-5 for a, b in zip(short[0], b64[0][:half])),
          f'dimensions={half}: not the first {half} values of the full embedding, normalised again')
    listed = client.models.list()
    ids = [m.id for m in listed.data]
    check(len(ids) >= 1 and all(isinstance(i, str) and i for i in ids), f'models.list() gave {ids!r}')
    log(f'dimensions={half}: the first {half} values, normalised again; models.list(): {ids}')

    # 4. usage
    usage = body.get('usage')
    if args.expect_tokens:
        check(isinstance(usage, dict), 'no "usage" object in the answer')
        pt, tt = usage.get('prompt_tokens'), usage.get('total_tokens')
        check(isinstance(pt, int) and pt > 0, f'usage.prompt_tokens is {pt!r}, expected an integer > 0')
        check(isinstance(tt, int) and tt >= pt, f'usage.total_tokens is {tt!r}, expected an integer >= {pt}')
        check(parsed.usage.prompt_tokens == pt, 'the parsed usage.prompt_tokens differs from the raw answer')
        log(f'usage: prompt_tokens {pt}, total_tokens {tt}')
    else:
        log(f'usage (not checked): {usage!r}')

    # 5. reference
    if reference is not None:
        compared = 0
        for t, v in zip(texts, b64):
            if t not in reference:
                continue
            r = reference[t]
            check(len(r) == len(v), f'reference for {t[:40]!r} has {len(r)} floats, server gave {len(v)}')
            diff = max(abs(a - b) for a, b in zip(r, v))
            check(diff <= args.tolerance, f'embedding of {t[:40]!r} differs from the reference by {diff:.3g} '
                                          f'(> {args.tolerance:g})')
            compared += 1
            log(f'  {t[:40]!r}: max |server - reference| = {diff:.3g} <= {args.tolerance:g}')
        check(compared > 0, 'the reference file has none of the posted texts')
    log('PASSED')
    return 0


if __name__ == '__main__':
    run_script(NAME, main, 'the openai package', detail=str)
