"""House rules that hold over the whole tree: no function in kai_fn over 50 lines, no text that cites notes kept
outside the repository (a reader of the repository cannot follow such a reference), mypy --strict over all of kai_fn
with each ``type: ignore`` naming its error code and its reason, one name per class (no module-level alias
such as ``Cluster = ApiServer``), every API path built in kai_fn/kube alone (the function and the commands call
its typed methods), the commands placing a TrainJob (phase, boundness, owner) only through kai_fn/core/state.py, and
the previous version's JobSet hold known to its migration module alone."""
from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 50
# The notes' names, split so this file does not cite them itself; an environment variable such as
# KAI_FN_TESTBED_DIR is not a citation.
OUTSIDE_NOTES = re.compile(r"(?<![A-Za-z0-9_])(" + "FAC" + "TS|TEST" + "BED)(?![A-Za-z0-9_])")
TEXT = {".py", ".go", ".md", ".sh", ".yaml", ".yml", ".json", ".toml", ".txt", ".ini", ".cfg", ""}
TREES = ("kai_fn", "testbed", "tests", "bench", "docs", "knative", "samples")
# A type: ignore with its error code and, after two spaces, a comment saying why.
NARROW_IGNORE = re.compile(r"# type: ignore\[[a-z-]+(, ?[a-z-]+)*\]  # \S")


def long_functions(root: Path) -> list[str]:
    """``<lines> <file>:<line> <name>`` for every function under ``root`` longer than MAX_LINES."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    found.append(f"{lines} {path.relative_to(root.parent)}:{node.lineno} {node.name}")
    return found


def broad_ignores(paths: list[Path]) -> list[str]:
    """``<file>:<line>`` for every ``type: ignore`` of ``paths`` without its error code or its reason."""
    return [f"{path}:{n}" for path in paths for n, line in enumerate(path.read_text().splitlines(), 1)
            if "# type: ignore" in line and not NARROW_IGNORE.search(line)]


def aliases(root: Path) -> list[str]:
    """``<file>:<line> <statement>`` for every module-level ``Name = Other`` of two class-like names under ``root``:
    a second name for one class."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id[:1].isupper()
                    and all(isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()
                            for t in node.targets)):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {ast.unparse(node)}")
    return found


# kai_fn's decision marks and the fields that place a TrainJob: read only by the state model (kai_fn/core/state.py,
# with core/adopt.py and core/gang.py), so no reader derives a phase, a gang's boundness or an owner of its own.
DECISION_MARKS = frozenset({"MARKER_PODGROUP", "MARKER_SKIPPED", "GANG_BOUND_ANNOTATION", "TIMED_OUT_ANNOTATION",
                            "HELD_LABEL", "NAMED_LABEL", "RESERVES_ANNOTATION", "RESERVATION_ENDED_ANNOTATION",
                            "RELEASED_AT_ANNOTATION", "TRAINJOB_UID_LABEL"})
OWNERSHIP = frozenset({"controlled_by", "owned_by", "made_by_kai_fn"})


def state_reads(root: Path) -> list[str]:
    """``<file>:<line> <what>`` for every place under ``root`` that reads a decision mark (named other than as the key
    of a dict it writes or in a message, such as a LIST's selector) or judges an owner itself."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            what = _state_read(node, parents)
            if what:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {what}")
    return found


def _state_read(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str | None:
    parent = parents.get(node)
    written = isinstance(parent, ast.Dict) and node in parent.keys or isinstance(parent, ast.FormattedValue)
    if isinstance(node, ast.Attribute) and node.attr in DECISION_MARKS and not written:
        return node.attr
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    return name if name in OWNERSHIP else None


API_PATH = re.compile(r"""["'](/apis?/|/api\b)""")


def raw_api_paths(root: Path) -> list[str]:
    """``<file>:<line>`` for every string under ``root`` that starts an API path (``"/api/…"``, ``"/apis/…"``)."""
    return [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
            for n, line in enumerate(path.read_text().splitlines(), 1) if API_PATH.search(line)]


def citations(paths: list[Path]) -> list[str]:
    """``<file>:<line>`` for every line of ``paths`` that names the notes kept outside the repository."""
    return [f"{path.relative_to(REPO)}:{n}" for path in paths
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if OUTSIDE_NOTES.search(line)]


def repository_text() -> list[Path]:
    files = [p for tree in TREES for p in (REPO / tree).rglob("*") if p.is_file() and p.suffix in TEXT]
    files += [p for p in REPO.iterdir() if p.is_file() and p.suffix in TEXT]
    return sorted(p for p in files if ".venv" not in p.parts and "__pycache__" not in p.parts)


def test_no_function_in_kai_fn_is_over_50_lines():
    assert long_functions(REPO / "kai_fn") == [], "split each into named steps"


def test_mypy_checks_all_of_kai_fn_strictly():
    mypy = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["files"] == ["kai_fn", "main.py"] and mypy["strict"] is True
    assert "overrides" not in mypy and "ignore_missing_imports" not in mypy, "strict means strict everywhere"


def test_each_type_ignore_in_kai_fn_names_its_code_and_why():
    sources = sorted((REPO / "kai_fn").rglob("*.py")) + [REPO / "main.py"]
    assert broad_ignores(sources) == []


def test_kai_fn_gives_each_class_one_name():
    assert aliases(REPO / "kai_fn") == [], "name the class once, for what it is"


@pytest.mark.parametrize("line, broad", [
    ("x = f()  # type: ignore", True),
    ("x = f()  # type: ignore[no-untyped-call]", True),
    ("x = f()  # type: ignore[no-untyped-call]  # unannotated upstream", False),
    ("x = f()  # type: ignore[arg-type, misc]  # the stub is wrong", False),
])
def test_an_ignore_is_narrow_with_its_code_and_its_reason(tmp_path, line, broad):
    (tmp_path / "m.py").write_text(line + "\n")
    assert bool(broad_ignores([tmp_path / "m.py"])) is broad


@pytest.mark.parametrize("statement, alias", [
    ("Cluster = ApiServer", True), ("PAGE = SIZE", False), ("Work = A | B", False), ("log = Logger", False)])
def test_an_alias_is_one_class_name_bound_to_another(tmp_path, statement, alias):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(statement + "\n")
    assert bool(aliases(tmp_path / "pkg")) is alias


def test_nothing_in_the_repository_cites_notes_kept_outside_it():
    assert citations(repository_text()) == [], "state the fact itself, or cite an upstream source"


@pytest.mark.parametrize("line, cites", [
    ("(" + "FAC" + "TS §4)", True),
    ("see " + "TEST" + "BED.md §5", True),
    ("KAI_FN_" + "TEST" + "BED_DIR", False),
    ("NOT_ON_" + "TEST" + "BED", False),
    ("the facts of the case", False),
])
def test_a_citation_is_the_notes_name_not_a_variable_that_contains_it(line, cites):
    assert bool(OUTSIDE_NOTES.search(line)) is cites


@pytest.mark.parametrize("lines, found", [(MAX_LINES, False), (MAX_LINES + 1, True)])
def test_a_long_function_is_one_over_the_limit(tmp_path, lines, found):
    (tmp_path / "pkg").mkdir()
    body = "\n".join(["def f():"] + ["    x = 1"] * (lines - 2) + ["    return x"])
    (tmp_path / "pkg" / "m.py").write_text(body + "\n")
    assert bool(long_functions(tmp_path / "pkg")) is found


@pytest.mark.parametrize("tree", ["kai_fn/function", "kai_fn/commands", "kai_fn/core"])
def test_only_the_kube_layer_builds_api_paths(tree):
    assert raw_api_paths(REPO / tree) == []


def test_the_commands_place_a_trainjob_only_through_the_state_model():
    assert state_reads(REPO / "kai_fn" / "commands") == [], "ask kai_fn/core/state.py"


# The function's modules that still name a mark or judge an owner themselves, each for its reason; an entry no
# longer needed fails, so the list only shrinks.
FUNCTION_STATE_READS = {
    "function/migration/trainjob_gate.py": "0.1.0's TrainJob gate: its marks, carried over to the JobSet and PodGroup",
    "function/migration/jobset_hold.py": "0.2.0's JobSet hold: the decision it adds to a held JobSet it releases",
    "function/gang_status.py": "GangBound's own mark, and the JobSet's owner (to ask core/state.py's own_jobset)",
    "function/timeouts.py": "writes kai-fn/bound and kai-fn/timed-out through its _mark helper",
    "function/reserve.py": "a placeholder pod's owner, by core/adopt.py's owned_by",
}


def test_the_function_places_a_trainjob_only_through_the_state_model_but_where_listed():
    found = {line.split(":")[0] for line in state_reads(REPO / "kai_fn" / "function")}
    assert found - set(FUNCTION_STATE_READS) == set(), "ask kai_fn/core/state.py"
    assert set(FUNCTION_STATE_READS) - found == set(), "no longer needed: drop it from FUNCTION_STATE_READS"


@pytest.mark.parametrize("line, reads", [
    ("bound = keys.GANG_BOUND_ANNOTATION in notes(pg)", True),
    ("x = notes(js).get(keys.MARKER_PODGROUP)", True),
    ("mine = controlled_by(js, uid)", True),
    ("patch = {keys.MARKER_SKIPPED: keys.SKIPPED_BY_OPERATOR}", False),
    ("msg = f'({keys.MARKER_SKIPPED}: released)'", False),
    ("pgs = session.podgroups(api, ns, f'{keys.TRAINJOB_UID_LABEL}={uid}')", False),
    ("q = keys.KAI_QUEUE_LABEL in labels(tj)", False),
])
def test_a_state_read_is_a_mark_read_or_an_owner_judged_outside_the_model(tmp_path, line, reads):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(line + "\n")
    assert bool(state_reads(tmp_path / "pkg")) is reads


def test_a_raw_api_path_is_a_string_that_starts_one(tmp_path):
    (tmp_path / "a.py").write_text('x = session.request("GET", "/apis/scheduling.k8s.io/v1/priorityclasses")\n'
                                  "y = '/api/v1/namespaces'\nz = 'apis are fine in prose'\n")
    assert raw_api_paths(tmp_path) == ["a.py:1", "a.py:2"]


# The previous version's JobSet hold: its label and its policy's name, known to the module that migrates it alone.
HOLD_NAMES = re.compile(r"kai-fn/held|HELD_LABEL|kai-fn-hold-jobsets")
HOLD_MODULE = "function/migration/jobset_hold.py"


def knows_the_hold(root: Path) -> list[str]:
    """``<file>:<line>`` for every line under ``root`` (kai_fn) that names the previous version's hold, outside its
    migration module."""
    return [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
            if path.relative_to(root).as_posix() != HOLD_MODULE
            for n, line in enumerate(path.read_text().splitlines(), 1) if HOLD_NAMES.search(line)]


def test_only_the_migration_module_knows_the_previous_versions_jobset_hold():
    assert knows_the_hold(REPO / "kai_fn") == []


def test_a_line_knows_the_hold_when_it_names_its_label_key_or_policy(tmp_path):
    (tmp_path / "function" / "migration").mkdir(parents=True)
    (tmp_path / "a.py").write_text('x = "kai-fn/held"\ny = keys.HELD_LABEL\nz = "kai-fn-hold-jobsets"\nw = "kai-fn/hold"\n')
    (tmp_path / HOLD_MODULE).write_text('HELD_LABEL = "kai-fn/held"\n')
    assert knows_the_hold(tmp_path) == ["a.py:1", "a.py:2", "a.py:3"]
