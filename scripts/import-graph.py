#!/usr/bin/env python3
"""The structure of a crate drawn from its imports: which module uses which, and any circle among them.

    scripts/import-graph.py emulator/src            # fails (exit 1) on a circle, naming its modules
    scripts/import-graph.py emulator/src --edges    # and prints every module's imports
    scripts/import-graph.py emulator/src --only-from http=serve,server
                                                    # and fails when a module outside http, serve and server
                                                    # imports http (or a module under it): a lower layer
                                                    # reaching up

A module is a file (`a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs`/`main.rs` are `crate`). A module uses
another when its code names it: `crate::a::b`, `super::x`, `self::child::` or a bare `child::` of a module it
declares. Declaring a child (`mod x;`) is not a use, and neither is a comment or a `#[cfg(test)] mod tests`
block (tests may reach anywhere). `make lint` runs this on the emulator: its layers import downward only.
"""

import os
import re
import sys


def modules(root):
    """Module path -> source with comments and the trailing test module removed."""
    found = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), root)[:-3]
            if rel.endswith("/mod"):
                rel = rel[:-4]
            name = "crate" if rel in ("lib", "main") else rel.replace("/", "::")
            with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                src = fh.read()
            src = re.split(r"#\[cfg\(test\)\]\s*mod tests\b", src)[0]
            # Line comments (doc comments included); a `//` inside a string only shortens what is scanned.
            found[name] = re.sub(r"//[^\n]*", "", src)
    return found


def resolve(mods, path):
    """The longest prefix of `path` that is a module."""
    parts = path.split("::")
    for i in range(len(parts), 0, -1):
        candidate = "::".join(parts[:i])
        if candidate in mods:
            return candidate
    return None


def parent_of(module):
    return "crate" if "::" not in module else module.rsplit("::", 1)[0]


def join(base, name):
    return name if base == "crate" else f"{base}::{name}"


def edges(mods):
    graph = {m: set() for m in mods}
    for m, src in mods.items():
        targets = []
        # crate::a::b, crate::a::{b, c::d}
        for base, group in re.findall(r"\bcrate::((?:[a-z_0-9]+::)*)(?:\{([^}]*)\})?", src):
            base = base.rstrip(":")
            if group:
                targets += [join(base, item) if base else item for item in re.findall(r"([a-z_0-9]+(?:::[a-z_0-9]+)*)", group)]
            if base:
                targets.append(base)
        # super::x, super::{x, y::z}: the parent's items or a sibling
        parent = parent_of(m)
        for name in re.findall(r"\bsuper::([A-Za-z_0-9]+)", src):
            targets.append(join(parent, name))
        for group in re.findall(r"\bsuper::\{([^}]*)\}", src):
            targets += [join(parent, item) for item in re.findall(r"([A-Za-z_0-9]+)(?:::[^,]*)?", group)]
        # a child it declares, named as `child::` or `self::child::`
        for child in re.findall(r"^\s*(?:pub(?:\([a-z]+\))? )?mod ([a-z_0-9]+);", src, re.M):
            if re.search(r"(?<![:\w])(?:self::)?" + child + r"::", src) or re.search(r"self::\{[^}]*\b" + child + r"\b", src):
                targets.append(join(m, child))
        for t in targets:
            r = resolve(mods, t)
            if r and r != m:
                graph[m].add(r)
    return graph


def circles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def within(module, top):
    return module == top or module.startswith(top + "::")


def upward(graph, rules):
    """Imports of a guarded module from outside it and its allowed importers: `rules` is `top=a,b`."""
    found = []
    for rule in rules:
        top, _, allowed = rule.partition("=")
        tops = [top] + [a for a in allowed.split(",") if a]
        for m in sorted(graph):
            if any(within(m, t) for t in tops):
                continue
            found += [(m, t) for t in sorted(graph[m]) if within(t, top)]
    return found


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip())
        return 2
    graph = edges(modules(sys.argv[1]))
    rules = [sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--only-from"]
    if "--edges" in sys.argv:
        for m in sorted(graph):
            print(f"{m} -> {', '.join(sorted(graph[m])) or '(nothing)'}")
    found = circles(graph)
    for c in found:
        print(f"circle: {' <-> '.join(c)}")
        for m in c:
            print(f"  {m} uses {', '.join(sorted(graph[m] & set(c)))}")
    reaching_up = upward(graph, rules)
    for m, t in reaching_up:
        print(f"upward: {m} imports {t}")
    if found:
        print(f"{sys.argv[1]}: {len(found)} circle(s) among modules; move what they share into a module of its own")
    if reaching_up:
        print(f"{sys.argv[1]}: {len(reaching_up)} upward import(s); move what is shared below the layer that needs it")
    if found or reaching_up:
        return 1
    print(f"{sys.argv[1]}: {len(graph)} modules, no circle, no upward import")
    return 0


if __name__ == "__main__":
    sys.exit(main())
