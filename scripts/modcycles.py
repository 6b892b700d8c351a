#!/usr/bin/env python3
"""Module cycles inside each crate, from the sources.

For every crate under crates/, each top-level module (src/NAME.rs or
src/NAME/mod.rs and what it contains) is a node; a path in its code that
starts with `crate::` (`use crate::{a, b::C}`, `crate::a::f()`) and names
another top-level module, or an
item the crate root re-exports from one (`pub use a::Item;`), is an edge.
Every cycle found is printed (one per strongly connected component, with
the edges that close it), and the exit status is 1 if there is any, 0 if
none. Comments, string literals and `#[cfg(test)]` items (test modules,
test-only imports) are ignored: only what the crate itself is built from
counts.

    python3 scripts/modcycles.py [ROOT]     # ROOT: the workspace (default: here)
"""
import os
import re
import sys


def strip(src):
    """The code without comments, string and char literals."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and not (i and (src[i - 1].isalnum() or src[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and src[i] != '"':
                i += 2 if src[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.[^']*|[^\\'])'", src[i:i + 12]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:i + 12])
            i += len(m.group(0))
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def without_tests(code):
    """The code without `#[cfg(test)]` items: a block item up to its
    closing brace, any other item up to its semicolon."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        if m.start() < i:
            continue
        out.append(code[i:m.start()])
        j = m.end()
        semi, brace = code.find(";", j), code.find("{", j)
        if brace < 0 or (0 <= semi < brace):
            i = len(code) if semi < 0 else semi + 1
            continue
        depth, j = 1, brace + 1
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        i = j
    out.append(code[i:])
    return "".join(out)


def use_trees(code, prefix):
    """Every path `prefix::...` in `code`, brace groups expanded, as lists
    of segments after the prefix."""
    paths = []
    for m in re.finditer(r"\b" + prefix + r"\s*::\s*", code):
        paths.extend(expand(code, m.end()))
    return paths


def expand(code, at):
    """The paths of the use tree (or plain path) starting at `at`."""
    m = re.match(r"\s*\{", code[at:])
    if m:
        depth, i = 1, at + m.end()
        start, parts = i, []
        while i < len(code) and depth:
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
            elif code[i] == "," and depth == 1:
                parts.append((start, i))
                start = i + 1
            i += 1
        parts.append((start, i - 1))
        out = []
        for s, _ in parts:
            out.extend(expand(code, s))
        return out
    m = re.match(r"\s*(\w+)\s*(::\s*)?", code[at:])
    if not m or m.group(1) in ("self", "super", "crate"):
        return [[]] if m else []
    head = m.group(1)
    if m.group(2):
        return [[head] + rest for rest in expand(code, at + m.end())]
    return [[head]]


TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([\w:]+\))?\s+)?mod\s+(\w+)\s*;")


def test_only_dirs(path):
    """Where the modules that `path` declares `#[cfg(test)] mod name;` live
    (NAME.rs and NAME/ beside a lib.rs or mod.rs, else in the file's own
    directory named after it): their files are test code."""
    code = strip(open(path).read())
    base = os.path.dirname(path)
    stem = os.path.basename(path)[:-3]
    if stem not in ("lib", "main", "mod"):
        base = os.path.join(base, stem)
    return [os.path.join(base, m.group(1)) for m in TEST_MOD.finditer(code)]


def crate_modules(src_dir):
    """Top-level module name -> its source files (test-only files left
    out: those of modules declared `#[cfg(test)] mod name;`)."""
    mods = {}
    for entry in sorted(os.listdir(src_dir)):
        path = os.path.join(src_dir, entry)
        if entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            mods.setdefault(entry[:-3], []).append(path)
        elif os.path.isdir(path) and entry != "bin":
            for root, _, files in os.walk(path):
                for f in files:
                    if f.endswith(".rs"):
                        mods.setdefault(entry, []).append(os.path.join(root, f))
    tests = [d for files in mods.values() for f in files for d in test_only_dirs(f)]

    def test_only(f):
        return any(f == t + ".rs" or f.startswith(t + os.sep) for t in tests)

    return {m: [f for f in files if not test_only(f)] for m, files in mods.items()}


def root_reexports(src_dir, mods):
    """Names the crate root re-exports (`pub use module::{A, b::C}`) -> module."""
    names = {}
    for root in ("lib.rs", "main.rs"):
        path = os.path.join(src_dir, root)
        if not os.path.exists(path):
            continue
        code = strip(open(path).read())
        for m in re.finditer(r"\bpub\s+use\s+", code):
            for p in expand(code, m.end()):
                if len(p) >= 2 and p[0] in mods:
                    names[p[-1]] = p[0]
    return names


def edges(src_dir):
    mods = crate_modules(src_dir)
    reexports = root_reexports(src_dir, mods)
    graph = {m: {} for m in mods}

    def target(segments):
        if not segments:
            return None
        if segments[0] in mods:
            return segments[0]
        return reexports.get(segments[0])

    for mod, files in mods.items():
        for path in files:
            code = without_tests(strip(open(path).read()))
            for p in use_trees(code, "crate"):
                t = target(p)
                if t and t != mod:
                    graph[mod].setdefault(t, path)
    return graph


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    crates_dir = os.path.join(root, "crates")
    found = 0
    for crate in sorted(os.listdir(crates_dir)):
        src = os.path.join(crates_dir, crate, "src")
        if not os.path.isdir(src):
            continue
        graph = edges(src)
        for comp in cycles(graph):
            found += 1
            print(f"crates/{crate}: module cycle among {', '.join(comp)}")
            for a in comp:
                for b, path in sorted(graph[a].items()):
                    if b in comp:
                        print(f"  {a} -> {b}  ({os.path.relpath(path, root)})")
    if found:
        print(f"{found} module cycle(s)")
        return 1
    print("no module cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
