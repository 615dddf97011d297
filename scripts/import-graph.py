#!/usr/bin/env python3
"""The structure of a crate drawn from its imports: which module uses which, any circle among them, and any
import up the crate's layers.

    scripts/import-graph.py emulator/src            # fails (exit 1) on a circle, naming its modules
    scripts/import-graph.py emulator/src --edges    # and prints every module's imports
    scripts/import-graph.py emulator/src --layers ARCHITECTURE.md
                                                    # and fails when a module imports one of a layer above its
                                                    # own, or a module is in no layer of the table

A module is a file (`a/b.rs` and `a/b/mod.rs` are `a::b`; `lib.rs` is `crate`, `main.rs` the binary's root
`main`). A module uses another when its code names it: `crate::a::b`, the library by its crate name from the
binary (`fakecloud_x::a::b`), a name the library's root re-exports (`crate::Client`, from `pub use
client::Client` or `pub use types::*`), `super::x`, `self::child::` or a bare `child::` of a module it
declares. Declaring a child (`mod x;`) is not a use, and neither is a comment or a `#[cfg(test)] mod tests`
block (tests may reach anywhere).

The layers of a crate are a table in the file `--layers` names, after a line `<!-- layers: <the crate's src
path> -->`: one row a layer, top to bottom, its modules in the second column as `name`s. A module may import its
own layer's modules and those of the layers below; the roots (`crate`, `main`) wire them all. `make lint` runs
this on every crate, with the layers ARCHITECTURE.md draws.

The same file may say where a crate's SQL is written, in a line `<!-- sql: <src path>; only in: a, b; sqlx
elsewhere: Error, x::Y -->`: the check then fails on a statement (a string starting with SELECT, INSERT, ...) or
a path into sqlx (`sqlx::query`, `use sqlx::{..}`) in any other top-level module, but for the sqlx items named
after `sqlx elsewhere` (and what is inside them, `Error::Database`), which run no SQL.
"""

import os
import re
import sys


ROOTS = ("crate", "main")


def sources(root):
    """(module path, file, source with comments and the trailing test module removed) of every module; the
    source keeps its lines where they were."""
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root)[:-3]
            if rel.endswith("/mod"):
                rel = rel[:-4]
            name = {"lib": "crate", "main": "main"}.get(rel, rel.replace("/", "::"))
            with open(path, encoding="utf-8") as fh:
                src = fh.read()
            src = re.split(r"#\[cfg\(test\)\]\s*mod tests\b", src)[0]
            # Line comments (doc comments included); a `//` inside a string only shortens what is scanned.
            yield name, path, re.sub(r"//[^\n]*", "", src)


def modules(root):
    """Module path -> source (see `sources`)."""
    return {name: src for name, _, src in sources(root)}


def crate_name(root):
    """The library's name as code writes it (`fakecloud_emulator`), from the package's Cargo.toml."""
    try:
        with open(os.path.join(root, "..", "Cargo.toml"), encoding="utf-8") as fh:
            found = re.search(r'^name\s*=\s*"([^"]+)"', fh.read(), re.M)
    except OSError:
        return None
    return found.group(1).replace("-", "_") if found else None


def reexports(mods):
    """Names the library's root re-exports -> the module they come from."""
    root = mods.get("crate", "")
    found = {}
    for path, group in re.findall(r"\bpub use (?:self::)?((?:[a-z_0-9]+::)+)(?:\{([^}]*)\}|\*|[A-Za-z_0-9]+)", root):
        module = path.rstrip(":")
        if module not in mods:
            continue
        if group:
            names = [n.split("::")[-1].split(" as ")[-1].strip() for n in group.split(",")]
        else:
            names = re.findall(r"\bpub use (?:self::)?" + re.escape(path) + r"([A-Za-z_0-9]+)", root)
        # A glob brings every public item of the module.
        if f"pub use {path}*" in root or f"pub use self::{path}*" in root:
            names += re.findall(r"\bpub (?:async )?(?:struct|enum|fn|type|const|static|trait|mod) ([A-Za-z_0-9]+)", mods[module])
        for n in names:
            if n:
                found.setdefault(n, module)
    return found


def resolve(mods, path, exported):
    """The longest prefix of `path` that is a module, or the module a name the root re-exports comes from."""
    parts = path.split("::")
    for i in range(len(parts), 0, -1):
        candidate = "::".join(parts[:i])
        if candidate in mods:
            return candidate
    return exported.get(parts[0])


def parent_of(module):
    return "crate" if "::" not in module else module.rsplit("::", 1)[0]


def join(base, name):
    return name if base in ROOTS else f"{base}::{name}"


def edges(mods, name=None):
    graph = {m: set() for m in mods}
    exported = reexports(mods)
    roots = r"(?:crate|" + re.escape(name) + ")" if name else "crate"
    for m, src in mods.items():
        targets = []
        # crate::a::b, crate::a::{b, c::d}, crate::Name; the same through the library's name
        for base, group, last in re.findall(r"\b" + roots + r"::((?:[A-Za-z_0-9]+::)*)(?:\{([^}]*)\}|([A-Za-z_0-9]+))?", src):
            base = base.rstrip(":")
            if group:
                targets += [join(base, item) if base else item for item in re.findall(r"([A-Za-z_0-9]+(?:::[A-Za-z_0-9]+)*)", group)]
            elif last:
                targets.append(f"{base}::{last}" if base else last)
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
            r = resolve(mods, t, exported)
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


def top_of(module):
    return module.split("::")[0]


def layers(path, root):
    """The layer table for `root` in the file `path`: a list of sets of top-level module names, top first."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    marker = f"<!-- layers: {root.rstrip('/')} -->"
    if marker not in text:
        return None
    rows = []
    for line in text.split(marker, 1)[1].lstrip().splitlines():
        if not line.startswith("|"):
            break
        cells = line.strip("|").split("|")
        if len(cells) >= 2 and "`" in cells[1]:
            rows.append(set(re.findall(r"`([a-z_0-9]+)`", cells[1])))
    return rows


def upward(graph, table):
    """Each import of a module from a layer above the importer's, and the problems of the table itself."""
    layer = {m: i for i, row in enumerate(table) for m in row}
    problems = []
    tops = {top_of(m) for m in graph if m not in ROOTS}
    problems += [f"{t} is in no layer" for t in sorted(tops - set(layer))]
    problems += [f"the layers name {t}, which is not a module" for t in sorted(set(layer) - tops)]
    for m in sorted(graph):
        if m in ROOTS or top_of(m) not in layer:
            continue
        for t in sorted(graph[m]):
            if t not in ROOTS and top_of(t) in layer and layer[top_of(t)] < layer[top_of(m)]:
                problems.append(f"{m} imports {t}, from a layer above its own")
    return problems


# A string that starts as an SQL statement does, a keyword and a space (raw or not): `"SELECT ...`, `r#"INSERT ...`.
STATEMENT = re.compile(
    r'(?:r#*)?"\s*(?:SELECT|INSERT|UPDATE|DELETE|WITH|VACUUM|CREATE|DROP|ALTER|PRAGMA|SET|BEGIN|COMMIT|ROLLBACK'
    r'|SAVEPOINT|RELEASE|TRUNCATE|EXPLAIN|ANALYZE|REINDEX|LISTEN|NOTIFY|LOCK|COPY)\s'
)


def sql_rule(path, root):
    """Where `path` says SQL is written for `root`: (top-level modules, sqlx items allowed elsewhere), or None."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    found = re.search(
        r"<!-- sql: " + re.escape(root.rstrip("/")) + r"; only in: ([^;]*); sqlx elsewhere: (.*?) -->", text
    )
    if not found:
        return None
    names = lambda cell: {n.strip() for n in cell.split(",") if n.strip()}
    return names(found.group(1)), names(found.group(2))


def stray_sql(root, rule):
    """Each statement and each use of sqlx outside the modules `rule` gives SQL to."""
    homes, allowed = rule
    problems = []
    for name, path, src in sources(root):
        if top_of(name) in homes:
            continue
        line = lambda at: src.count("\n", 0, at) + 1
        for m in STATEMENT.finditer(src):
            problems.append(f"{path}:{line(m.start())}: an SQL statement ({m.group(0).strip()} ...)")
        for m in re.finditer(r"\bsqlx::(\{|[A-Za-z_0-9]+(?:::[A-Za-z_0-9]+)*)", src):
            item = m.group(1)
            if not any(item == a or item.startswith(a + "::") for a in allowed):
                problems.append(f"{path}:{line(m.start())}: sqlx::{item}")
    return problems, homes


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip())
        return 2
    root = sys.argv[1]
    if not os.path.isdir(root):
        print(f"{root}: no such directory; give a crate's src directory")
        return 2
    graph = edges(modules(root), crate_name(root))
    if "--edges" in sys.argv:
        for m in sorted(graph):
            print(f"{m} -> {', '.join(sorted(graph[m])) or '(nothing)'}")
    found = circles(graph)
    for c in found:
        print(f"circle: {' <-> '.join(c)}")
        for m in c:
            print(f"  {m} uses {', '.join(sorted(graph[m] & set(c)))}")
    problems, stray, homes = [], [], None
    if "--layers" in sys.argv:
        path = sys.argv[sys.argv.index("--layers") + 1]
        table = layers(path, root)
        if table is None:
            print(f"{path} has no layer table for {root} (a line <!-- layers: {root.rstrip('/')} --> before it)")
            return 1
        problems = upward(graph, table)
        for p in problems:
            print(f"layers: {p}")
        rule = sql_rule(path, root)
        if rule:
            stray, homes = stray_sql(root, rule)
            homes = ", ".join(sorted(homes))
            for p in stray:
                print(f"sql: {p}, outside {homes}")
    if found:
        print(f"{root}: {len(found)} circle(s) among modules; move what they share into a module of its own")
    if problems:
        print(f"{root}: {len(problems)} layer problem(s); move what is shared below the layer that needs it")
    if stray:
        print(f"{root}: {len(stray)} place(s) with SQL outside {homes}; move it into them")
    if found or problems or stray:
        return 1
    layered = f", layered as {sys.argv[sys.argv.index('--layers') + 1]} draws" if "--layers" in sys.argv else ""
    sql = f", SQL only in {homes}" if homes else ""
    print(f"{root}: {len(graph)} modules, no circle{layered}{sql}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
