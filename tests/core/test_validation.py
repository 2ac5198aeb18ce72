"""Kubernetes name and label syntax: the whole string must match (a trailing newline once reached a PodGroup)."""
from __future__ import annotations

import pytest

from kai_fn.core import validation

CHECKS = {"label value": validation.label_value, "DNS label": validation.dns_label,
          "object name": validation.dns_subdomain}


@pytest.mark.parametrize("value", ["topo\n", "topo\r\n", "\ntopo", "to po", "topo\x00"],
                         ids=["trailing-newline", "trailing-crlf", "leading-newline", "inner-space", "nul"])
@pytest.mark.parametrize("what", list(CHECKS))
def test_a_name_with_anything_around_or_inside_it_is_refused(what, value):
    assert CHECKS[what](value) is not None


@pytest.mark.parametrize("what", list(CHECKS))
def test_a_plain_name_passes(what):
    assert CHECKS[what]("rack-1") is None
