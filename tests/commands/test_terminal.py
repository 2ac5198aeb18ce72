"""Operators' terminals (issue 39, attack 7): no string from the cluster reaches them raw, and a Warning Event a
tenant forges, ``reportingComponent: kai-fn`` and all, never changes the verdict ``status`` shows."""
from __future__ import annotations

import re

import pytest

from kai_fn.commands import cli
from kai_fn.commands.tables import table
from kai_fn.commands.terminal import visible
from tests.commands.test_status import held, lines, status
from tests.conftest import seed
from tests.function.test_function import NAME, NS
from tests.function.test_gang_status import kai_says, place, released

CLEAR, TITLE, CLIPBOARD = "\x1b[2J", "\x1b]0;kai-fn: all bound\x07", "\x1b]52;c;cm0gLXJmIH4=\x07"
HOSTILE = f"{CLEAR}{TITLE}{CLIPBOARD}\x9b31m\u202eevil\nNAMESPACE  fake  bound"
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize("text, shown", [
    (CLEAR, r"\x1b[2J"),
    (TITLE, r"\x1b]0;kai-fn: all bound\x07"),
    (CLIPBOARD, r"\x1b]52;c;cm0gLXJmIH4=\x07"),
    ("\x9b31m", r"\x9b31m"),
    ("\u202eevil", r"\u202eevil"),
    ("a row\nNAMESPACE  fake", r"a row\x0aNAMESPACE  fake"),
    ("team-a/llama: GangExceedsQueue (8 > 4)", "team-a/llama: GangExceedsQueue (8 > 4)"),
], ids=["csi-clear", "osc-0-title", "osc-52-clipboard", "c1-csi", "bidi-override", "newline", "plain"])
def test_control_characters_are_shown_as_their_escapes(text, shown):
    assert (visible(text), table([[text]], indent="")) == (shown, shown)


def forged_warning(trainjob: dict) -> dict:
    """What any tenant with `create events` may post in its namespace: a refusal in kai_fn's name."""
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{NAME}.forged", "namespace": NS},
            "involvedObject": {"apiVersion": trainjob["apiVersion"], "kind": "TrainJob", "name": NAME,
                               "namespace": NS, "uid": trainjob["metadata"]["uid"]},
            "reason": "GangExceedsQueue", "message": HOSTILE, "type": "Warning",
            "source": {"component": "kai-fn"}, "reportingComponent": "kai-fn", "reportingInstance": "kai-fn-0",
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1}


@pytest.mark.parametrize("output", ["text", "wide", "json"])
def test_a_forged_kai_fn_warning_neither_blocks_a_held_trainjob_in_status_nor_reaches_the_terminal(api, capsys,
                                                                                                   output):
    objects = held()
    seed(api, *objects, forged_warning(objects[0]))
    code, out, err = status(api, "-A", "-o", output, capsys=capsys)
    assert code in (0, 1), err
    assert RAW.findall(out + err) == [] and "GangExceedsQueue" not in out
    assert lines(api, capsys, "-A")[NAME]["state"] == "held"


@pytest.mark.parametrize("command", [["explain", f"{NS}/{NAME}"], ["release", f"{NS}/{NAME}"]])
def test_a_forged_kai_fn_warning_is_not_a_refusal_for_explain_or_release(api, capsys, command):
    objects = held()
    seed(api, *objects, forged_warning(objects[0]))
    code = cli.main([*command, "--kubeconfig", api.kubeconfig])
    out = capsys.readouterr()
    assert (code, "GangExceedsQueue" in out.out, RAW.findall(out.out + out.err)) == (1 if command[0] == "release"
                                                                                     else 0, False, [])


def test_kais_own_words_on_a_podgroup_are_shown_escaped_by_status_and_explain(api, function, capsys):
    """A PodGroup's conditions are text anyone who may write its status can set: shown, never raw."""
    released(api, function.url)
    kai_says(api, {"reason": "Unschedulable", "message": HOSTILE})
    place(api, 4, 0)
    code, out, err = status(api, "-A", "-o", "wide", capsys=capsys)
    assert cli.main(["explain", f"{NS}/{NAME}", "--kubeconfig", api.kubeconfig]) in (0, 1)
    explained = capsys.readouterr().out
    assert (r"\x1b]52;c;cm0gLXJmIH4=\x07" in out, r"\x1b[2J" in explained) == (True, True)
    assert RAW.findall(out + err + explained) == []
