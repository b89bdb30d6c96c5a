#!/usr/bin/env python3
"""The TokenClassifier's host work per paragraph and per token (issue 52 §5), measured on the CPU.

Runs flows/ner.yml (the tiny test tagger, hidden 32, so the model is small) over a corpus repeated --repeat
times as paragraphs, with OMP_NUM_THREADS=1 (LibTorch's OpenMP threads otherwise spin between parallel
regions on a loaded machine and blur everything), --runs times, and reads the tagger's phase metrics from
--stats-json: tokenize_seconds (tokenizing with offsets, windows, ids packed), model_seconds (the passes and
the logits back on the host) and post_seconds (softmax, aggregation, chunks). Prints the best run's
microseconds per paragraph and per token of each phase; host = tokenize + post is what a GPU does not take.

  python3 bench/ner_host.py [--flowline build/src/flowline] [--repeat 5] [--runs 3] [--before-lib DIR]

--before-lib DIR: a folder holding another build's libflowline_token_classifier.so.0 (the launcher's plugin
finds it through LD_LIBRARY_PATH, which RUNPATH yields to); its runs alternate with the current build's, so
both see the same load on a shared machine, and both are printed.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(flowline, corpus, out_dir, stats, lib=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", FLOWLINE_OUT_DIR=str(out_dir))
    if lib:
        env["LD_LIBRARY_PATH"] = str(Path(lib).resolve())
    cmd = [flowline, "run", str(ROOT / "flows/ner.yml"), "--input", str(corpus), "--input-format", "paragraphs",
           "--stats-json", str(stats), "--overwrite"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"flowline run failed ({done.returncode}):\n{done.stderr}")
    tagger = next(r for r in json.loads(stats.read_text())["replicas"] if r["executor"] == "tagger")
    m = tagger["metrics"]
    for key in ("tokenize_seconds", "model_seconds", "post_seconds", "texts", "tokens"):
        if key not in m:
            sys.exit(f"the tagger's metrics have no '{key}' (an older TokenClassifier?): {sorted(m)}")
    return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--flowline", default=str(ROOT / "build/src/flowline"))
    ap.add_argument("--corpus", default=str(ROOT / "../shared/data/corpus/alice-in-wonderland.txt"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before-lib", help="folder of an older libflowline_token_classifier.so.0 to compare")
    args = ap.parse_args()
    builds = {"current": None} if not args.before_lib else {"before": args.before_lib, "current": None}
    runs = {name: [] for name in builds}
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        text = Path(args.corpus).read_text()
        corpus.write_text("\n\n".join([text] * args.repeat))
        for _ in range(args.runs):
            for name, lib in builds.items():
                runs[name].append(one_run(args.flowline, corpus, Path(tmp), Path(tmp) / "stats.json", lib))
    for name in builds:
        if len(builds) > 1:
            print(f"{name}:")
        report(runs[name], args.runs)


def report(runs, count):
    best = min(runs, key=lambda m: m["tokenize_seconds"] + m["post_seconds"])
    texts, tokens = best["texts"], best["tokens"]
    print(f"{int(texts)} paragraphs, {int(tokens)} tokens (best of {count} runs by host time)")
    for phase in ("tokenize", "model", "post"):
        s = best[f"{phase}_seconds"]
        print(f"  {phase:9s} {s * 1e6 / texts:8.1f} us/paragraph {s * 1e6 / tokens:7.3f} us/token")
    host = best["tokenize_seconds"] + best["post_seconds"]
    print(f"  host      {host * 1e6 / texts:8.1f} us/paragraph {host * 1e6 / tokens:7.3f} us/token"
          f"  ({texts / host:,.0f} paragraphs/s for one replica's host work)")


if __name__ == "__main__":
    main()
