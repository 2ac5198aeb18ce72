"""The status Eventing's PingSource controller would write, which mtping waits for (kai_fn/local/ping.py)."""
from __future__ import annotations

import pytest
import yaml

from kai_fn.local.ping import status
from kai_fn.local.process import REPO

MANIFEST = yaml.safe_load((REPO / "knative" / "base" / "pingsource.yaml").read_text())


@pytest.mark.parametrize("oidc", [True, False])
def test_status_is_ready_with_the_sink_and_with_oidc_the_sources_identity(oidc):
    got = status(MANIFEST, "http://127.0.0.1:9", 3, oidc=oidc)
    assert got["sinkUri"] == "http://127.0.0.1:9" and got["observedGeneration"] == 3
    assert {c["type"]: c["status"] for c in got["conditions"]}["Ready"] == "True"
    assert (got.get("sinkAudience"), (got.get("auth") or {}).get("serviceAccountName")) == (
        ("kai-fn", "kai-fn-resync-oidc-sources.knative.dev-pingsource") if oidc else (None, None))
