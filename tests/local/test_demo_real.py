"""``demo --real`` without a cluster: a failed step ends it with one line and exit 1, and the live table shows KAI's
words only while a pod waits (the story itself runs on the chain: tests/chain/test_demo_real.py)."""
from __future__ import annotations

from contextlib import contextmanager

import pytest

from kai_fn.local import demo_real
from kai_fn.local.podwatch import PodSeen
from kai_fn.local.realchain import ChainError


@contextmanager
def failing(error: Exception):
    raise error
    yield  # pragma: no cover


@pytest.mark.parametrize("error, line", [
    (ChainError("./run.sh cluster up --chain --without-kai-fn failed"),
     "demo --real: FAILED: ./run.sh cluster up --chain --without-kai-fn failed"),
    (RuntimeError("the admission policy did not take effect\nand more"),
     "demo --real: FAILED: RuntimeError: the admission policy did not take effect"),
])
def test_a_failed_step_ends_the_demo_with_one_line_and_exit_1(monkeypatch, capsys, error, line):
    monkeypatch.setattr(demo_real, "chain_cluster", lambda nodes: failing(error))
    assert demo_real.run() == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [line]


def pod(name, node=None):
    return PodSeen(name=name, jobset=demo_real.JOB, group="pg-x", first_seen=0.0, node=node)


def test_the_live_table_shows_kais_words_while_a_pod_waits_and_prints_only_what_changed(capsys):
    live = demo_real.LiveTable()
    waiting = [pod("p-0"), pod("p-1")]
    says = "PodSchedulingErrors: Resources were found for 1 pods while 2 are required for gang scheduling."
    live.show(waiting, "", 0.0)
    live.show(waiting, "", 0.0)  # nothing new: not printed again
    live.show(waiting, says, 0.0)
    live.show([pod("p-0", "n0"), pod("p-1", "n1")], says, 0.0)
    out = capsys.readouterr().out
    tables = out.split("  POD")[1:]
    assert len(tables) == 3
    assert "KAI says" not in tables[0]
    assert "KAI says: PodSchedulingErrors: Resources were found for 1 pods while 2 are required for gang" in tables[1]
    assert "KAI says" not in tables[2] and "2/2 bound" in tables[2]
