#!/usr/bin/env python3
"""The architecture's two structural rules, checked from the source (ARCHITECTURE.md, "Invariants"):

1. **No crate depends upward.** Each workspace crate has a layer (LAYERS below); a crate's
   `[dependencies]` (not its dev-dependencies: tests may start an engine) name only crates of lower
   layers. A new crate must be given a layer here.
2. **No module circles inside a crate.** The module graph is read from the code: a module that names
   `crate::a::b`, `super::…` or `self::…` depends on the module that path lands in. Each such edge is
   lifted to the two sibling modules under the nearest common parent (a parent and its own child are not
   a circle: `mod` and `pub use` go down, `super::` items go up), and the siblings of each parent must
   form no circle (a strongly connected component of two or more modules). `#[cfg(test)]` code and
   `tests` modules are left out.

3. **The portal calls no API handler.** No file under crates/server/src/portal names `crate::api`:
   the portal and the API both call the service layer (`crate::service`), each mapping its errors to
   its own form (a page, a problem document).

4. **`core` knows no HTTP.** gpuhub-core's `[dependencies]` name no HTTP crate (HTTP_CRATES), and utoipa
   only as optional (its `openapi` feature, which gpuhub-api turns on for the server).

5. **Every integration test uses the test kit.** Each test binary under `crates/*/tests` (a `tests/x.rs`
   or `tests/x/main.rs`, with the modules it declares by `mod name;`) names `gpuhub_testkit`, except
   the tests of the pure crates (PURE_TESTS: black-box tests of pure functions, with no server,
   engine, program or clock to share) and the binaries listed in KIT_EXCEPTIONS, each with its reason.
   An exception that uses the kit, or that no longer exists, is an error too (the lists only shrink).

Circles that exist today and are being broken are listed in scripts/known-cycles.txt, one per line
(`crate[/parent]: module module …`). The check fails on a circle not listed there, on a listed circle
that grew, and on a listed circle that no longer exists (delete its line: the list only shrinks).

Usage: python3 scripts/check-layers.py [--print]   (--print lists every circle with one edge of each)
"""

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = ROOT / "crates"
KNOWN = ROOT / "scripts" / "known-cycles.txt"
PORTAL = CRATES / "server" / "src" / "portal"

# Lower numbers are lower layers. Pure types and rules, then the pieces over them, then the outside
# systems (one crate each), the control loop, the servers, and the binary on top.
LAYERS = {
    "core": 0,
    "homes": 0,
    "identity": 0,
    "mps": 0,
    # the HTTP API's JSON shapes, just over the domain types: the server and the CLI speak through it
    "api": 1,
    "sched": 2,
    "store": 2,
    "driver": 2,
    "gpu": 2,
    "client": 2,
    "config": 3,
    "docker": 3,
    "slurm": 3,
    "lxd": 3,
    "kube": 3,
    "controller": 3,
    "monitor": 3,
    "proxy": 4,
    "ssh": 4,
    "gpucheck": 5,
    "sim": 4,
    "server": 5,
    "gpuhub": 6,
    # the shared test kit, over the server: named only in [dev-dependencies], never by a crate of layer 6
    "testkit": 6,
}

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def crate_dirs():
    return sorted(p.parent for p in CRATES.glob("*/Cargo.toml"))


def check_crate_layers():
    errors = []
    for d in crate_dirs():
        name = d.name
        manifest = tomllib.loads((d / "Cargo.toml").read_text())
        if name not in LAYERS:
            errors.append(f"crate {name} has no layer in scripts/check-layers.py (LAYERS)")
            continue
        deps = manifest.get("dependencies", {})
        for dep in deps:
            if not dep.startswith("gpuhub-"):
                continue
            other = dep.removeprefix("gpuhub-")
            if other not in LAYERS:
                errors.append(f"crate {name} depends on {dep}, which has no layer")
            elif LAYERS[other] >= LAYERS[name]:
                errors.append(
                    f"crate {name} (layer {LAYERS[name]}) depends on {dep} (layer {LAYERS[other]}): "
                    "a crate depends only on lower layers"
                )
    return errors


def module_files(src: Path):
    """Module path (tuple) -> file, for every module of the crate rooted at src (lib.rs or main.rs)."""
    mods = {}
    root = src / "lib.rs"
    if not root.exists():
        root = src / "main.rs"
    if not root.exists():
        return mods
    mods[()] = root
    for f in sorted(src.rglob("*.rs")):
        if f in (src / "lib.rs", src / "main.rs") or "bin" in f.relative_to(src).parts[:1]:
            continue
        rel = f.relative_to(src).with_suffix("")
        parts = rel.parts
        if parts[-1] == "mod":
            parts = parts[:-1]
        if "tests" in parts or "testutil" in parts:
            continue
        mods[tuple(parts)] = f
    # keep only modules whose parent exists (files not declared anywhere are not modules)
    return {m: f for m, f in mods.items() if all(m[:i] in mods for i in range(len(m)))}


def strip_tests(text: str) -> str:
    """The file without `#[cfg(test)]` items (by convention the last item of a file) and comments."""
    cut = text.find("#[cfg(test)]")
    if cut >= 0:
        text = text[:cut]
    text = re.sub(r"//[^\n]*", "", text)
    return text


def expand_use(tree: str):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e'] (aliases and globs dropped)."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        tree = tree.split("as")[0] if "::" not in tree.split("as")[-1] else tree
        return [tree.removesuffix("::*").removesuffix("::self")]
    prefix, inner = m.group(1), m.group(2)
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        items.append(cur)
    out = []
    for it in items:
        if it in ("self", ""):
            out.append(prefix.removesuffix("::"))
        else:
            out.extend(expand_use(prefix + it))
    return out


def references(text: str):
    """(line, path) for every `crate::`, `super::` or `self::` path the code names."""
    refs = []
    for m in re.finditer(r"\buse\s+((?:crate|super|self)\b[^;]*);", text):
        line = text.count("\n", 0, m.start()) + 1
        for p in expand_use(m.group(1)):
            refs.append((line, p))
    body = re.sub(r"\buse\s+[^;]*;", lambda m: "\n" * m.group(0).count("\n"), text)
    for m in re.finditer(rf"\b(?:crate|super|self)(?:::(?:super|{IDENT}))+", body):
        line = body.count("\n", 0, m.start()) + 1
        refs.append((line, m.group(0)))
    return refs


def resolve(module, path: str, mods):
    """The module a path lands in, from `module`."""
    parts = [p for p in path.split("::") if p]
    if not parts:
        return None
    if parts[0] == "crate":
        base, rest = (), parts[1:]
    elif parts[0] in ("super", "self"):
        base = tuple(module)
        rest = parts
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    else:
        return None
    best = base
    cur = base
    for p in rest:
        cur = cur + (p,)
        if cur in mods:
            best = cur
        else:
            break
    return best


def sccs(nodes, edges):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def crate_cycles(crate_dir: Path):
    """[(key, members, {(a, b): 'file:line'})] for every circle among sibling modules of the crate."""
    mods = module_files(crate_dir / "src")
    levels = {}  # parent -> {child: {child: where}}
    for m, f in mods.items():
        text = strip_tests(f.read_text())
        for line, path in references(text):
            target = resolve(m, path, mods)
            if target is None or target == m:
                continue
            common = 0
            while common < min(len(m), len(target)) and m[common] == target[common]:
                common += 1
            if common == len(m) or common == len(target):
                continue  # a module and its own ancestor or descendant
            parent, a, b = m[:common], m[common], target[common]
            where = f"{f.relative_to(ROOT)}:{line}"
            levels.setdefault(parent, {}).setdefault(a, {}).setdefault(b, where)
    found = []
    for parent, edges in sorted(levels.items()):
        nodes = sorted(set(edges) | {b for e in edges.values() for b in e})
        for comp in sccs(nodes, {a: set(bs) for a, bs in edges.items()}):
            key = crate_dir.name + ("/" + "::".join(parent) if parent else "")
            inside = {(a, b): w for a, bs in edges.items() for b, w in bs.items() if a in comp and b in comp}
            found.append((key, comp, inside))
    return found


def read_known():
    known = {}
    if KNOWN.exists():
        for raw in KNOWN.read_text().splitlines():
            line = raw.split("#")[0].strip()
            if not line:
                continue
            key, _, members = line.partition(":")
            known.setdefault(key.strip(), []).append(set(members.split()))
    return known


HTTP_CRATES = {"axum", "http", "http-body-util", "hyper", "hyper-util", "reqwest", "tower", "tower-http", "utoipa-axum"}


def check_core_knows_no_http():
    deps = tomllib.loads((CRATES / "core" / "Cargo.toml").read_text()).get("dependencies", {})
    errors = [f"gpuhub-core depends on {d}: core knows no HTTP (gpuhub-api holds the API)" for d in deps if d in HTTP_CRATES]
    utoipa = deps.get("utoipa")
    if utoipa is not None and not (isinstance(utoipa, dict) and utoipa.get("optional")):
        errors.append("gpuhub-core depends on utoipa outside its optional `openapi` feature")
    return errors


def check_portal():
    """Errors for portal files that name `crate::api`."""
    errors = []
    for f in sorted(PORTAL.rglob("*.rs")):
        text = re.sub(r"//[^\n]*", "", f.read_text())
        m = re.search(r"\bcrate::api\b", text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            errors.append(
                f"{f.relative_to(ROOT)}:{line} names crate::api: the portal calls the service layer "
                "(crate::service), never an API handler"
            )
    return errors


# The one place each program asks the time (ARCHITECTURE.md, invariants): the hub's clock seam, the
# CLI's, the Slurm engine's and gpu-check's. `Utc::now()` anywhere else in `src/` (tests beside the code
# included: they pin their time) bypasses the seam.
CLOCKS = {
    "crates/driver/src/clock.rs",
    "crates/client/src/clock.rs",
    "crates/slurm/src/clock.rs",
    "crates/gpucheck/src/seams.rs",
}


def clock_calls(text: str):
    """Line numbers of `Utc::now()` calls in `text`, comments left out."""
    text = re.sub(r"//[^\n]*", "", text)
    return [text.count("\n", 0, m.start()) + 1 for m in re.finditer(r"\bUtc::now\(\)", text)]


def check_clock():
    errors = []
    for f in sorted(CRATES.glob("*/src/**/*.rs")):
        rel = str(f.relative_to(ROOT))
        if rel in CLOCKS:
            continue
        for line in clock_calls(f.read_text()):
            errors.append(f"{rel}:{line} calls Utc::now(): take the time from the clock seam (or `now` as an argument)")
    for c in sorted(CLOCKS):
        if not clock_calls((ROOT / c).read_text()):
            errors.append(f"{c} is listed as a clock but asks no time: update CLOCKS")
    return errors


# Crates whose tests/ are black-box tests of pure functions (parsers, the scheduling pass, the simulator
# over committed traces): no server, engine, fake program, clock or mount to share, and fixtures of
# their own crate's types (sched's `Node`, not the hub's nodes). Not integration tests in the kit's
# sense (ARCHITECTURE.md, "Testing").
PURE_TESTS = {
    "core": "property tests of the parsers users reach (quantities, names, environment)",
    "api": "property tests of the API's request JSON",
    "sched": "the scheduling pass on its own Node/Demand types, scenarios and properties",
    "sim": "the simulator and its trace parsers on committed fixtures",
}

# Test binaries of other crates that do not use the kit, with why.
KIT_EXCEPTIONS = {
    "crates/gpucheck/tests/checks.rs": "gpu-check's decisions over its own seams' recording fakes "
    "(gpucheck::fake: worker launcher, clock, NVML sampler, MPS), which only gpucheck has; nothing of the "
    "hub runs",
}

KIT = re.compile(r"\bgpuhub_testkit\b")
MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", re.M)


def uses_kit(files: dict, root: str) -> bool:
    """Whether the test binary rooted at `root` names the kit, in its own text or in a module it declares
    (`mod name;` next to it: `name.rs` or `name/mod.rs`, and so on down). `files` maps paths (with `/`)
    to their text: a pure function of the tree."""
    seen, todo = set(), [root]
    while todo:
        path = todo.pop()
        if path in seen or path not in files:
            continue
        seen.add(path)
        text = re.sub(r"//[^\n]*", "", files[path])
        if KIT.search(text):
            return True
        # a root or `mod.rs` declares modules beside it; `x.rs` declares them in `x/`
        here = path.rsplit("/", 1)[0]
        name = path.rsplit("/", 1)[1]
        if name not in ("main.rs", "mod.rs") and path != root:
            here = path.removesuffix(".rs")
        for m in MOD_DECL.findall(text):
            todo += [f"{here}/{m}.rs", f"{here}/{m}/mod.rs"]
    return False


def test_roots(crate_dir: Path):
    """The test binaries of a crate: `tests/x.rs` and `tests/x/main.rs`."""
    tests = crate_dir / "tests"
    return sorted(list(tests.glob("*.rs")) + list(tests.glob("*/main.rs")))


def check_tests_use_kit():
    errors = []
    for name in list(PURE_TESTS):
        if name not in LAYERS:
            errors.append(f"PURE_TESTS names {name}, which is no crate")
    for exc in KIT_EXCEPTIONS:
        if not (ROOT / exc).exists():
            errors.append(f"KIT_EXCEPTIONS lists {exc}, which does not exist: delete its line")
    for d in crate_dirs():
        if d.name in PURE_TESTS or not (d / "tests").is_dir():
            continue
        files = {str(f.relative_to(ROOT)): f.read_text() for f in (d / "tests").rglob("*.rs")}
        for root in test_roots(d):
            rel = str(root.relative_to(ROOT))
            used = uses_kit(files, rel)
            if rel in KIT_EXCEPTIONS and used:
                errors.append(f"{rel} uses the test kit now: delete its line in KIT_EXCEPTIONS")
            elif rel not in KIT_EXCEPTIONS and not used:
                errors.append(
                    f"{rel} does not use the test kit (gpuhub_testkit): take the server, engine, fakes, "
                    "waits and fixtures from it (a helper two tests need goes into the kit), or list it "
                    "in KIT_EXCEPTIONS with why"
                )
    return errors


def self_test():
    """The pure parts on small trees (run on every check: they take no time)."""
    tree = {
        "c/tests/a.rs": "mod common;\nfn t() {}",
        "c/tests/common/mod.rs": "pub mod deep;",
        "c/tests/common/deep.rs": "use gpuhub_testkit::Hub;",
        "c/tests/b.rs": "// gpuhub_testkit in a comment only\nmod helpers;",
        "c/tests/helpers.rs": "mod inner;",
        "c/tests/helpers/inner.rs": "pub use gpuhub_testkit::run_spec;",
        "c/tests/e/main.rs": "mod x;",
        "c/tests/e/x.rs": "fn none() {}",
    }
    assert uses_kit(tree, "c/tests/a.rs"), "through common/mod.rs and its child"
    assert uses_kit(tree, "c/tests/b.rs"), "through helpers.rs's child helpers/inner.rs"
    assert not uses_kit(tree, "c/tests/e/main.rs"), "no module names the kit"
    tree["c/tests/e/x.rs"] = "// gpuhub_testkit\n"
    assert not uses_kit(tree, "c/tests/e/main.rs"), "a comment is no use"
    assert clock_calls("let a = Utc::now();\n// Utc::now()\nlet b = chrono::Utc::now();") == [1, 3]


def main():
    show = "--print" in sys.argv[1:]
    self_test()
    errors = (
        check_crate_layers() + check_portal() + check_core_knows_no_http() + check_tests_use_kit() + check_clock()
    )
    known = read_known()
    matched = set()
    cycles = []
    for d in crate_dirs():
        cycles.extend(crate_cycles(d))
    for key, comp, inside in cycles:
        allowed = [i for i, k in enumerate(known.get(key, [])) if set(comp) <= k]
        if show or not allowed:
            print(f"{key}: {' '.join(comp)}")
            for (a, b), where in sorted(inside.items()):
                print(f"    {a} -> {b}  ({where})")
        if allowed:
            matched.update((key, i) for i in allowed)
        else:
            errors.append(
                f"module circle in {key}: {' '.join(comp)} (break it; the edges are printed above)"
            )
    for key, sets in known.items():
        for i, members in enumerate(sets):
            if (key, i) not in matched:
                errors.append(
                    f"scripts/known-cycles.txt lists {key}: {' '.join(sorted(members))}, which is no "
                    "circle any more: delete or shrink that line"
                )
    for e in errors:
        print(f"check-layers: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    roots = [r for d in crate_dirs() if d.name not in PURE_TESTS for r in test_roots(d)]
    print(f"check-layers: {len(crate_dirs())} crates layered, {len(cycles)} known module circle(s) left")
    print(
        f"check-layers: {len(roots) - len(KIT_EXCEPTIONS)} of {len(roots)} integration test binaries use the "
        f"test kit ({len(KIT_EXCEPTIONS)} listed exception(s); the tests of {', '.join(PURE_TESTS)} are pure)"
    )


if __name__ == "__main__":
    main()
