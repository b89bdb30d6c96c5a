#!/usr/bin/env python3
"""How long and how much memory `flowline validate` takes on hostile and large flow files (issue 34).

Generates each file in a scratch folder, runs the real launcher on it `--runs` times and prints, per file,
its size, the exit code, the slowest wall time and the largest peak RSS (from wait4). The files are the
worst cases the limits of flowline/flow_file_limits.hpp allow or refuse: an alias bomb, a file far past the
size limit, deep nesting, a list just under the node budget, the largest allowed scalars and block texts,
a map of many keys, many small mappings, and long numeric and `${{ ENV.` scalars.

    python3 bench/flow_files.py --flowline build/src/flowline [--runs 3]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

# SetTags (the test plugin) takes any mapping under `tags:`, so files within the limits validate (exit 0).
HEAD = "jtype: Flow\nexecutors:\n  - name: tags\n    uses: SetTags\n"
MIB = 1 << 20


def alias_bomb():
    lines = [HEAD, "    with:\n      tags:\n        a: &a [x, x, x, x, x, x, x, x, x, x]\n"]
    names = "abcdefghi"
    for i in range(1, len(names)):
        lines.append(f"        {names[i]}: &{names[i]} [" + ", ".join(f"*{names[i - 1]}" for _ in range(10)) + "]\n")
    return "".join(lines)


WITH = "    with:\n      tags:\n"


def word_list(count):
    return HEAD + WITH + "        words: [" + ", ".join(f"w{i}" for i in range(count)) + "]\n"


def cases():
    budget_words = 74_970  # plus the flow's own nodes: just under the 75,000-node budget
    yield "alias bomb (10^9 nodes)", alias_bomb()
    yield "99 MiB list of 1 MiB scalars", HEAD + WITH + "        l: [" + ", ".join(["x" * MIB] * 99) + "]\n"
    yield "100,000 nested brackets", HEAD + WITH + "        d: " + "[" * 100_000 + "]" * 100_000 + "\n"
    yield f"{budget_words:,}-word list", word_list(budget_words)
    yield "1,000,000-word list (over budget)", word_list(1_000_000)[: 2 * MIB - 64] + "]\n"
    yield "2 MiB quoted scalar", HEAD + WITH + '        s: "' + "x" * (2 * MIB - 400) + '"\n'
    yield "2 MiB block literal", HEAD + WITH + "        s: |\n" + ("          " + "y" * 68 + "\n") * (2 * MIB // 79 - 5)
    yield "2 MiB comments", HEAD + ("# " + "c" * 77 + "\n") * (2 * MIB // 80 - 5)
    yield "24,900 one-key mappings", HEAD + WITH + "        m:\n" + "".join(
        f"          - {{k{i}: v}}\n" for i in range(24_900))
    yield "37,400-key mapping", HEAD + WITH + "        m:\n" + "".join(f"          k{i}: v{i}\n" for i in range(37_400))
    yield "1,000,000-digit scalar", HEAD + WITH + "        n: " + "7" * 1_000_000 + "\n"
    yield "unclosed ${{ ENV. of 1,000,000", HEAD + WITH + '        e: "${{ ENV.' + "A" * 1_000_000 + '"\n'


def run_once(flowline, path, scratch):
    # GNU time measures the launcher's peak RSS: a child forked from this (large) Python process would
    # report the parent's pages as its own.
    report = os.path.join(scratch, "time.txt")
    start = time.monotonic()
    code = subprocess.call(["/usr/bin/time", "-o", report, "-f", "%M", flowline, "validate", path],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.monotonic() - start
    with open(report) as f:
        rss_kb = float(f.read().strip().splitlines()[-1])
    return code, seconds, rss_kb / 1024.0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flowline", default="build/src/flowline")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--plugin", default="build/tests/plugins/libflowline_testing_executors.so",
                        help="the test plugin that offers SetTags")
    args = parser.parse_args()
    start = time.monotonic()
    subprocess.run([args.flowline, "--version"], stdout=subprocess.DEVNULL, check=True)
    print(f"launcher start (flowline --version): {time.monotonic() - start:.2f} s")
    print(f"{'file':36} {'MiB':>7} {'exit':>4} {'max s':>6} {'max RSS MB':>10}")
    worst_s, worst_mb = 0.0, 0.0
    with tempfile.TemporaryDirectory() as scratch:
        for name, text in cases():
            path = os.path.join(scratch, "flow.yml")
            with open(path, "w") as f:
                f.write(f"plugins: ['{os.path.abspath(args.plugin)}']\n" + text)
            size = len(text)
            del text
            results = [run_once(args.flowline, path, scratch) for _ in range(args.runs)]
            codes = sorted({r[0] for r in results})
            seconds = max(r[1] for r in results)
            rss = max(r[2] for r in results)
            worst_s, worst_mb = max(worst_s, seconds), max(worst_mb, rss)
            print(f"{name:36} {size / MIB:7.2f} {','.join(map(str, codes)):>4} {seconds:6.2f} {rss:10.0f}")
            if any(c not in (0, 2) for c in codes):
                print(f"  {name}: the launcher ended with {codes}: neither validated (0) nor refused (2)")
                return 1
    print(f"worst: {worst_s:.2f} s, {worst_mb:.0f} MB (target: every file within 1 s and 300 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
