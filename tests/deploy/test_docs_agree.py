"""Docs that cannot disagree with the code: each list the docs call complete is checked against what it lists.

- docs/settings.md names every environment variable the settings read, and no other;
- docs/observability.md names every metric the function registers (as scraped: a counter with ``_total``);
- knative/README.md's permission table holds every (group, resource, verb) knative/base grants the function, and
  nothing no variant grants;
- every ``kubectl kai-fn`` command line quoted in README.md, docs/, knative/README.md and testbed/README.md parses
  with the CLI's own parser and its rules across options (kai_fn.commands.cli.parse_command_line);
- docs/how-it-decides.md's table of which shapes take which path has the rows tests/chain/test_shape_paths.py measures,
  each with the path that test asserts;
- docs/commands.md's table of `status` states is the state model's phases, in their order (kai_fn/core/state.py);
- every path of this repository the docs, requirements, manifests' and samples' comments quote exists;
- README.md's troubleshooting names every Event reason kai_fn posts;
- every container image the manifests, func.yaml and the Dockerfile name has a tag (not `latest`) or a digest;
- README.md's prose cites no issue numbers nor commit hashes (BENCHMARKS.md holds the provenance);
- measured figures in README.md say where they come from, and are there. The convention: a paragraph (with the table
  that follows it) that quotes figures cites its source as ``BENCHMARKS.md, "<heading>"`` or
  ``docs/develop.md, "<heading>"`` (the start of a heading of that file); every figure in it, a number followed by
  ``s``, ``min`` or ``×`` outside inline code (a range: both ends), appears in that section.
"""
from __future__ import annotations

import ast
import contextlib
import io
import itertools
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from kai_fn.commands import cli
from kai_fn.core.state import PHASES
from kai_fn.function import metrics
from kai_fn.settings import Settings
from tests.kustomize import split_image
from tests.manifests import BASE, FUNCTION, VARIANTS, bound_triples, render

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "knative" / "README.md",
        REPO / "testbed" / "README.md"]


def table_names(path: Path, pattern: str) -> set[str]:
    """The names in the first column of a Markdown table, as `code`."""
    return set(re.findall(rf"^\| `({pattern})`[^|`]*\|", path.read_text(), re.M))


def registered_metrics() -> set[str]:
    out = set()
    for family in metrics.REGISTRY.collect():
        out.add(family.name + "_total" if family.type == "counter" else family.name)
    return out


def documented_permissions() -> set[tuple[str, str, str]]:
    text = (REPO / "knative" / "README.md").read_text()
    table = text.split("| API group | resource | verbs |", 1)[1].split("\n\n", 1)[0]
    out = set()
    for row in table.strip().splitlines()[1:]:
        group_cell, resource_cell, verb_cell = (c.strip() for c in row.strip("|").split("|"))
        groups = ["" if g == '""' else g for g in re.findall(r'""|[a-z0-9-]+(?:\.[a-z0-9-]+)+', group_cell)]
        resources = [r.strip() for r in re.split(r"[`(]", resource_cell)[0].split(",") if r.strip()]
        verbs = [v.strip() for v in verb_cell.split(" (")[0].split(",")]
        out |= set(itertools.product(groups, resources, verbs))
    return out


def test_settings_md_names_every_variable_the_settings_read():
    read = {field.alias for field in Settings.model_fields.values() if field.alias}
    documented = table_names(REPO / "docs" / "settings.md", "[A-Z][A-Z0-9_]+")
    assert (read - documented, documented - read) == (set(), set())


def test_observability_md_names_every_metric_the_function_registers():
    documented = table_names(REPO / "docs" / "observability.md", r"kai_fn_\w+")
    assert (registered_metrics() - documented, documented - registered_metrics()) == (set(), set())


def test_the_permission_table_holds_every_rule_base_grants_the_function_and_no_other():
    documented = documented_permissions()
    granted_somewhere = set().union(*(bound_triples(render(v), FUNCTION) for v in VARIANTS))
    assert bound_triples(render(BASE), FUNCTION) - documented == set(), "granted, not in knative/README.md's table"
    assert documented - granted_somewhere == set(), "in knative/README.md's table, granted by no variant"


def command_lines() -> list[tuple[str, str]]:
    """(where, the command line) of every `kubectl kai-fn ...` quoted in code: fenced blocks and inline spans."""
    found = []
    for path in DOCS:
        text = path.read_text()
        spans = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
        lines = [line for block in spans for line in block.splitlines()]
        lines += re.findall(r"(?<!`)`([^`\n]+)`(?!`)", re.sub(r"```.*?```", "", text, flags=re.S))
        for line in lines:
            for match in re.finditer(r"kubectl kai-fn (?=[a-z-])(.*)", line):
                found.append((path.relative_to(REPO).as_posix(), match.group(1)))
    return found


def argv_of(line: str) -> list[str]:
    words = shlex.split(line, comments=True)
    for i, word in enumerate(words):
        if word in ("|", "||", "&&", ";"):
            return words[:i]
    return words


COMMAND_LINES = command_lines()


def test_the_docs_quote_command_lines():
    assert len(COMMAND_LINES) >= 20 and {argv_of(line)[0] for _, line in COMMAND_LINES} >= {
        "status", "explain", "release"}


def parse_error(argv: list[str]) -> str | None:
    """What the CLI says of this command line before it runs it (argparse's message, or a UsageError), or None."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            cli.parse_command_line(argv, prog="kubectl kai-fn")
        except SystemExit as error:
            return f"argparse exits {error.code}: {stderr.getvalue().strip()}"
        except cli.UsageError as error:
            return str(error)
    return None


@pytest.mark.parametrize("where, line", COMMAND_LINES, ids=[f"{w}: {line}" for w, line in COMMAND_LINES])
def test_every_quoted_command_line_parses_with_the_cli_parser(where, line):
    assert parse_error(argv_of(line)) is None, f"{where}: kubectl kai-fn {line}"


@pytest.mark.parametrize("line, error", [
    ("release --held -A --yes", "--yes needs --reason TEXT: it is recorded in the Event on each TrainJob"),
    ("status --held-since 2m", "argparse exits 2: "),
])
def test_the_parse_check_finds_a_line_the_cli_refuses(line, error):
    assert (parse_error(argv_of(line)) or "").startswith(error)


FIGURE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?:[–-](\d+(?:\.\d+)?))?\s?(?:s|min|×)(?!\w)")
SOURCE = re.compile(r'(BENCHMARKS\.md|docs/develop\.md), "([^"]+)"')


def readme_blocks() -> list[str]:
    """README's paragraphs, each with the table that follows it."""
    blocks: list[str] = []
    for block in re.split(r"\n\s*\n", (REPO / "README.md").read_text()):
        if block.lstrip().startswith("|") and blocks:
            blocks[-1] += "\n" + block
        else:
            blocks.append(block)
    return [b for b in blocks if not b.lstrip().startswith("```")]


def section(path: str, heading: str) -> str:
    """From the heading that starts with ``heading`` to the next heading of its level or above."""
    text = (REPO / path).read_text()
    match = re.search(rf"^(#+) {re.escape(heading)}.*$", text, re.M)
    assert match, f"{path} has no heading starting {heading!r}"
    rest = text[match.end():]
    end = re.search(rf"^#{{1,{len(match.group(1))}}} ", rest, re.M)
    return rest[:end.start()] if end else rest


def figure_problems(blocks: list[str]) -> list[str]:
    problems = []
    for block in blocks:
        prose = re.sub(r"`[^`\n]*`", "", block)  # a command's argument (`--held-for 0s`) is no figure
        figures = [f for m in FIGURE.finditer(prose) for f in m.groups()[:2] if f]
        if not figures:
            continue
        sources = SOURCE.findall(block)
        if not sources:
            problems.append(f"no source cited for {figures} in: {block[:80]!r}")
            continue
        text = "".join(section(path, heading) for path, heading in sources)
        problems += [f"{f} not in {sources}" for f in figures if not re.search(rf"(?<![\d.]){re.escape(f)}(?!\d)", text)]
    return problems


def test_every_figure_the_readme_quotes_is_in_the_section_it_cites():
    assert figure_problems(readme_blocks()) == []


@pytest.mark.parametrize("block, problems", [
    ('It took 0.94× and 1.04–1.81× (BENCHMARKS.md, "Chain on the JobSet gate").', []),
    ('It took 123.45 s (BENCHMARKS.md, "Chain on the JobSet gate").',
     ["123.45 not in [('BENCHMARKS.md', 'Chain on the JobSet gate')]"]),
    ("It took 1.5–2.5 min.", ["no source cited for ['1.5', '2.5'] in: 'It took 1.5–2.5 min.'"]),
])
def test_the_figure_check_finds_a_figure_without_its_source(block, problems):
    assert figure_problems([block]) == problems


def test_the_states_table_of_status_is_the_models_phases_in_their_order():
    text = (REPO / "docs" / "commands.md").read_text()
    table = text[text.index("| state | meaning |"):]
    rows = re.findall(r"^\| `([a-z-]+)` \|", table.split("\n\n", 1)[0], re.M)
    assert rows == [str(p) for p in PHASES]


# --------------------------------------------------------------------------- paths, Events, images, the README's prose

PATH_DOCS = [*DOCS, REPO / "CHANGELOG.md", REPO / "requirements.txt", REPO / "requirements-cli.txt",
             REPO / "requirements-dev.txt", REPO / "pyproject.toml", REPO / "Dockerfile", REPO / "func.yaml",
             *sorted((REPO / "samples").rglob("*.yaml")), *sorted((REPO / "knative").rglob("kustomization.yaml"))]
# A path of this repository as the docs quote one: it starts with one of its top-level folders. One quoted right
# after "KAI's " is a path of KAI's repository (docs/topology.md).
REPO_PATH = re.compile(r"(?<![\w./:-])(?<!KAI's `)(?:kai_fn|tests|knative|docs|samples|testbed|bench|\.ci)/[\w./*-]*[\w*]")


def quoted_paths(text: str) -> list[str]:
    return [m.group(0).split("::")[0] for m in REPO_PATH.finditer(text)]


def missing_paths(path: Path) -> list[str]:
    text = path.read_text()
    if path.suffix == ".yaml":  # a manifest's or sample's comments
        text = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    return [p for p in quoted_paths(text) if not (list(REPO.glob(p)) if "*" in p else (REPO / p).exists())]


@pytest.mark.parametrize("path", PATH_DOCS, ids=[p.relative_to(REPO).as_posix() for p in PATH_DOCS])
def test_every_path_the_docs_quote_exists(path):
    assert missing_paths(path) == []


@pytest.mark.parametrize("text, found", [
    ("see `kai_fn/core/plan.py` and tests/core/test_plan.py::test_x.", ["kai_fn/core/plan.py", "tests/core/test_plan.py"]),
    ("KAI's `docs/topology/segments.md`, and docs/nope.md", ["docs/nope.md"]),
    ("knative/overlays/kubernetes-1.3x and the-knative/x", ["knative/overlays/kubernetes-1.3x"]),
])
def test_the_path_check_finds_the_paths_a_text_quotes(text, found):
    assert quoted_paths(text) == found


def event_reasons() -> set[str]:
    """Every reason of an Event kai_fn posts: kai_fn/core/reasons.py's, and the release's."""
    from kai_fn.core import reasons
    from kai_fn.commands import release
    found = {v for k, v in vars(reasons).items() if k.isupper() and isinstance(v, str) and re.fullmatch(r"[A-Z]\w+", v)}
    return found | {v for k, v in vars(release).items() if k.isupper() and v == "ReleasedByOperator"}


def test_the_readmes_troubleshooting_names_every_event_reason():
    assert len(event_reasons()) >= 15
    named = set(re.findall(r"`([A-Z]\w+)`", section("README.md", "Troubleshoot")))
    assert event_reasons() - named == set()


def images() -> list[tuple[str, str]]:
    """(where, image) of every container image the manifests, func.yaml, the Dockerfile and the settings name."""
    from tests.manifests import INSTALLS, VARIANTS, with_monitoring
    found = []
    for variant in sorted({*VARIANTS, *INSTALLS.values()}) + [with_monitoring(v) for v in VARIANTS]:
        for obj in render(variant):
            text = json.dumps(obj)
            found += [(f"{variant}: {obj['kind']}/{obj['metadata']['name']}", i)
                      for i in re.findall(r'"image": "([^"]+)"', text)]
            found += [(f"{variant}: {obj['kind']}/{obj['metadata']['name']} env", v) for v in
                      re.findall(r'"name": "\w+_IMAGE", "value": "([^"]+)"', text)]
    found.append(("func.yaml", yaml.safe_load((REPO / "func.yaml").read_text())["image"]))
    arg = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (REPO / "Dockerfile").read_text(), re.M)
    found.append(("Dockerfile", arg.group(1) if arg else ""))
    return found


IMAGES = images()


@pytest.mark.parametrize("where, image", IMAGES, ids=[f"{w}: {i}" for w, i in IMAGES])
def test_every_image_has_a_tag_or_a_digest(where, image):
    _, tag, digest = split_image(image)
    assert tag not in (None, "latest") or digest, f"{where}: {image}"


def test_the_image_check_sees_the_functions_and_the_dead_letter_sinks():
    assert {i.rsplit(":", 1)[0] for _, i in IMAGES} >= {
        "ghcr.io/example/kai-fn", "gcr.io/knative-releases/knative.dev/eventing/cmd/event_display"}


ISSUE_OR_COMMIT = re.compile(r"\b(?:[Ii]ssues? \d+|#\d+|[0-9a-f]{7,40})\b")


def readme_prose() -> str:
    """README.md without its code blocks and inline code."""
    text = re.sub(r"```.*?```", "", (REPO / "README.md").read_text(), flags=re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def test_the_readmes_prose_cites_no_issue_numbers_nor_commit_hashes():
    assert ISSUE_OR_COMMIT.findall(readme_prose()) == []


@pytest.mark.parametrize("text", ["as issue 21 measured", "at code aefb12a", "(kubeflow/trainer#3429)"])
def test_the_prose_check_finds_an_issue_number_or_a_commit_hash(text):
    assert ISSUE_OR_COMMIT.search(text)


CITED_TEST = re.compile(r"(tests/[\w/]+\.py)::(\w+)")


def cited_tests(text: str) -> list[tuple[str, str]]:
    """Every ``tests/<path>.py::<name>`` in ``text``."""
    return CITED_TEST.findall(text)


def test_every_test_the_docs_name_exists():
    """docs/, README.md, BENCHMARKS.md and knative/README.md name tests as evidence (docs/security.md's attack table
    above all): each must be a test function of that file."""
    missing = []
    for doc in [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md", REPO / "BENCHMARKS.md",
                REPO / "knative" / "README.md"]:
        for path, name in cited_tests(doc.read_text()):
            source = REPO / path
            if not source.is_file() or not re.search(rf"^def {name}\(", source.read_text(), re.M):
                missing.append(f"{doc.relative_to(REPO)}: {path}::{name}")
    assert missing == []


def test_a_cited_test_is_a_path_and_a_function_name():
    assert cited_tests("`tests/function/test_trust.py::test_a_forged_body` and tests/kube/x.py, not a test") == [
        ("tests/function/test_trust.py", "test_a_forged_body")]


SHAPE_PATHS = REPO / "tests" / "chain" / "test_shape_paths.py"
PATH_CELL = {"named": "named, bound whole", "refused": "named, no PodGroup"}


def measured_paths() -> dict[str, str]:
    """``EXPECTED`` of the chain test that measures each shape's path (read, not imported: it needs the chain)."""
    tree = ast.parse(SHAPE_PATHS.read_text())
    found = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "EXPECTED" for t in node.targets))
    return ast.literal_eval(found)


def documented_paths() -> dict[str, str]:
    """docs/how-it-decides.md's table under "Which shapes take which path": shape -> its path cell."""
    section = (REPO / "docs" / "how-it-decides.md").read_text().split("## Which shapes take which path", 1)[1]
    section = section.split("\n## ", 1)[0]
    return {m[0]: m[1].strip() for m in re.findall(r"^\| `?([\w.-]+)`? \|([^|]+)\|", section, re.M)
            if m[0] != "shape"}


def test_the_docs_table_of_paths_is_the_shapes_the_chain_measures():
    """Every shape tests/chain/test_shape_paths.py runs is a row of the docs' table, with the path it asserts, and
    the table has no other row."""
    assert {shape: PATH_CELL[path] for shape, path in measured_paths().items()} == documented_paths()
