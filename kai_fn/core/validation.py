"""Kubernetes name and label syntax (apimachinery pkg/util/validation), as problems rather than exceptions."""
from __future__ import annotations

import re

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _check(value: str, limit: int, pattern: re.Pattern[str], what: str, rule: str) -> str | None:
    if len(value) > limit:
        return f"{value!r} is longer than {limit} characters, the limit for {what}"
    if not pattern.fullmatch(value):
        return f"{value!r} is not {what} ({rule})"
    return None


def label_value(value: str) -> str | None:
    return _check(value, 63, _LABEL_VALUE, "a label value",
                  "alphanumerics, '-', '_', '.', starting and ending alphanumeric")


def dns_label(value: str) -> str | None:
    return _check(value, 63, _DNS_LABEL, "a DNS label", "lower-case alphanumerics and '-'")


def dns_subdomain(value: str) -> str | None:
    return _check(value, 253, _DNS_SUBDOMAIN, "an object name", "a DNS subdomain: lower-case alphanumerics, '-', '.'")
