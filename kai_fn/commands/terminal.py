"""Text from the cluster made safe for an operator's terminal.

Any tenant can put control characters in what the commands print (an annotation, a condition's message, a name in
a refusal): ``ESC [2J`` clears the screen, OSC 0 retitles the window, OSC 52 writes the clipboard, a newline fakes a
row. Every string from the cluster is shown through :func:`visible`, which renders C0 and C1 controls, DEL and the
bidirectional overrides as Python escapes (``\\x1b``, ``\\x9b``, ``\\u202e``); :func:`visible_lines` does the same
to a whole output but keeps its own line breaks.
"""
from __future__ import annotations

import re

_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROLS_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(value: object) -> str:
    """``str(value)`` with every control character shown as its escape, newlines and tabs included."""
    return _CONTROLS.sub(_escape, str(value))


def visible_lines(text: str) -> str:
    """A whole output with every control character but its line breaks shown as its escape."""
    return _CONTROLS_BUT_NEWLINE.sub(_escape, text)
