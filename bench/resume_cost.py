"""What `--resume`'s durability costs the main job, and how long a resume after a kill takes (issue 55 §3).

The main job as the README runs it: `flowline run flows/encode.yml` (SentenceEncoder, replicas and batch size
auto, then its JsonlWriter) over the corpus's books copied --copies times as paragraphs. First --rounds
alternating pairs of uninterrupted runs: the writer synced by default (every 10 s) and never synced
(`--sync-seconds 0`: only when the run stops on a signal); docs/s of each from --stats-json. Then one run with
`--sync-every N` killed with SIGKILL at --kill-at of the synced run's time, and `--resume` of it, timed from
process start to exit, against the uninterrupted run's time; the resumed file is checked line for line against
an uninterrupted run's (ids in order; lines differing counted).

  python3 bench/resume_cost.py --launcher build-gpu/src/flowline --models DIR --corpus .device/corpus --out $OUT

--set EXECUTOR.PARAM=VALUE (repeatable) goes to every run; --log-dir D keeps the full, killed and resumed runs' logs
at --log-level debug (D/full.log, killed.log, resumed.log, each with its command and start time), where a start's
parts can be read from the timestamps.

DIR holds all-MiniLM-L6-v2 (or a random-weight folder of its shape under that name: the cost does not depend on
the weights).
"""
import argparse
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(args, env, extra, stats=None, kill_after=None, name=None):
    command = [args.launcher, "run", str(ROOT / "flows/encode.yml"), "--input", str(args.input), "--input-format",
               "paragraphs", "--progress", "never"] + extra + [a for s in args.set for a in ("--set", s)]
    if stats:
        command += ["--stats-json", str(stats)]
    log = subprocess.DEVNULL
    if args.log_dir and name:
        # The launcher's and the executors' log at debug level, each line timestamped: where a start goes.
        command += ["--log-level", "debug"]
        log = open(pathlib.Path(args.log_dir, f"{name}.log"), "w")
        log.write(f"# {' '.join(command)}\n# started at {time.time():.3f} (unix)\n")
        log.flush()
    start, started_unix = time.perf_counter(), time.time()
    child = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        try:
            child.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
        child.wait()
        if log is not subprocess.DEVNULL:
            log.close()
        return time.perf_counter() - start, None
    _, err = child.communicate()
    seconds = time.perf_counter() - start
    if log is not subprocess.DEVNULL:
        log.close()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({child.returncode}):\n{err[-3000:]}")
    figures = json.loads(pathlib.Path(stats).read_text()) if stats else None
    if figures:
        # Where the wall clock went: before the first post (process, CUDA and model start, the input's hashing, a
        # resume's checks, its skipping of what the output holds and its counting of what is left), posting, after.
        posting_started = figures["post_ended_unix"] - figures["seconds"]
        figures["phases_s"] = {"before_posting": round(posting_started - started_unix, 3),
                               "posting": round(figures["seconds"], 3),
                               "after_posting": round(seconds - (posting_started - started_unix) - figures["seconds"],
                                                      3)}
    return seconds, figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--launcher", default=str(ROOT / "build/src/flowline"))
    parser.add_argument("--models", required=True, help="a folder holding all-MiniLM-L6-v2")
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared/data/corpus"))
    parser.add_argument("--copies", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kill-at", type=float, default=0.9)
    parser.add_argument("--sync-every", type=int, default=10000)
    parser.add_argument("--work", default="/tmp/resume-cost")
    parser.add_argument("--out", default=".")
    parser.add_argument("--set", action="append", default=[], help="EXECUTOR.PARAM=VALUE for every run; repeatable")
    parser.add_argument("--log-dir", help="keep the full, killed and resumed runs' debug logs here (NAME.log)")
    args = parser.parse_args()

    work = pathlib.Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    args.input = work / "input"
    args.input.mkdir(parents=True)
    for i in range(args.copies):
        for book in sorted(pathlib.Path(args.corpus).glob("*.txt")):
            shutil.copy(book, args.input / f"{i:03d}-{book.name}")
    out_dir = work / "out"
    env = dict(os.environ, FLOWLINE_MODEL_DIR=str(args.models), FLOWLINE_OUT_DIR=str(out_dir))
    result = pathlib.Path(out_dir) / "embeddings.jsonl"

    rows = {"synced every 10 s (default)": [], "not synced (--sync-seconds 0)": []}
    settings = {"synced every 10 s (default)": [], "not synced (--sync-seconds 0)": ["--sync-seconds", "0"]}
    for r in range(args.rounds):
        names = list(settings) if r % 2 == 0 else list(reversed(settings))
        for name in names:
            seconds, stats = run(args, env, ["--overwrite"] + settings[name], stats=work / "stats.json")
            rows[name].append((stats["documents"] / stats["seconds"], seconds, stats["documents"]))
            print(f"round {r + 1} {name}: {stats['documents']} docs, {stats['documents'] / stats['seconds']:.0f} "
                  f"docs/s (posting), {seconds:.2f} s wall", flush=True)
    best, cost = None, None
    if args.rounds:
        best = {name: max(r[0] for r in rows[name]) for name in rows}
        cost = 1 - best["synced every 10 s (default)"] / best["not synced (--sync-seconds 0)"]
        print(f"best docs/s: {best}; durability costs {100 * cost:.2f}% of docs/s", flush=True)

    reference = work / "reference.jsonl"
    full, full_stats = run(args, env, ["--overwrite", "--sync-every", str(args.sync_every)], stats=work / "full.json",
                                name="full")
    shutil.move(result, reference)
    killed, _ = run(args, env, ["--overwrite", "--sync-every", str(args.sync_every)], kill_after=args.kill_at * full,
                    name="killed")
    partial = result.with_name(result.name + ".partial")
    held = sum(1 for _ in open(partial, "rb")) if partial.exists() else 0
    resumed, stats = run(args, env, ["--resume", "--sync-every", str(args.sync_every)], stats=work / "resumed.json",
                           name="resumed")
    # Lines may differ in the embedding's last bits where batches were cut differently (GEMM shapes on a GPU);
    # what must hold is every document once, in order: the ids, and how many lines differ at all.
    ours, theirs = result.read_bytes().splitlines(), reference.read_bytes().splitlines()
    ids = lambda lines: [json.loads(line).get("id") for line in lines]  # noqa: E731
    same = {"lines": len(ours), "reference_lines": len(theirs), "same_ids_in_order": ids(ours) == ids(theirs),
            "lines_differing": sum(a != b for a, b in zip(ours, theirs))}
    figures = {"documents": stats["documents"] if stats else None, "rows": rows, "best_docs_per_s": best,
               "durability_cost": cost, "full_run_s": full, "killed_after_s": killed, "lines_in_partial": held,
               "resume_s": resumed, "resume_share": resumed / full, "resumed_file_equals_uninterrupted": same,
               "full_run_phases_s": full_stats["phases_s"], "resume_phases_s": stats["phases_s"] if stats else None,
               "resume": stats.get("resume") if stats else None}
    if stats:
        # The resume's own cost: its wall clock less what encoding the documents left takes at the full run's rate.
        rate = full_stats["documents"] / full_stats["seconds"]
        figures["resume_overhead_s"] = resumed - stats["resume"]["left_documents"] / rate
        figures["resume_overhead_share"] = figures["resume_overhead_s"] / full
        # Of the time before the first post: skipping what the output holds and counting what is left (the
        # input's boundaries only, DocumentSource::skip and count_left); builds before them report neither.
        figures["resume_skip_count_s"] = {key: stats["resume"].get(key) for key in ("skip_seconds", "count_seconds")}
    print(json.dumps(figures, indent=1), flush=True)
    pathlib.Path(args.out, "resume_cost.json").write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
