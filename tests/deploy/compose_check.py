#!/usr/bin/env python3
"""Posts documents through a deployed flowline gateway and checks that each came back exactly once.

Used by scripts/compose-test.sh against an exported compose deployment: N documents ("doc-0" ... with texts
of a few words) in requests of --request-size to POST /post (Jina's body), --threads requests in flight; when
a third of the requests have been answered, --kill (a shell command) is run once, e.g. `podman kill` of one
executor container. Every response must be 200 and hold its request's documents, in order, each with what
the flow adds (--expect: TextStats' tags, or an embedding); at the end every id must have been answered once: none lost, none duplicated.
Only the standard library; every wait is bounded. Exit 0 when all holds, 1 otherwise.
"""
import argparse
import concurrent.futures
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


def post(url, docs, timeout):
    body = json.dumps({"data": docs, "execEndpoint": "/default"}).encode()
    request = urllib.request.Request(url + "/post", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return answer.status, json.loads(answer.read())


def check_document(doc, expect):
    """What is wrong with an answered document, given what the flow adds ("words": TextStats' tags;
    "embedding=N": an embedding of N finite numbers), or None."""
    if expect == "words":
        words = doc.get("tags", {}).get("words")
        return None if words == 7 else f"tags {doc.get('tags')} (TextStats did not run on it)"
    size = int(expect.split("=", 1)[1])
    embedding = doc.get("embedding")
    if not isinstance(embedding, list) or len(embedding) != size:
        return f"embedding of {len(embedding) if isinstance(embedding, list) else embedding!r} values, not {size}"
    if not all(isinstance(x, (int, float)) and abs(x) < 1e6 for x in embedding):
        return "embedding with a value that is not a finite number"
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the gateway, e.g. http://127.0.0.1:18080")
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--request-size", type=int, default=50)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--kill", default="", help="shell command run once a third of the requests are answered")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one request may take")
    parser.add_argument("--expect", default="words",
                        help="what each answered document must carry: words (TextStats) or embedding=N")
    args = parser.parse_args()

    batches = []
    for start in range(0, args.documents, args.request_size):
        batches.append([{"id": f"doc-{i}", "text": f"document number {i} of the compose test"}
                        for i in range(start, min(start + args.request_size, args.documents))])
    answered = {}
    problems = []
    lock = threading.Lock()
    done = [0]
    killed = threading.Event()
    kill_at = len(batches) // 3

    def run(batch):
        try:
            status, answer = post(args.url, batch, args.timeout)
        except urllib.error.HTTPError as e:
            return f"{batch[0]['id']}: HTTP {e.code}: {e.read()[:300]!r}"
        except Exception as e:  # a reset or a time-out: the document would be lost
            return f"{batch[0]['id']}: {type(e).__name__}: {e}"
        docs = answer.get("data", [])
        if status != 200 or [d.get("id") for d in docs] != [d["id"] for d in batch]:
            return f"{batch[0]['id']}: status {status}, ids {[d.get('id') for d in docs][:5]}..."
        for d in docs:
            problem = check_document(d, args.expect)
            if problem:
                return f"{d.get('id')}: {problem}"
        with lock:
            for d in docs:
                answered[d["id"]] = answered.get(d["id"], 0) + 1
            done[0] += 1
            if args.kill and done[0] >= kill_at and not killed.is_set():
                killed.set()
                print(f"compose_check: {done[0]} of {len(batches)} requests answered: running {args.kill!r}",
                      flush=True)
                subprocess.run(args.kill, shell=True, check=False, timeout=60)
        return None

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.threads) as pool:
        for problem in pool.map(run, batches):
            if problem:
                problems.append(problem)
    seconds = time.monotonic() - started

    lost = [f"doc-{i}" for i in range(args.documents) if f"doc-{i}" not in answered]
    duplicated = [k for k, n in answered.items() if n > 1]
    print(f"compose_check: {len(batches)} requests, {args.documents} documents in {seconds:.1f} s "
          f"({args.documents / seconds:,.0f} docs/s); answered {len(answered)}, lost {len(lost)}, "
          f"duplicated {len(duplicated)}, failed requests {len(problems)}, killed: {killed.is_set()}")
    for p in problems[:10]:
        print("  failed:", p)
    ok = not problems and not lost and not duplicated and (killed.is_set() or not args.kill)
    print("compose_check: PASS" if ok else "compose_check: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
