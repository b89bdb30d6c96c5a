#!/usr/bin/env python3
"""Checks the shape limits of flowline's code: no source file in src/ or executors/ over 600 lines, no
function over 100 lines (from the line of its opening brace to its closing one), and every source file opens
with a comment line saying what it is for. Prints each breach as FILE:LINE: ... and exits 1 when there is one.

    scripts/check-shape.py [ROOT]          # default: the repository this script is in
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 100
SHAPED = ("src", "executors")                                # the size limits apply here
HEADED = ("src", "executors", "include", "tests", "bench", "examples")  # the opening comment, here
SUFFIXES = {".cpp", ".hpp", ".h", ".cc"}
SCOPE_WORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b")
CONTROL_WORDS = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try)\b")


def strip_code(text):
    """The text with comments, string and character literals blanked, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) - i + 1)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def long_functions(path, text):
    code = strip_code(text)
    stack = []          # (kind, start line, name) per open brace
    head_start = 0      # where the text before the next brace starts
    breaches = []
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c in ";":
            if not stack or stack[-1][0] == "scope":
                head_start = i + 1
        elif c == "{":
            head = code[head_start:i]
            enclosing_is_scope = all(kind == "scope" for kind, _, _ in stack)
            if SCOPE_WORDS.search(head) and "(" not in head.split("{")[-1].split("=")[0]:
                kind = "scope"
            elif enclosing_is_scope and ")" in head and not CONTROL_WORDS.match(head.strip()) \
                    and not head.rstrip().endswith("="):
                kind = "function"
            else:
                kind = "block"
            name = " ".join(head.split())[-80:]
            stack.append((kind, line, name))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, start, name = stack.pop()
                length = line - start + 1
                if kind == "function" and length > MAX_FUNCTION_LINES:
                    breaches.append(f"{path}:{start}: function of {length} lines (limit {MAX_FUNCTION_LINES}): {name}")
            head_start = i + 1
    return breaches


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    breaches = []
    for folder in HEADED:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or "data" in path.relative_to(root).parts:
                continue
            rel = path.relative_to(root)
            text = path.read_text(encoding="utf-8", errors="replace")
            first = text.lstrip("\ufeff").split("\n", 1)[0]
            if not first.startswith("//"):
                breaches.append(f"{rel}:1: no opening comment saying what the file is for")
            if folder in SHAPED:
                lines = text.count("\n")
                if lines > MAX_FILE_LINES:
                    breaches.append(f"{rel}:1: {lines} lines (limit {MAX_FILE_LINES})")
                breaches.extend(long_functions(rel, text))
    for b in breaches:
        print(b)
    print(f"check-shape: {len(breaches)} problem{'s' if len(breaches) != 1 else ''}")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
