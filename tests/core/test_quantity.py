"""Quantities print as Go's resource.Quantity does, so minResources reads the same as Trainer's."""
from __future__ import annotations

import re

import pytest

from kai_fn.core.quantity import Quantity


@pytest.mark.parametrize("text, canonical", [
    ("1", "1"), ("1000", "1k"), ("1500m", "1500m"), ("0.5", "500m"), ("1e3", "1k"), ("0.1m", "100u"),
    ("100Ki", "100Ki"), ("1024Mi", "1Gi"), ("1.5Gi", "1536Mi"), ("2048", "2048"), ("1.5Ki", "1536"),
    ("0", "0"), ("0.5Ki", "512"), ("0.9765625Ki", "1k"), ("12E", "12E"), ("1n", "1n"), ("0.0000000001", "1n"),
])
def test_canonical_form(text, canonical):
    assert str(Quantity.parse(text)) == canonical


@pytest.mark.parametrize("terms, total", [
    ((("1Gi", 2), ("512Mi", 1)), "2560Mi"),
    ((("500m", 2), ("250m", 1)), "1250m"),
    ((("512Mi", 1), ("1G", 1)), "1536870912"),
    ((("1G", 1), ("24M", 1)), "1024M"),
    ((("1Mi", 1), ("1M", 1)), "2048576"),
])
def test_sums_keep_the_format_of_the_first_term(terms, total):
    result = None
    for text, count in terms:
        q = Quantity.parse(text) * count
        result = q if result is None else result + q
    assert str(result) == total


@pytest.mark.parametrize("text", ["abc", "1K", "NaN", "inf", "1.2.3", "", "Gi", "1ki"])
def test_rejects_what_kubernetes_rejects(text):
    with pytest.raises(ValueError, match=f"^{re.escape(repr(text))} is not a Kubernetes quantity$"):
        Quantity.parse(text)
