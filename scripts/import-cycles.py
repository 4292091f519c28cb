#!/usr/bin/env python3
"""Finds import circles between the module files of one Rust crate.

Why: "no module imports one that imports it back" is a claim about the
layering of a crate (a request flows down the layers once) that the compiler
does not check; this script does, so the claim can be re-checked by anyone.

Usage: python3 scripts/import-cycles.py [--include-tests] [--out-dir DIR] [-v] [SRC...]

SRC is a crate's source directory (e.g. crates/diameter/src); without one,
every crate of the workspace (crates/*/src) is checked, which is what the
test command (scripts/test.sh) runs. Every crate
root found there (lib.rs, main.rs, bin/*.rs) is read with the modules it
declares (`mod x;`). Each module file is a node; file A depends on file B
when A names an item that B defines, by `use crate::...`, `use super::...`,
`use self::...`, a path relative to a child module or to a name A imported,
or such a path written in code (`crate::x::y(...)`). Re-exports (`pub use`)
and imports are followed to the file that defines the item, so a facade
`mod.rs` that re-exports its children does not join its users to them.
A glob import (`use super::*`) depends on the files of the names the
importing module actually mentions. Comments, strings and doc links are not
read.

Code under `#[cfg(test)]` is left out by default (unit tests may build
fixtures with a higher layer); --include-tests counts it too. A crate that
includes generated code (`include!(concat!(env!("OUT_DIR"), "/x.rs"))`) is
read with that code when --out-dir names the build script's output
directory; otherwise the script says what it did not read.

Prints every cycle (its files, and one line of evidence per edge) and
exits 1 when any crate has one, 0 when there is none, 2 on a usage error.
"""

import argparse
import os
import re
import signal
import sys
from collections import defaultdict

ITEM_KEYWORDS = {"fn", "struct", "enum", "union", "trait", "type", "const", "static"}


class Token:
    __slots__ = ("kind", "text", "line")

    def __init__(self, kind, text, line):
        self.kind = kind  # 'id', 'p' (punctuation), 'str', 'lit'
        self.text = text
        self.line = line

    def __repr__(self):
        return f"{self.kind}:{self.text}@{self.line}"


def tokenize(src):
    """Rust tokens without comments; strings keep their text (for include!)."""
    toks = []
    i, n, line = 0, len(src), 1
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
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
                    if src[i] == "\n":
                        line += 1
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:i + 260]) or (
            c == "b" and re.match(r'br#*"', src[i:i + 260])
        ):
            m = re.match(r'(b?)r(#*)"', src[i:])
            hashes = m.group(2)
            start = i + m.end()
            end = src.find('"' + hashes, start)
            end = n if end < 0 else end
            text = src[start:end]
            toks.append(Token("str", text, line))
            line += text.count("\n")
            i = end + 1 + len(hashes)
        elif c == '"' or (c == "b" and i + 1 < n and src[i + 1] == '"'):
            j = i + (2 if c == "b" else 1)
            buf = []
            while j < n and src[j] != '"':
                if src[j] == "\\":
                    buf.append(src[j:j + 2])
                    j += 2
                    continue
                buf.append(src[j])
                j += 1
            text = "".join(buf)
            toks.append(Token("str", text, line))
            line += text.count("\n")
            i = j + 1
        elif c == "'" or (c == "b" and i + 1 < n and src[i + 1] == "'"):
            j = i + (2 if c == "b" else 1)
            m = re.match(r"(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F_]*\}|.)|[^\\'\n])'", src[j:j + 16])
            if m:  # a char literal
                toks.append(Token("lit", src[i:j + m.end()], line))
                i = j + m.end()
            else:  # a lifetime or label
                m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", src[j:])
                i = j + (m.end() if m else 0)
                if not m:
                    i += 1
        elif c.isalpha() or c == "_":
            m = re.match(r"(r#)?[A-Za-z_][A-Za-z0-9_]*", src[i:])
            word = m.group(0)
            toks.append(Token("id", word[2:] if word.startswith("r#") else word, line))
            i += m.end()
        elif c.isdigit():
            m = re.match(r"[0-9][0-9A-Za-z_]*(\.[0-9][0-9A-Za-z_]*)?", src[i:])
            toks.append(Token("lit", m.group(0), line))
            i += m.end()
        elif src.startswith("::", i):
            toks.append(Token("p", "::", line))
            i += 2
        elif c == "$" and src.startswith("$crate", i):
            toks.append(Token("id", "crate", line))
            i += 6
        else:
            toks.append(Token("p", c, line))
            i += 1
    return toks


class Module:
    def __init__(self, path, file, inline, test):
        self.path = path  # tuple of names from the crate root
        self.file = file  # the file its code is in
        self.inline = inline
        self.test = test  # declared under #[cfg(test)]
        self.children = {}  # name -> module path
        self.defs = set()  # items defined here
        self.imports = {}  # name -> (absolute segments, line, is_test)
        self.globs = []  # (absolute module segments, line, is_test)
        self.refs = []  # (segments relative to here, line, is_test, text)
        self.idents = set()  # identifiers mentioned outside `use` items
        self.child_dir = None  # where `mod x;` files of this module live


class Crate:
    """One crate root's module tree."""

    def __init__(self, root_file, out_dir, include_tests, notes):
        self.modules = {}
        self.out_dir = out_dir
        self.include_tests = include_tests
        self.notes = notes
        self.files = {}
        self.load_file((), root_file, os.path.dirname(root_file), test=False)

    # ---- reading -------------------------------------------------------

    def load_file(self, modpath, path, child_dir, test):
        mod = Module(modpath, path, inline=False, test=test)
        mod.child_dir = child_dir
        self.modules[modpath] = mod
        self.files[path] = modpath
        with open(path, encoding="utf-8") as f:
            toks = tokenize(f.read())
        toks = self.expand_includes(toks, path)
        self.parse(toks, mod, test)

    def expand_includes(self, toks, path):
        out = []
        i = 0
        while i < len(toks):
            t = toks[i]
            if t.kind == "id" and t.text == "include" and i + 2 < len(toks) \
                    and toks[i + 1].text == "!" and toks[i + 2].text == "(":
                j, depth = i + 2, 0
                while j < len(toks):
                    if toks[j].text == "(":
                        depth += 1
                    elif toks[j].text == ")":
                        depth -= 1
                        if depth == 0:
                            break
                    j += 1
                inner = toks[i + 3:j]
                strs = [x.text for x in inner if x.kind == "str"]
                uses_out_dir = "OUT_DIR" in strs
                rest = "".join(s for s in strs if s != "OUT_DIR")
                target = None
                if uses_out_dir:
                    if self.out_dir:
                        target = os.path.join(self.out_dir, rest.lstrip("/"))
                    else:
                        self.notes.append(
                            f"{path}:{t.line}: includes generated code (OUT_DIR{rest}), "
                            "not read; pass --out-dir to read it")
                elif rest:
                    target = os.path.join(os.path.dirname(path), rest)
                if target:
                    if os.path.isfile(target):
                        with open(target, encoding="utf-8") as f:
                            gen = tokenize(f.read())
                        for g in gen:
                            g.line = t.line  # evidence points at the include!
                        out.extend(gen)
                        self.notes.append(f"{path}:{t.line}: read included {target}")
                    else:
                        self.notes.append(f"{path}:{t.line}: included {target} not found")
                i = j + 1
                if i < len(toks) and toks[i].text == ";":
                    i += 1
                continue
            out.append(t)
            i += 1
        return out

    def parse(self, toks, filemod, file_test):
        # Frames: (module, brace_depth_at_open, is_test, is_module_body)
        stack = [(filemod, 0, file_test, True)]
        depth = 0
        pending_test = False
        pending_path_attr = None
        item_test_depth = None  # brace depth where a cfg(test) item started
        i = 0
        n = len(toks)

        def cur():
            return stack[-1]

        while i < n:
            t = toks[i]
            mod, _, frame_test, _ = cur()
            in_test = frame_test or (item_test_depth is not None)
            module_level = cur()[3] and depth == cur()[1]

            if t.text == "#" and i + 1 < n and toks[i + 1].text in ("[", "!"):
                j = i + 1
                if toks[j].text == "!":
                    j += 1
                k, bdepth = j, 0
                while k < n:
                    if toks[k].text == "[":
                        bdepth += 1
                    elif toks[k].text == "]":
                        bdepth -= 1
                        if bdepth == 0:
                            break
                    k += 1
                attr = [x.text for x in toks[j + 1:k]]
                if attr[:1] == ["cfg"] and is_test_cfg(attr[1:]):
                    if toks[i + 1].text == "!":
                        stack[-1] = (mod, cur()[1], True, cur()[3])
                    else:
                        pending_test = True
                if attr[:2] == ["path", "="]:
                    pending_path_attr = toks[j + 3].text if j + 3 < n else None
                i = k + 1
                continue

            if pending_test and item_test_depth is None:
                # The item the attribute applies to starts here.
                item_test_depth = depth
                pending_test = False
                in_test = True

            if t.kind == "id" and t.text == "mod" and i + 2 < n and toks[i + 1].kind == "id":
                name = toks[i + 1].text
                child_path = mod.path + (name,)
                mod.children[name] = child_path
                if module_level:
                    mod.defs.add(name)
                if toks[i + 2].text == ";":
                    self.load_child(mod, name, pending_path_attr, in_test, t.line)
                    pending_path_attr = None
                    if item_test_depth == depth:
                        item_test_depth = None
                    i += 3
                    continue
                if toks[i + 2].text == "{":
                    child = Module(child_path, mod.file, inline=True, test=in_test)
                    child.child_dir = os.path.join(mod.child_dir, name)
                    self.modules[child_path] = child
                    depth += 1
                    stack.append((child, depth, in_test, True))
                    if item_test_depth is not None and item_test_depth == depth - 1:
                        item_test_depth = None  # the frame carries it now
                    i += 3
                    continue

            if t.kind == "id" and t.text == "use" and (i == 0 or toks[i - 1].text != "::"):
                j = i + 1
                while j < n and toks[j].text != ";":
                    j += 1
                self.parse_use(mod, toks[i + 1:j], in_test, t.line)
                if item_test_depth == depth:
                    item_test_depth = None
                i = j + 1
                continue

            if module_level and t.kind == "id":
                if t.text in ITEM_KEYWORDS and i + 1 < n and toks[i + 1].kind == "id" \
                        and toks[i + 1].text not in ITEM_KEYWORDS and toks[i + 1].text != "_":
                    mod.defs.add(toks[i + 1].text)
                elif t.text == "macro_rules" and i + 2 < n and toks[i + 1].text == "!":
                    mod.defs.add(toks[i + 2].text)

            if t.text == "{":
                depth += 1
            elif t.text == "}":
                if cur()[3] and depth == cur()[1] and len(stack) > 1:
                    stack.pop()
                depth -= 1
                if item_test_depth is not None and depth == item_test_depth:
                    item_test_depth = None
            elif t.text == ";" and item_test_depth is not None and depth == item_test_depth:
                item_test_depth = None

            if t.kind == "id" and (i == 0 or toks[i - 1].text != "::"):
                mod.idents.add(t.text)
                if i + 2 < n and toks[i + 1].text == "::" and toks[i + 2].kind == "id":
                    segs, j = [t.text], i + 1
                    while j + 1 < n and toks[j].text == "::" and toks[j + 1].kind == "id":
                        segs.append(toks[j + 1].text)
                        j += 2
                    if not (i > 0 and toks[i - 1].text == "in"):  # pub(in path)
                        mod.refs.append((segs, t.line, in_test, "::".join(segs)))
                    for s in segs[1:]:
                        mod.idents.add(s)
                    i = j
                    continue
            i += 1

    def load_child(self, parent, name, path_attr, test, line):
        if path_attr:
            candidates = [os.path.join(os.path.dirname(parent.file), path_attr)]
        else:
            candidates = [os.path.join(parent.child_dir, name + ".rs"),
                          os.path.join(parent.child_dir, name, "mod.rs")]
        for c in candidates:
            if os.path.isfile(c):
                if c.endswith("mod.rs"):
                    child_dir = os.path.dirname(c)
                else:
                    child_dir = c[:-3]
                self.load_file(parent.path + (name,), c, child_dir, test)
                return
        self.notes.append(f"{parent.file}:{line}: module {name} has no file ({candidates[0]})")

    def parse_use(self, mod, toks, test, line):
        """Records the names a `use` item binds, as absolute paths."""
        toks = [t for t in toks if t.text not in ("pub",)]
        # Drop a visibility restriction: pub(crate), pub(super), pub(in x).
        while toks and toks[0].text == "(":
            k = 0
            while k < len(toks) and toks[k].text != ")":
                k += 1
            toks = toks[k + 1:]
        for segs, alias, glob in expand_use_tree([t.text for t in toks]):
            if not segs:
                continue
            if segs[-1] == "self" and len(segs) > 1:
                segs = segs[:-1]  # `use a::b::{self}` binds b
            absolute = self.absolute(mod, segs)
            if absolute is None:
                continue
            if glob:
                mod.globs.append((absolute, line, test))
                continue
            name = alias or segs[-1]
            if name in ("self", "super", "crate"):
                name = None
            if name and name != "_":
                mod.imports[name] = (absolute, line, test)
            elif name == "_":
                mod.refs.append((segs, line, test, "::".join(segs)))

    # ---- resolving -----------------------------------------------------

    def absolute(self, mod, segs):
        """Segments from the crate root, or None for another crate's path."""
        first = segs[0]
        if first == "crate":
            return list(segs[1:])
        if first in ("super", "self"):
            base = list(mod.path)
            k = 0
            while k < len(segs) and segs[k] in ("super", "self"):
                if segs[k] == "super":
                    if not base:
                        return None
                    base.pop()
                k += 1
            return base + list(segs[k:])
        if first in mod.children:
            return list(mod.path) + list(segs)
        m = mod
        while m is not None:
            if first in m.imports:
                return list(m.imports[first][0]) + list(segs[1:])
            if not m.inline:
                break
            m = self.modules.get(m.path[:-1])
        return None

    def has_name(self, modpath, name):
        m = self.modules.get(tuple(modpath))
        return m is not None and (name in m.defs or name in m.children or name in m.imports)

    def resolve(self, segs, seen=None):
        """The file that defines what an absolute path names."""
        seen = seen or set()
        key = tuple(segs)
        if key in seen:
            return None
        seen.add(key)
        cur = ()
        for k, s in enumerate(segs):
            m = self.modules.get(cur)
            if m is None:
                return None
            if s in m.children:
                cur = m.children[s]
                continue
            if s in m.defs:
                return m.file
            if s in m.imports:
                return self.resolve(list(m.imports[s][0]) + list(segs[k + 1:]), seen)
            for g, _, _ in m.globs:
                if self.has_name(g, s):
                    return self.resolve(list(g) + list(segs[k:]), seen)
            return m.file
        m = self.modules.get(cur)
        return m.file if m else None

    def edges(self):
        """(from file, to file) -> [(line, text, is_test)]."""
        out = defaultdict(list)

        def add(mod, target_file, line, text, test):
            if target_file and target_file != mod.file:
                out[(mod.file, target_file)].append((line, text, test or mod.test))

        for mod in self.modules.values():
            used_bindings = set()
            for segs, line, test, text in mod.refs:
                if segs[0] not in ("crate", "super", "self") and segs[0] not in mod.children:
                    if segs[0] in mod.imports:
                        used_bindings.add(segs[0])
                absolute = self.absolute(mod, segs)
                if absolute is not None:
                    add(mod, self.resolve(absolute), line, text, test)
            for name, (absolute, line, test) in mod.imports.items():
                target = self.resolve(absolute)
                is_module = tuple(absolute) in self.modules
                # A module bound by `use` is a path prefix: the paths through
                # it (above) are its dependencies; only an unused one counts
                # as depending on the module's own file.
                if is_module and name in used_bindings:
                    continue
                add(mod, target, line, "use " + "::".join(["crate"] + list(absolute)), test)
            for g, line, test in mod.globs:
                gm = self.modules.get(tuple(g))
                if gm is None:
                    continue
                names = (gm.defs | set(gm.children) | set(gm.imports)) & mod.idents
                for name in sorted(names):
                    add(mod, self.resolve(list(g) + [name]), line,
                        "use " + "::".join(["crate"] + list(g) + ["*"]) + f" ({name})", test)
                if not names:
                    add(mod, gm.file, line, "use " + "::".join(["crate"] + list(g) + ["*"]), test)
        return out


def is_test_cfg(attr):
    """`(test)` or an `all(...)` with test in it: code only tests compile."""
    text = " ".join(attr)
    if text == "( test )":
        return True
    return text.startswith("( all (") and re.search(r"[(,] test [,)]", text) is not None \
        and "not ( test" not in text


def expand_use_tree(toks):
    """`a::{b, c::d as e, f::*}` -> [(segs, alias, is_glob), ...]."""
    results = []

    def walk(prefix, pos):
        segs = list(prefix)
        while pos < len(toks):
            t = toks[pos]
            if t == "::":
                pos += 1
            elif t == "{":
                pos += 1
                while pos < len(toks) and toks[pos] != "}":
                    pos = walk(segs, pos)
                    if pos < len(toks) and toks[pos] == ",":
                        pos += 1
                return pos + 1
            elif t == "*":
                results.append((segs, None, True))
                return pos + 1
            elif t in (",", "}"):
                break
            elif t == "as":
                results.append((segs, toks[pos + 1], False))
                return pos + 2
            else:
                segs.append(t)
                pos += 1
        if segs and segs != list(prefix):
            results.append((segs, None, False))
        return pos

    if toks and toks[0] == "::":
        return []  # an absolute path: another crate
    walk([], 0)
    return results


def crate_roots(src):
    roots = []
    for name in ("lib.rs", "main.rs"):
        p = os.path.join(src, name)
        if os.path.isfile(p):
            roots.append(p)
    bindir = os.path.join(src, "bin")
    if os.path.isdir(bindir):
        for name in sorted(os.listdir(bindir)):
            p = os.path.join(bindir, name)
            if name.endswith(".rs"):
                roots.append(p)
            elif os.path.isfile(os.path.join(p, "main.rs")):
                roots.append(os.path.join(p, "main.rs"))
    return roots


def strongly_connected(nodes, succ):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        # Iterative Tarjan: the module graphs are small, but recursion
        # limits are not worth the risk.
        work = [(v, iter(sorted(succ.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def shortest_cycle(comp, succ):
    """One shortest cycle through the first node of a component."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        nxt = []
        for v in queue:
            for w in sorted(succ.get(v, ())):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        queue = nxt
    return [start, start]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", nargs="*",
                    help="crate source directories, e.g. crates/diameter/src "
                         "(default: every crates/*/src of the workspace)")
    ap.add_argument("--include-tests", action="store_true",
                    help="count code under #[cfg(test)] too")
    ap.add_argument("--out-dir", help="the build script's OUT_DIR, to read generated code")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every dependency")
    args = ap.parse_args()

    srcs = args.src
    if not srcs:
        workspace = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates")
        srcs = sorted(
            os.path.relpath(os.path.join(workspace, d, "src"))
            for d in os.listdir(workspace)
            if os.path.isdir(os.path.join(workspace, d, "src")))
    worst = 0
    for src in srcs:
        worst = max(worst, check_crate(os.path.normpath(src), args))
    return worst


def check_crate(src, args):
    """Prints one crate's cycles; 1 when it has any, 2 when SRC is no crate."""
    roots = crate_roots(src)
    if not roots:
        print(f"{src}: no lib.rs, main.rs or bin/*.rs", file=sys.stderr)
        return 2

    notes = []
    edges = defaultdict(list)
    files = set()
    for root in roots:
        crate = Crate(root, args.out_dir, args.include_tests, notes)
        files |= set(crate.files)
        for key, ev in crate.edges().items():
            edges[key].extend(ev)

    def rel(p):
        return os.path.relpath(p, src)

    counted = {}
    test_only = 0
    for (a, b), ev in edges.items():
        live = [e for e in ev if args.include_tests or not e[2]]
        if live:
            counted[(a, b)] = live
        else:
            test_only += 1
    succ = defaultdict(set)
    for a, b in counted:
        succ[a].add(b)

    for note in notes:
        print("note: " + note.replace(src + os.sep, ""))
    if args.verbose:
        for (a, b), ev in sorted(counted.items()):
            line, text, _ = ev[0]
            print(f"{rel(a)} -> {rel(b)}   ({rel(a)}:{line} {text})")

    cycles = [c for c in strongly_connected(files, succ) if len(c) > 1]
    scope = "all code" if args.include_tests else "code outside #[cfg(test)]"
    noun = "dependency" if len(counted) == 1 else "dependencies"
    print(f"{src}: {len(files)} module files, {len(counted)} {noun} between "
          f"them ({scope}), {len(cycles)} import "
          f"{'cycle' if len(cycles) == 1 else 'cycles'}")
    if not args.include_tests and test_only:
        noun = "dependency" if test_only == 1 else "dependencies"
        print(f"  ({test_only} more {noun} only in #[cfg(test)] code, "
              "not counted; --include-tests counts them)")
    for k, comp in enumerate(cycles, 1):
        cyc = shortest_cycle(comp, succ)
        print(f"\ncycle {k}: {len(comp)} files bound together: "
              + ", ".join(rel(c) for c in comp))
        print("  e.g. " + " -> ".join(rel(c) for c in cyc))
        for a, b in zip(cyc, cyc[1:]):
            line, text, _ = counted[(a, b)][0]
            print(f"    {rel(a)}:{line}: {text}  ->  {rel(b)}")
    return 1 if cycles else 0


if __name__ == "__main__":
    # Piped into head: stop quietly like any other command-line tool.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
