"""A check that every test can fail for the reason it names (issue 23); ``python -m tests.lint_tests`` prints the
violations, ``tests/test_test_hygiene.py`` fails on them in CI.

It reads every ``tests/**/test_*.py`` with :mod:`ast` (nothing is imported or run) and reports:

``no-assertion``
    A test function (``test*`` at module level, or in a ``Test*`` class) with no assertion that runs whenever the
    test runs. A statement runs whenever the test runs when it sits in the test's body, or in the body of a
    ``with`` or the body or ``finally`` of a ``try`` there, recursively; not in a ``for``/``while``/``if``/``match``
    body, an ``except`` handler, an ``else`` clause, a nested function, a lambda, a comprehension, the second
    operand of ``and``/``or`` or a branch of ``x if c else y``: those may never run, so a test asserting only there
    passes when, say, the list it loops over is empty. An assertion is:

    * an ``assert`` statement, a ``raise`` statement, or a call to ``pytest.fail``;
    * a ``with pytest.raises(...)``/``pytest.warns(...)`` (or the call forms);
    * an ``if`` statement whose body or ``else`` itself holds a ``raise`` or ``pytest.fail`` (not nested further):
      its condition is evaluated, and it is the check;
    * an ``if`` with an ``else`` (``elif`` chains included) whose every branch holds an assertion by these rules:
      one branch runs, so one assertion does (a parametrized test's "refused, else accepted");
    * a call to a function whose name begins with ``assert`` (``assert_called_once_with``, ``assertEqual``) that
      resolves to no function defined under tests/;
    * a call to a function defined under tests/ that holds an assertion by these same rules (so ``wait_for``,
      which fails after its loop, counts; a helper that asserts only in a loop does not). ``f(...)`` is resolved
      to the module's own ``f`` (at any depth) or the one it imports from tests/, ``mod.f(...)`` to ``f`` in
      the tests/ module ``mod``, and ``x.f(...)`` (a method) to every ``f`` defined under tests/: all must
      assert.

    Such a call counts in a simple statement (``x = f()``, ``f()``, ``return f()``) or a ``with`` header, not in
    the header of a ``for``/``while``/``if``/``match``: in ``for run in stage().all("RUN"): assert ...`` the
    helper's own sanity check (that there is a stage) says nothing of the list the loop asserts over.

``bare-raises``
    A ``pytest.raises`` (context or call form) without ``match=``, or whose ``match`` is empty or a bare
    wildcard: any error of that type would pass it, including one from a bug elsewhere. The call form
    ``pytest.raises(E, f, *args)`` cannot take ``match``: use the ``with`` form.

``own-importorskip``
    ``pytest.importorskip`` of the project's own code (``kai_fn``, ``tests``, ``main``): if it breaks on import,
    the test must fail, not skip.

Violations in tests/function, tests/commands and tests/chain (being rewritten under another issue) may be listed
in :data:`ALLOWED`, by ``file::test`` and rule, so that CI passes meanwhile. That list must shrink to empty: an entry
that no longer names a violation fails the check too, so whoever fixes one removes its entry.
"""
from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
OWN = ("kai_fn", "tests", "main")
WILDCARDS = {"", ".", ".*", ".+", "^.*$", "(?s).*"}
ALLOWABLE = ("tests/function/", "tests/commands/", "tests/chain/")

# The violations in the folders being rewritten under another issue, as they were when this check landed.
# MUST SHRINK TO EMPTY: fix the test, then delete its line (a line naming no violation fails the check).
ALLOWED: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True, order=True)
class Violation:
    path: str  # relative to the repository, with forward slashes
    line: int
    test: str
    rule: str
    detail: str

    @property
    def key(self) -> tuple[str, str]:
        return f"{self.path}::{self.test}", self.rule

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.test}: {self.rule}: {self.detail}"


def _dotted(node: ast.expr) -> str:
    """``pytest.raises`` for ``pytest.raises``, ``raises`` for ``raises``, '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _called_name(call: ast.Call) -> str:
    """The name a call is matched by: ``f`` for ``f(...)`` and ``x.y.f(...)``."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return ""


class _Module:
    """One file's view of its names: which mean ``pytest.raises`` and friends, which are helpers from tests/."""

    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path = path
        self.pytest_names = {"pytest"}
        self.from_pytest: dict[str, str] = {}
        self.from_tests: dict[str, tuple[str, str]] = {}  # local name: (module path, name there)
        self.tests_modules: dict[str, str] = {}  # local name: module path (``from tests import crds``)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "pytest":
                        self.pytest_names.add(alias.asname or "pytest")
            elif isinstance(node, ast.ImportFrom) and node.module == "pytest":
                for alias in node.names:
                    self.from_pytest[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "tests":
                for alias in node.names:
                    module = node.module.replace(".", "/")
                    self.from_tests[alias.asname or alias.name] = (f"{module}.py", alias.name)
                    self.tests_modules[alias.asname or alias.name] = f"{module}/{alias.name}.py"
        self.defined: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self.top_level: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defined.setdefault(node.name, []).append(node)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.top_level[node.name] = node

    def pytest_attr(self, call: ast.Call) -> str:
        """``raises`` for ``pytest.raises(...)`` or an imported ``raises(...)``; '' when not pytest's."""
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in self.pytest_names:
            return func.attr
        if isinstance(func, ast.Name):
            return self.from_pytest.get(func.id, "")
        return ""


def _calls_when_run(node: ast.AST) -> Iterator[ast.Call]:
    """The calls an expression (or a simple statement) surely makes when evaluated: not those in lambdas,
    comprehensions, a conditional expression's branches, or the later operands of ``and``/``or``."""
    if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
                         ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return
    if isinstance(node, ast.IfExp):
        yield from _calls_when_run(node.test)
        return
    if isinstance(node, ast.BoolOp):
        yield from _calls_when_run(node.values[0])
        return
    if isinstance(node, ast.Call):
        yield node
    for child in ast.iter_child_nodes(node):
        yield from _calls_when_run(child)


def _statements_when_run(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a body that run whenever it runs, descending into ``with`` and ``try`` (body, finally).
    Compound statements that may not run their bodies are yielded themselves, not descended into."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            yield from _statements_when_run(stmt.body)
        elif isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            yield from _statements_when_run(stmt.body)
            yield from _statements_when_run(stmt.finalbody)


def _fails(stmt: ast.stmt, module: _Module) -> bool:
    """A ``raise`` or a ``pytest.fail(...)`` statement."""
    if isinstance(stmt, ast.Raise):
        return True
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and module.pytest_attr(stmt.value) == "fail")


class Checker:
    """Decides which functions assert, over every module under tests/ (helpers included)."""

    def __init__(self, files: dict[str, ast.Module]) -> None:
        self.files = files
        self.modules = {path: _Module(path, tree) for path, tree in files.items()}
        self.everywhere: dict[str, list[tuple[_Module, ast.FunctionDef | ast.AsyncFunctionDef]]] = {}
        for module in self.modules.values():
            for name, nodes in module.defined.items():
                self.everywhere.setdefault(name, []).extend((module, node) for node in nodes)
        # The helpers that assert: a fixpoint, since helpers call helpers.
        self.asserting: set[int] = set()
        changed = True
        while changed:
            changed = False
            for defs in self.everywhere.values():
                for module, fn in defs:
                    if id(fn) not in self.asserting and self.asserts(fn, module):
                        self.asserting.add(id(fn))
                        changed = True

    def _resolve(self, call: ast.Call, module: _Module) -> list[tuple[_Module, ast.FunctionDef | ast.AsyncFunctionDef]]:
        """The definitions under tests/ a call may reach: ``f()`` by the module's own definitions or its imports
        from tests/, ``crds.validate()`` in tests/crds.py, ``x.f()`` (a method) by every definition of f."""
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in module.defined:
                return [(module, node) for node in module.defined[func.id]]
            if func.id in module.from_tests:
                path, name = module.from_tests[func.id]
                there = self.modules.get(path)
                return [(there, there.top_level[name])] if there and name in there.top_level else []
            return []
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name) and func.value.id in module.tests_modules:
                there = self.modules.get(module.tests_modules[func.value.id])
                if there is not None:
                    return [(there, there.top_level[func.attr])] if func.attr in there.top_level else []
            return self.everywhere.get(func.attr, [])
        return []

    def _asserting_call(self, call: ast.Call, module: _Module) -> bool:
        if module.pytest_attr(call) in {"raises", "warns", "fail"}:
            return True
        if defs := self._resolve(call, module):
            return all(id(fn) in self.asserting for _, fn in defs)
        return _called_name(call).startswith("assert")

    def asserts(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, module: _Module) -> bool:
        """Whether fn holds an assertion that runs whenever fn runs (the module docstring's rule)."""
        return self._body_asserts(fn.body, module)

    def _body_asserts(self, body: list[ast.stmt], module: _Module) -> bool:
        for stmt in _statements_when_run(body):
            if isinstance(stmt, ast.Assert) or _fails(stmt, module):
                return True
            if isinstance(stmt, ast.If) and any(_fails(s, module) for s in [*stmt.body, *stmt.orelse]):
                return True
            if isinstance(stmt, ast.If) and stmt.orelse and self._body_asserts(stmt.body, module) \
                    and self._body_asserts(stmt.orelse, module):
                return True
            if isinstance(stmt, (ast.With, ast.AsyncWith)):
                heads: list[ast.AST] = [item.context_expr for item in stmt.items]
            elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.If, ast.While, ast.Match, ast.Try,
                                   getattr(ast, "TryStar", ast.Try), ast.FunctionDef, ast.AsyncFunctionDef,
                                   ast.ClassDef)):
                heads = []  # a loop's or branch's header: see the module docstring
            else:
                heads = [stmt]
            if any(self._asserting_call(call, module) for head in heads for call in _calls_when_run(head)):
                return True
        return False

    def violations(self, path: str) -> Iterator[Violation]:
        tree, module = self.files[path], self.modules[path]
        for fn in _tests(tree):
            if not self.asserts(fn, module):
                yield Violation(path, fn.lineno, fn.name, "no-assertion",
                                "no assertion runs whenever the test runs (only in a loop or branch, or none)")
        for fn, call in _calls_in_tests(tree):
            what = module.pytest_attr(call)
            if what == "raises":
                match = next((kw.value for kw in call.keywords if kw.arg == "match"), None)
                if match is None:
                    yield Violation(path, call.lineno, fn.name, "bare-raises", "pytest.raises without match=")
                elif isinstance(match, ast.Constant) and str(match.value).strip() in WILDCARDS:
                    yield Violation(path, call.lineno, fn.name, "bare-raises",
                                    f"pytest.raises(match={match.value!r}) matches anything")
            elif what == "importorskip" and call.args and isinstance(call.args[0], ast.Constant) \
                    and str(call.args[0].value).split(".")[0] in OWN:
                yield Violation(path, call.lineno, fn.name, "own-importorskip",
                                f"pytest.importorskip({call.args[0].value!r}): import the project's own code plainly")


def _is_test(node: ast.stmt) -> bool:
    """What pytest collects as a test function: ``test*``, not a fixture (``testbed`` is a fixture's name)."""
    return (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
            and not any(_dotted(d.func if isinstance(d, ast.Call) else d).split(".")[-1] == "fixture"
                        for d in node.decorator_list))


def _tests(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in tree.body:
        if _is_test(node):
            yield node  # type: ignore[misc]
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            yield from (item for item in node.body if _is_test(item))  # type: ignore[misc]


def _calls_in_tests(tree: ast.Module) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.Call]]:
    """Every call in the module, with the outermost function holding it (a helper's calls count too: named
    after the helper)."""
    def functions(nodes: list[ast.stmt]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield node
            elif isinstance(node, ast.ClassDef):
                yield from functions(node.body)
    for fn in functions(tree.body):
        for node in ast.walk(fn):
            if isinstance(node, ast.Call):
                yield fn, node
    module_level = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    for stmt in module_level:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                yield ast.FunctionDef(name="<module>", lineno=node.lineno), node  # type: ignore[call-arg]


def _parse_all() -> dict[str, ast.Module]:
    return {path.relative_to(REPO).as_posix(): ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for path in sorted(TESTS.rglob("*.py"))}


def check() -> tuple[list[Violation], list[Violation], list[tuple[str, str]]]:
    """(violations not allowed, violations allowed by ALLOWED, ALLOWED entries that name no violation)."""
    files = _parse_all()
    checker = Checker(files)
    found = sorted(v for path in files if Path(path).name.startswith("test_") for v in checker.violations(path))
    allowed = [v for v in found if v.key in ALLOWED and v.path.startswith(ALLOWABLE)]
    failing = [v for v in found if v not in allowed]
    stale = sorted(ALLOWED - {v.key for v in found})
    return failing, allowed, stale


def main() -> int:
    failing, allowed, stale = check()
    for v in failing:
        print(v)
    for key, rule in stale:
        print(f"{key}: {rule}: listed in tests/lint_tests.py ALLOWED but no longer a violation: delete the entry")
    counts: dict[str, int] = {}
    for v in failing + allowed:
        counts[v.rule] = counts.get(v.rule, 0) + 1
    print(f"{len(failing)} violations, {len(allowed)} allowed (tests/lint_tests.py ALLOWED), {len(stale)} stale "
          f"allowances; by rule, allowed included: {dict(sorted(counts.items()))}", file=sys.stderr)
    return 1 if failing or stale else 0


if __name__ == "__main__":
    sys.exit(main())
