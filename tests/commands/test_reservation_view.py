"""``status`` and ``explain`` show MPI's launcher's place held in the nodes' gang, then handed over.

Against the emulator: the function (real server) makes the gang and its placeholder, the test plays JobSet (the
node and launcher pods).
"""
from __future__ import annotations

import json

from kai_fn.commands import cli
from tests.ce import resource, send
from tests.conftest import TRAINER
from tests.function import test_reservation as mpi


def run(api, capsys, *args: str) -> tuple[int, str]:
    code = cli.main([*args, "--kubeconfig", api.kubeconfig])
    return code, capsys.readouterr().out


def test_a_held_place_then_its_hand_over_are_read_by_status_and_explain(api, function, capsys):
    mpi.released(api, function.url)
    mpi.nodes_run(api, launcher=False)
    _, out = run(api, capsys, "status", "-n", mpi.NS, "-o", "json")
    (item,) = [i for i in json.loads(out) if i["name"] == mpi.NAME]
    assert item["state"] == "waiting" and "placeholder pods hold the places of launcher (1 pod)" in item["reason"]
    assert item["reservation"].startswith("placeholder pods hold")
    _, text = run(api, capsys, "explain", f"{mpi.NS}/{mpi.NAME}")
    assert "RESERVATION" in text and mpi.HOLDER in text, text
    _, out = run(api, capsys, "explain", f"{mpi.NS}/{mpi.NAME}", "-o", "json")
    kai = json.loads(out)["kai"]
    assert [p["name"] for p in kai["placeholders"]] == [mpi.HOLDER] and kai["placeholders"][0]["for"] == "launcher"

    mpi.nodes_run(api, launcher=True)
    assert send(function.url, resource(api.get(TRAINER, "TrainJob", mpi.NS, mpi.NAME), "update")).status == 200
    _, out = run(api, capsys, "status", "-n", mpi.NS, "-o", "json")
    (item,) = [i for i in json.loads(out) if i["name"] == mpi.NAME]
    assert "handed over at" in item["reservation"] and "placeholder" not in item["reason"]
    _, out = run(api, capsys, "explain", f"{mpi.NS}/{mpi.NAME}", "-o", "json")
    assert json.loads(out)["kai"]["placeholders"] == []
