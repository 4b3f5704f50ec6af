#!/usr/bin/env python3
"""harness/sizes.py: the sizes issue 28 bounds, measured on src/.

Files: lines before the file's inline test module (`#[cfg(test)] mod tests {`: its tests are
not counted). Functions: lines from the `fn` line to its closing brace, found by matching braces
outside strings, chars and comments. Prints what is over the bounds and exits 1 when anything
is; `--all N` lists the N longest functions and files whatever their size. The functions in
PATH_FILES (the steps of one measurement, plan to report) are held to PATH_MAX lines.

  harness/sizes.py                 # check: files <= 800 lines, functions <= 100
  harness/sizes.py --all 30        # the 30 longest functions and files
"""
import os
import re
import sys

FILE_MAX = 800
FN_MAX = 100
# The files whose functions are the steps of one measurement (plan to report) for lat, bw,
# post-cost and suite: at most PATH_MAX lines each.
PATH_FILES = [
    "src/probe/mod.rs",
    "src/probe/measure/mod.rs",
    "src/probe/measure/session.rs",
    "src/probe/measure/lat.rs",
    "src/probe/measure/bw.rs",
    "src/probe/measure/post_cost.rs",
    "src/probe/measure/cm.rs",
    "src/probe/suite/mod.rs",
    "src/probe/suite/run.rs",
    "src/probe/suite/matrix.rs",
    "src/probe/report.rs",
    "src/scenario/runner.rs",
    "src/scenario/runner/lat_runs.rs",
    "src/scenario/runner/bw_runs.rs",
    "src/scenario/runner/post_cost_runs.rs",
]
PATH_MAX = 60

FN_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?"
                   r"(?:extern\s+\"[^\"]*\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)")


def strip(src):
    """The source with strings, chars and comments blanked (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^'\\])'", src[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, line count) of every function with a body in the file."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    clean = strip(text).split("\n")
    found = []
    for no, line in enumerate(clean):
        m = FN_RE.match(line)
        if not m:
            continue
        # `;` ends a declaration without a body, unless inside the signature's brackets (an
        # array type `[u8; 1024]`): counted by `nest`
        depth, started, nest = 0, False, 0
        for end in range(no, len(clean)):
            for ch in clean[end]:
                if ch == "{":
                    depth, started = depth + 1, True
                elif ch == "}":
                    depth -= 1
                elif not started and ch in "([":
                    nest += 1
                elif not started and ch in ")]":
                    nest -= 1
                elif ch == ";" and not started and depth == 0 and nest == 0:
                    break
            else:
                if started and depth == 0:
                    found.append((m.group(1), no + 1, end - no + 1))
                    break
                continue
            break
    return found


def file_lines(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        # the inline test module (`#[cfg(test)]` then `mod tests {`); a `mod tests;` line is
        # a file of its own and the rest of this file still counts
        if line.strip() == "#[cfg(test)]" and i + 1 < len(lines) and re.match(r"\s*(pub\s+)?mod\s+\w+\s*\{", lines[i + 1]):
            return i
    return len(lines)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    os.chdir(root)
    show_all = None
    if len(sys.argv) > 2 and sys.argv[1] == "--all":
        show_all = int(sys.argv[2])
    files, fns = [], []
    for d, _, names in os.walk("src"):
        for name in names:
            if name.endswith(".rs"):
                p = os.path.join(d, name)
                files.append((file_lines(p), p))
                fns.extend((n, p, line, name_) for name_, line, n in functions(p))
    files.sort(reverse=True)
    fns.sort(reverse=True)
    if show_all is not None:
        print("files:")
        for n, p in files[:show_all]:
            print(f"  {n:5} {p}")
        print("functions:")
        for n, p, line, name in fns[:show_all]:
            print(f"  {n:5} {p}:{line} {name}")
        return 0
    bad = 0
    for n, p in files:
        if n > FILE_MAX:
            print(f"file over {FILE_MAX} lines before its tests: {p} {n}")
            bad += 1
    for n, p, line, name in fns:
        limit = PATH_MAX if p.replace(os.sep, "/") in PATH_FILES else FN_MAX
        if n > limit:
            print(f"function over {limit} lines: {p}:{line} {name} {n}")
            bad += 1
    longest_fn = fns[0] if fns else (0, "-", 0, "-")
    print(f"sizes: {len(files)} files, longest {files[0][0]} ({files[0][1]}); {len(fns)} functions, "
          f"longest {longest_fn[0]} ({longest_fn[1]}:{longest_fn[2]} {longest_fn[3]}); {bad} over the bounds")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
