"""A random sample of mutants of one module, each run against the tests that cover the module.

mutmut measures a module by running every mutant against the tests that reached its function
(docs/testing.md, "Mutation testing"); before that it runs its whole test selection once for its
statistics, which for the integration files of a module outside the engine's core takes longer
than the sample itself. This script needs no statistics: it draws ``--size`` mutants of the
module at random (seeded), applies each alone to a scratch copy of the checkout and runs the named
test files there (``pytest -x``; the first failure kills the mutant). A mutant still running after
three times the unchanged files' time plus a minute counts as killed ("timeout"), as in mutmut.

The operators are mutmut's, on the functions' bodies only (not module constants, annotations,
docstrings or log lines): a comparison's operator (``<``/``<=``, ``==``/``!=``, ``in``/``not in``,
``is``/``is not``), an arithmetic operator, ``and``/``or``, a ``not`` dropped, a number n → n + 1,
``True``/``False`` swapped, a string changed (``"x"`` → ``"XXxXX"``), an assignment's value or a
keyword argument's value made ``None``, ``return x`` → ``return None``, and a call made as a
statement (``await f(...)``, ``f(...)``) dropped.

    nice -n 15 uv run python -m testing.mutants --module engine/runs/approvals.py \\
        --tests tests/integration/test_approvals.py --size 40 --jobs 2 --out .cockpit/mutants/approvals.jsonl

Each result is one JSON line (mutant number, line, operator, outcome, seconds), written as soon as
it is known; a second run with the same ``--out`` skips the mutants already there. ``--score``
prints the file's kill rate with its 95 % Wilson interval (testing/mutation_sample.py).
"""

from __future__ import annotations

import argparse
import ast
import copy
import inspect
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FunctionType
from typing import Any

from testing.mutation_sample import wilson

ROOT = Path(__file__).resolve().parents[1]
SKIP_COPY = {".git", ".venv", ".cockpit", "mutants", "node_modules", "test-results", ".mypy_cache", ".ruff_cache"}
COMPARE_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
ARITH_FLIP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Div,
}
BOOL_FLIP: dict[type[ast.boolop], type[ast.boolop]] = {ast.And: ast.Or, ast.Or: ast.And}


@dataclass(frozen=True)
class Site:
    """One mutation: the ``index``-th node of the walk, and what to do to it."""

    index: int
    operator: str
    line: int


def _is_log_call(node: ast.AST) -> bool:
    call = node.value if isinstance(node, ast.Expr) else node
    if isinstance(call, ast.Await):
        call = call.value
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id in {"log", "logger"}
    )


def _walk(tree: ast.Module) -> list[tuple[ast.AST, ast.AST | None]]:
    """Every node inside a function body, in a fixed order, with its parent; skipping docstrings,
    annotations and log lines."""
    found: list[tuple[ast.AST, ast.AST | None]] = []

    def visit(node: ast.AST, parent: ast.AST | None, inside: bool) -> None:
        if _is_log_call(node):
            return
        if inside:
            found.append((node, parent))
        for field, value in ast.iter_fields(node):
            if field in {"annotation", "returns", "type_comment", "decorator_list"}:
                continue
            children = value if isinstance(value, list) else [value]
            for position, child in enumerate(children):
                if not isinstance(child, ast.AST):
                    continue
                is_docstring = (
                    field == "body"
                    and position == 0
                    and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module))
                    and isinstance(child, ast.Expr)
                    and isinstance(child.value, ast.Constant)
                    and isinstance(child.value.value, str)
                )
                if is_docstring or isinstance(child, ast.JoinedStr):
                    continue
                visit(child, node, inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(tree, None, False)
    return found


def _operators(node: ast.AST) -> list[str]:
    match node:
        case ast.Compare(ops=ops):
            return [f"compare{i}" for i, op in enumerate(ops) if type(op) in COMPARE_FLIP]
        case ast.BinOp(op=op) | ast.AugAssign(op=op) if type(op) in ARITH_FLIP:
            return ["arith"]
        case ast.BoolOp():
            return ["andor"]
        case ast.UnaryOp(op=ast.Not()):
            return ["drop_not"]
        case ast.Constant(value=bool()):
            return ["flip_bool"]
        case ast.Constant(value=int() | float()):
            return ["number"]
        case ast.Constant(value=str()) if node.value:
            return ["string"]
        case ast.Assign(value=value) | ast.AnnAssign(value=value) if value is not None and not (
            isinstance(value, ast.Constant) and value.value is None
        ):
            return ["assign_none"]
        case ast.keyword(value=value) if not (isinstance(value, ast.Constant) and value.value is None):
            return ["keyword_none"]
        case ast.Return(value=value) if value is not None and not (
            isinstance(value, ast.Constant) and value.value is None
        ):
            return ["return_none"]
        case ast.Expr(value=ast.Call() | ast.Await(value=ast.Call())):
            return ["drop_call"]
    return []


UNSAFE_METHODS = {"post", "put", "patch", "delete"}


def changing_handlers(source: str) -> set[str]:
    """The names of the module's route handlers that change state: the functions and methods
    decorated ``@post``, ``@put``, ``@patch`` or ``@delete`` (Litestar's decorators)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                call = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = call.attr if isinstance(call, ast.Attribute) else getattr(call, "id", "")
                if name in UNSAFE_METHODS:
                    found.add(node.name)
    return found


def sites(source: str, functions: set[str] | None = None) -> list[Site]:
    """Every mutation of the module, or only those inside the named functions (top-level
    functions, or methods of a top-level class)."""
    tree = ast.parse(source)
    defs = [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for holder in tree.body:
        if isinstance(holder, ast.ClassDef):
            defs += [node for node in holder.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    spans = [
        (node.lineno, node.end_lineno or node.lineno) for node in defs if functions is None or node.name in functions
    ]
    return [
        Site(index, operator, line)
        for index, (node, _) in enumerate(_walk(tree))
        for operator in _operators(node)
        if (line := getattr(node, "lineno", 0)) and (functions is None or any(a <= line <= b for a, b in spans))
    ]


def _none() -> ast.Constant:
    return ast.Constant(value=None)


def apply(source: str, site: Site) -> str:
    """The module's source with ``site`` applied (unparsed: comments and layout are lost)."""
    tree = ast.parse(source)
    node, parent = _walk(tree)[site.index]
    operator = site.operator
    if operator.startswith("compare"):
        assert isinstance(node, ast.Compare)
        i = int(operator.removeprefix("compare"))
        node.ops[i] = COMPARE_FLIP[type(node.ops[i])]()
    elif operator == "arith":
        assert isinstance(node, (ast.BinOp, ast.AugAssign))
        node.op = ARITH_FLIP[type(node.op)]()
    elif operator == "andor":
        assert isinstance(node, ast.BoolOp)
        node.op = BOOL_FLIP[type(node.op)]()
    elif operator == "drop_not":
        assert isinstance(node, ast.UnaryOp) and parent is not None
        _replace(parent, node, node.operand)
    elif operator == "flip_bool":
        assert isinstance(node, ast.Constant)
        node.value = not node.value
    elif operator == "number":
        assert isinstance(node, ast.Constant) and isinstance(node.value, (int, float))
        node.value = node.value + 1
    elif operator == "string":
        assert isinstance(node, ast.Constant) and isinstance(node.value, str)
        node.value = f"XX{node.value}XX"
    elif operator in {"assign_none", "keyword_none", "return_none"}:
        assert isinstance(node, (ast.Assign, ast.AnnAssign, ast.keyword, ast.Return))
        node.value = _none()
    elif operator == "drop_call":
        assert parent is not None
        _replace(parent, node, ast.Pass())
    else:
        raise ValueError(operator)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"


def unparsed(source: str) -> str:
    """The unchanged source put through ``ast.unparse`` as :func:`apply` puts each mutant."""
    return ast.unparse(ast.parse(source)) + "\n"


def _replace(parent: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for field, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, field, new)
            return
        if isinstance(value, list):
            for i, child in enumerate(value):
                if child is old:
                    value[i] = new
                    return
    raise LookupError("node not found under its parent")


def scratch_copy() -> Path:
    """A copy of the checkout without its virtual environment, databases and caches."""
    target = Path(tempfile.mkdtemp(prefix="cockpit-mutant-"))
    for entry in ROOT.iterdir():
        if entry.name in SKIP_COPY:
            continue
        if entry.is_dir():
            shutil.copytree(entry, target / entry.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(entry, target / entry.name)
    return target


def run_tests(where: Path, tests: list[str], limit: float | None) -> tuple[str, float]:
    """("passed" | "failed" | "timeout", seconds) of ``pytest -x`` over ``tests`` in ``where``."""
    env = dict(os.environ)
    env.setdefault("COCKPIT_TEST_HOME", str(ROOT / ".cockpit" / "test"))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests]
    started = time.monotonic()
    try:
        done = subprocess.run(command, cwd=where, env=env, capture_output=True, timeout=limit, check=False)
    except subprocess.TimeoutExpired:
        return "timeout", time.monotonic() - started
    return ("passed" if done.returncode == 0 else "failed"), time.monotonic() - started


def code_objects(code: CodeType) -> dict[str, CodeType]:
    """The code objects of the module's top-level functions and of its classes' methods, by
    qualified name (``f``, ``Class.method``); nested functions are part of their parent's code."""
    found: dict[str, CodeType] = {}
    for const in code.co_consts:
        if not isinstance(const, CodeType) or "<" in const.co_qualname:
            continue
        if const.co_flags & 0x0002:  # CO_NEWLOCALS: a function, not a class body
            found[const.co_qualname] = const
        else:
            found.update(code_objects(const))
    return found


def _live_functions(module: Any) -> dict[str, tuple[FunctionType, Any]]:
    """The module's own functions and methods by qualified name, each with the cache wrapping it
    (``functools.cache``), whose ``cache_clear`` must run when its code is swapped."""

    def unwrap(value: Any) -> tuple[FunctionType, Any] | None:
        wrapper = None
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        elif isinstance(value, property):
            value = value.fget
        if not isinstance(value, FunctionType) and isinstance(getattr(value, "_fn", None), FunctionType):
            value = value._fn  # a Litestar route handler: the function it calls for each request
        if not isinstance(value, FunctionType) and isinstance(getattr(value, "__wrapped__", None), FunctionType):
            wrapper, value = value, value.__wrapped__
        if isinstance(value, FunctionType):
            value = inspect.unwrap(value)  # a decorated function (``functools.wraps``): the one it wraps
        if isinstance(value, FunctionType) and value.__module__ == module.__name__:
            return value, wrapper
        return None

    found: dict[str, tuple[FunctionType, Any]] = {}
    for value in vars(module).values():
        candidates = [value]
        if isinstance(value, type) and value.__module__ == module.__name__:
            candidates = list(vars(value).values())
        for candidate in candidates:
            if (pair := unwrap(candidate)) is not None:
                found[pair[0].__qualname__] = pair
    return found


def run_in_process(module_name: str, source: str, path: str, every: list[Site], picked: list[int], args: Any) -> None:
    """Each mutant swapped into the live module's function or method (its ``__code__``, clearing a
    ``functools.cache`` around it) and the tests run by ``pytest.main`` in this process: no
    start-up per mutant. For pure functions reached by unit tests only. The mutated source is
    compared with the unchanged source put through the same ``ast.unparse``, so only the function
    the mutant changed is swapped; a mutant whose function cannot be swapped (a default value, a
    function made inside another) is recorded "skipped" and left out of the score. The module's
    module-level dicts, sets and lists are put back as they were at import around each mutant."""
    import contextlib
    import importlib
    import io
    import signal

    import pytest

    module = importlib.import_module(module_name)
    functions = _live_functions(module)
    original = code_objects(compile(unparsed(source), path, "exec"))
    live = {name: fn.__code__ for name, (fn, _) in functions.items()}

    def pytest_run(limit: int) -> str:
        def too_long(*_: object) -> None:
            raise TimeoutError("mutant ran too long")

        signal.signal(signal.SIGALRM, too_long)
        signal.alarm(limit)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                # the module under test was imported before pytest: so were its imports (anyio)
                rewrite = "ignore::pytest.PytestAssertRewriteWarning"
                code = pytest.main(["-x", "-q", "-p", "no:cacheprovider", "-W", rewrite, *args.tests])
        finally:
            signal.alarm(0)
        return "passed" if code == 0 else "failed"

    # module-level memos (a dict of compiled patterns, of answers by key) as they were at import:
    # a mutant must not find what the unchanged code put there
    memos = {
        name: copy.copy(value)
        for name, value in vars(module).items()
        if type(value) in (dict, set, list) and not name.startswith("__")
    }

    def clear_caches() -> None:
        for _, wrapper in functions.values():
            if wrapper is not None and hasattr(wrapper, "cache_clear"):
                wrapper.cache_clear()
        for name, value in memos.items():
            held = getattr(module, name)
            held.clear()
            if isinstance(held, list):
                held.extend(value)
            else:
                held.update(value)

    started = time.monotonic()
    clear_caches()
    baseline = pytest_run(1800)
    limit = int(3 * (time.monotonic() - started)) + 60
    print(f"{path}: {len(every)} mutants; unchanged: {baseline} in {time.monotonic() - started:.0f} s", flush=True)
    if baseline != "passed":
        raise SystemExit("the tests fail without a mutant")
    done = set()
    if args.out.exists() and not args.again:
        done = {json.loads(line)["mutant"] for line in args.out.read_text().splitlines() if line.strip()}
    for number in picked:
        if number in done:
            continue
        site = every[number]
        mutated = code_objects(compile(apply(source, site), path, "exec"))
        changed = [name for name in mutated if mutated[name] != original.get(name)]
        started = time.monotonic()
        if not changed or any(name not in functions for name in changed):
            outcome = "skipped"
        else:
            for name in changed:
                functions[name][0].__code__ = mutated[name]
            clear_caches()
            try:
                outcome = pytest_run(limit)
            finally:
                for name in changed:
                    functions[name][0].__code__ = live[name]
                clear_caches()
        line = {"mutant": number, "line": site.line, "operator": site.operator, "outcome": outcome}
        line["seconds"] = round(time.monotonic() - started, 1)
        with args.out.open("a") as out:
            out.write(json.dumps(line) + "\n")
        print(json.dumps(line), flush=True)


def module_name(path: str) -> str:
    """The name a module is imported by: a package's ``__init__.py`` by the package's name (imported
    as ``….__init__`` it would be a second module, whose swapped functions no test calls)."""
    return path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")


def score(lines: list[dict[str, Any]], equivalent: set[int]) -> str:
    """The kill rate of a results file, its 95 % Wilson interval and the survivors. A mutant run
    more than once counts by its newest result (a survivor run again once a test was written for
    it); a skipped one is left out. The ``equivalent`` survivors, examined and found unable to change
    behaviour, are then left out of a second rate: the killed share of the mutants a test can kill."""
    newest = {line["mutant"]: line for line in lines}
    results = [r for r in newest.values() if r["outcome"] != "skipped"]
    killed = sum(1 for r in results if r["outcome"] in {"failed", "timeout"})
    survivors = [r for r in results if r["outcome"] == "passed"]
    unknown = equivalent - {r["mutant"] for r in survivors}
    if unknown:
        raise SystemExit(f"not survivors of this file: {sorted(unknown)}")
    low, high = wilson(killed, len(results))
    share = 100 * killed / len(results) if results else 0.0
    text = (
        f"{len(results)} run, {killed} killed, {len(survivors)} survived: "
        f"{share:.0f} % (95 % interval {low:.0f}–{high:.0f} %)"
    )
    if equivalent:
        killable = len(results) - len(equivalent)
        low, high = wilson(killed, killable)
        share = 100 * killed / killable if killable else 0.0
        text += (
            f"; {len(equivalent)} cannot change behaviour, so {killed} of {killable} killable killed: "
            f"{share:.0f} % (95 % interval {low:.0f}–{high:.0f} %)"
        )
    for r in sorted(survivors, key=lambda r: r["mutant"]):
        mark = " (cannot change behaviour)" if r["mutant"] in equivalent else ""
        text += f"\n  survived #{r['mutant']} line {r['line']} {r['operator']}{mark}"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", required=True, help="e.g. engine/runs/approvals.py")
    parser.add_argument("--tests", nargs="+", default=[], help="test files (or ids) to run for each mutant")
    parser.add_argument("--functions", help="only these top-level functions (comma-separated)")
    parser.add_argument(
        "--changing-handlers",
        action="store_true",
        help="only the route handlers that change state (@post, @put, @patch, @delete)",
    )
    parser.add_argument("--size", type=int, default=40)
    parser.add_argument("--mutants", help="run these mutants (numbers, comma-separated) instead of a sample")
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--in-process", action="store_true", help="swap each mutant into the live function (pure functions, unit tests)"
    )
    parser.add_argument("--list", action="store_true", help="print the sample's mutants and stop")
    parser.add_argument("--show", type=int, help="print the diff of one mutant (its number) and stop")
    parser.add_argument("--score", action="store_true", help="print the score of --out and stop")
    parser.add_argument(
        "--equivalent", help="with --score: survivors (numbers) that cannot change behaviour, scored apart"
    )
    parser.add_argument(
        "--again", action="store_true", help="run the --mutants even if --out has them (the newest result counts)"
    )
    args = parser.parse_args()

    source = (ROOT / args.module).read_text()
    chosen = set(args.functions.split(",")) if args.functions else None
    if args.changing_handlers:
        chosen = (chosen or set()) | changing_handlers(source)
    every = sites(source, chosen)
    if args.score:
        lines = [json.loads(line) for line in args.out.read_text().splitlines() if line.strip()]
        equivalent = {int(n) for n in args.equivalent.split(",")} if args.equivalent else set()
        print(f"{args.module}: {len(every)} mutants; " + score(lines, equivalent))
        return
    if args.show is not None:
        import difflib

        mutated = apply(source, every[args.show])
        sys.stdout.writelines(difflib.unified_diff(unparsed(source).splitlines(True), mutated.splitlines(True), n=2))
        return
    picked = sorted(random.Random(args.seed).sample(range(len(every)), min(args.size, len(every))))
    if args.mutants:
        picked = sorted(int(number) for number in args.mutants.split(","))
    if args.list:
        for number in picked:
            print(number, every[number])
        return

    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.in_process:
        os.chdir(ROOT)
        run_in_process(module_name(args.module), source, str(ROOT / args.module), every, picked, args)
        return
    done = set()
    if args.out.exists() and not args.again:
        done = {json.loads(line)["mutant"] for line in args.out.read_text().splitlines() if line.strip()}
    todo: queue.Queue[int] = queue.Queue()
    for number in picked:
        if number not in done:
            todo.put(number)
    copies = [scratch_copy() for _ in range(args.jobs)]
    baseline, seconds = run_tests(copies[0], args.tests, None)
    print(f"{args.module}: {len(every)} mutants; unchanged: {baseline} in {seconds:.0f} s", flush=True)
    if baseline != "passed":
        raise SystemExit("the tests fail without a mutant")
    limit = 3 * seconds + 60
    lock = threading.Lock()

    def work(where: Path) -> None:
        target = where / args.module
        while True:
            try:
                number = todo.get_nowait()
            except queue.Empty:
                return
            site = copy.copy(every[number])
            target.write_text(apply(source, site))
            try:
                outcome, took = run_tests(where, args.tests, limit)
            finally:
                target.write_text(source)
            line = {"mutant": number, "line": site.line, "operator": site.operator, "outcome": outcome}
            line["seconds"] = round(took, 1)
            with lock, args.out.open("a") as out:
                out.write(json.dumps(line) + "\n")
                print(json.dumps(line), flush=True)

    threads = [threading.Thread(target=work, args=(where,)) for where in copies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for where in copies:
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
