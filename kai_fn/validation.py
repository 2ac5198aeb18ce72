"""Kubernetes name and label syntax (apimachinery pkg/util/validation), as problems rather than exceptions."""
from __future__ import annotations

import re

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def label_value(value: str) -> str | None:
    if len(value) > 63:
        return f"{value!r} is longer than 63 characters, the limit for a label value"
    if not _LABEL_VALUE.match(value):
        return f"{value!r} is not a valid label value (alphanumerics, '-', '_', '.', starting and ending alphanumeric)"
    return None


def dns_label(value: str) -> str | None:
    if len(value) > 63:
        return f"{value!r} is longer than 63 characters, the limit for a DNS label"
    if not _DNS_LABEL.match(value):
        return f"{value!r} is not a DNS label (lower-case alphanumerics and '-')"
    return None


def dns_subdomain(value: str) -> str | None:
    if len(value) > 253:
        return f"{value!r} is longer than 253 characters, the limit for an object name"
    if not _DNS_SUBDOMAIN.match(value):
        return f"{value!r} is not a valid object name (a DNS subdomain)"
    return None
