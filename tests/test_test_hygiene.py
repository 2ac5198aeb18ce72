"""CI check of issue 23: every test can fail for the reason it names (the rules: tests/lint_tests.py)."""
from __future__ import annotations

import ast
import textwrap

import pytest

from tests import lint_tests
from tests.lint_tests import ALLOWABLE, ALLOWED, Checker


def test_no_test_asserts_only_in_a_loop_or_branch_raises_without_match_or_skips_on_its_own_import():
    failing, allowed, stale = lint_tests.check()
    assert [str(v) for v in failing] == [], "see tests/lint_tests.py for the rules"
    assert stale == [], "fixed: delete these entries from tests/lint_tests.py ALLOWED"
    assert len(allowed) >= len(ALLOWED) and all(key.startswith(ALLOWABLE) for key, _ in ALLOWED)


def rules_broken(source: str, helpers: str = "") -> list[tuple[str, str]]:
    files = {"tests/test_x.py": ast.parse(textwrap.dedent(source)), "tests/helpers.py": ast.parse(textwrap.dedent(helpers))}
    return [(v.test, v.rule) for v in Checker(files).violations("tests/test_x.py")]


@pytest.mark.parametrize("body, broken", [
    ("assert x", False),
    ("for x in xs:\n    assert x", True),
    ("if c:\n    assert x", True),
    ("while c:\n    assert x", True),
    ("if c:\n    assert x\nelse:\n    assert y", False),  # one branch runs, and asserts
    ("if c:\n    assert x\nelif d:\n    assert y", True),  # neither may run
    ("if errors:\n    pytest.fail('x')", False),  # the condition is the check
    ("with pytest.raises(E, match='m'):\n    f()", False),
    ("try:\n    assert x\nexcept E:\n    pass", False),
    ("try:\n    f()\nexcept E:\n    assert x", True),
    ("[check(x) for x in xs]", True),  # a comprehension is a loop
    ("m.assert_called_once_with(1)", False),
    ("check(x)", False),  # a helper under tests/ that asserts
    ("for x in checked_list():\n    assert x", True),  # a loop header's own check is not the loop's
    ("quiet(x)", True),  # a helper under tests/ that asserts only in a loop
    ("def inner():\n    assert x", True),
    ("f()", True),
], ids=lambda v: v if isinstance(v, str) else None)
def test_the_assertion_rule(body, broken):
    helpers = """\
        def check(x):
            assert x
        def checked_list():
            assert True
            return []
        def quiet(xs):
            for x in xs:
                assert x
    """
    source = "import pytest\nfrom tests.helpers import check, checked_list, quiet\ndef test_it():\n" + \
        textwrap.indent(body, "    ")
    assert (("test_it", "no-assertion") in rules_broken(source, helpers)) is broken


@pytest.mark.parametrize("call, broken", [
    ("pytest.raises(E)", True),
    ("pytest.raises(E, match='')", True),
    ("pytest.raises(E, match='.*')", True),
    ("pytest.raises(E, match='not found')", False),
    ("pytest.raises(E, match=pattern)", False),
    ("raises(E)", True),  # from pytest import raises
])
def test_the_raises_rule(call, broken):
    source = f"import pytest\nfrom pytest import raises\ndef test_it():\n    with {call}:\n        f()\n"
    assert (("test_it", "bare-raises") in rules_broken(source)) is broken


def test_the_importorskip_rule():
    source = """\
        import pytest
        def test_it():
            a = pytest.importorskip("kai_fn.core.keys")
            b = pytest.importorskip("yaml")
            assert a and b
    """
    assert rules_broken(source) == [("test_it", "own-importorskip")]
