"""Helpers shared by the client tests in this folder (jina_client_test.py, openai_client_test.py).

Each test is run as a script and imports this module by putting its own folder first on sys.path.
Messages are prefixed with the test's name, as in `log = make_log('jina_client_test')`.
"""
import argparse
import json
import os
import sys
import threading
import urllib.parse

DEFAULT_TEXTS = [
    'The quick brown fox jumps over the lazy dog.',
    'Flowline runs executors in a flow.',
    'A third, somewhat longer sentence about embeddings, gateways and HTTP clients.',
]


class CheckFailed(Exception):
    pass


def make_log(name):
    def log(msg):
        print(f'{name}: {msg}', flush=True)

    return log


def check(cond, msg):
    if not cond:
        raise CheckFailed(msg)


def start_watchdog(name, seconds):
    def fire():
        print(f'{name}: FAILED: timed out after {seconds:g} s (watchdog); the server did not answer',
              file=sys.stderr, flush=True)
        os._exit(3)

    t = threading.Timer(seconds, fire)
    t.daemon = True
    t.start()


def load_reference(path):
    """(reference, texts): the JSON object {"text": [floats], ...} at path (None without a path) and the 3
    texts to post: the file's first keys, filled up from DEFAULT_TEXTS."""
    texts = list(DEFAULT_TEXTS)
    if not path:
        return None, texts
    with open(path) as f:
        reference = json.load(f)
    check(isinstance(reference, dict) and reference, f'{path}: expected a non-empty JSON object')
    keys = list(reference)[:3]
    return reference, keys + [t for t in DEFAULT_TEXTS if t not in keys][: 3 - len(keys)]


def run_script(name, main, client, detail=repr):
    """Runs main() and exits with its code: 1 on CheckFailed or on any exception (`client` raised it,
    shown with detail(e)); os._exit, so leftover client threads or sessions are not waited for."""
    try:
        rc = main()
    except CheckFailed as e:
        print(f'{name}: FAILED: {e}', file=sys.stderr, flush=True)
        rc = 1
    except Exception as e:
        print(f'{name}: FAILED: {client} raised {type(e).__module__}.{type(e).__name__}: {detail(e)}',
              file=sys.stderr, flush=True)
        rc = 1
    sys.stdout.flush()
    os._exit(rc)


def new_parser(doc, url_help, dim_help):
    """The argument parser with the options every client test has: --url, --expect-dim, --reference,
    --tolerance and --timeout."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--url', required=True, help=url_help)
    p.add_argument('--expect-dim', type=int, required=True, help=dim_help)
    p.add_argument('--reference', help='JSON file {"text": [floats], ...} to compare embeddings with')
    p.add_argument('--tolerance', type=float, default=1e-4, help='max abs difference (default 1e-4)')
    p.add_argument('--timeout', type=float, default=120, help='seconds for the whole test (default 120)')
    return p


def begin(name, args, schemes=('http',)):
    """Starts the watchdog (args.timeout) and parses args.url; None (after a message) when it is not
    SCHEME://HOST:PORT with a scheme in schemes."""
    start_watchdog(name, args.timeout)
    u = urllib.parse.urlparse(args.url)
    if u.scheme not in schemes or not u.hostname or not u.port:
        make_log(name)(f'bad --url {args.url!r}: expected http://HOST:PORT')
        return None
    return u
