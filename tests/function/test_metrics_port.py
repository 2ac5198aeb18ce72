"""/metrics apart from the event port (issue 39, item 2): with ``KAI_FN_METRICS_PORT`` the scrape has a port of its
own, which knative/base's NetworkPolicy opens to the monitoring namespace alone, and the event port answers it 404."""
from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from kai_fn.local.process import free_port


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_metrics_are_served_on_their_own_port_and_not_on_the_event_port(functions, api):
    fn = functions(KAI_FN_METRICS_PORT=str(free_port()))
    status, text = get(f"{fn.metrics_url}/metrics")
    assert status == 200 and "kai_fn_catch_up_total" in text
    assert get(f"{fn.url}/metrics")[0] == 404
    assert get(f"{fn.url}/healthz") == (200, "ok\n")


@pytest.mark.parametrize("value", ["-1", "65536", "http"])
def test_a_metrics_port_out_of_range_stops_the_function_at_start_up(value):
    from kai_fn.settings import SettingsError, load
    with pytest.raises(SettingsError, match="KAI_FN_METRICS_PORT"):
        load(KAI_FN_METRICS_PORT=value)
