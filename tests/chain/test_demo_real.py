"""``./run.sh demo --real`` on the chain tier's testbed (reused: the demo keeps to a pool of its own): 4 pods of a
4 x 8 GPU gang wait whole on 3 nodes while the live table gives KAI's reason, bind when a 4th node comes, kai_fn tells
the TrainJob so, and ``status`` closes the story; everything it started is gone afterwards, its namespace too."""
from __future__ import annotations

import re
import subprocess
import sys

from kubernetes import client

from kai_fn.local.chain import POLICY, POOL_LABEL
from kai_fn.local.demo_real import POOL
from kai_fn.local.process import REPO
from tests.chain.conftest import wait_for


def test_demo_real_tells_the_all_or_nothing_story_in_kais_words_and_closes_with_status(chain_testbed, chains):
    chains.close()  # the demo runs its own kai_fn and admission policy; the next scenario starts the tier's again
    done = subprocess.run([sys.executable, "-m", "kai_fn", "demo", "--real"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-2000:]
    assert "==> chain ready (reused)" in out
    waiting, bound = out.split("==> adding a 4th node")
    assert re.search(r"llama-pretrain-node-0-3-\S+ +- +waiting", waiting)
    kai = " ".join(waiting.split("KAI says: ", 1)[1].split("\n  0/4 bound")[0].split())  # wrapped to the terminal
    assert re.match(r"PodSchedulingErrors: Resources were found for \d pods while 4 are required for gang scheduling\. "
                    r".*didn't have enough resources: GPUs\.", kai), kai
    assert re.search(r"==> all or nothing: 4 pods exist, all in KAI PodGroup pg-llama-pretrain-\S+, none bound", waiting)
    assert "==> KAI bound the gang: all 4 pods" in bound
    assert re.search(r"==> kai_fn told the TrainJob .*: GangCreated, GangUnschedulable.*, GangBound\n", bound), bound
    status = bound.split("python -m kai_fn status -n ")[1]
    assert re.search(r"^  demo-real-\S+ +llama-pretrain +bound +\S+ +default-queue +4 +32 ", status, re.M), status
    assert out.rstrip().splitlines()[-1].startswith("==> done in ")

    core = client.CoreV1Api(chain_testbed.api)
    ns = re.search(r"submitting TrainJob (demo-real-\w+)/llama-pretrain", out).group(1)
    wait_for("the demo's namespace is gone", lambda: ns not in {n.metadata.name for n in core.list_namespace().items},
             deadline_s=60)
    nodes = core.list_node(label_selector=f"{POOL_LABEL}={POOL}").items
    assert all(n.metadata.deletion_timestamp for n in nodes)
    policies = chain_testbed.kubectl("get", "mutatingadmissionpolicies", "-o", "name").stdout
    assert POLICY not in policies
