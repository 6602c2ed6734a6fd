"""RUN-WIR-1 names: what ``validate_name`` accepts and refuses, at each boundary.

A name (Run id, scope, foreign stream and type; command and commit ids with their own
limit) is a store key and a line of CLI output. The table walks both edges of every
refused range and both sides of each byte limit; the message is pinned (it names the
code point and its index, or the size and the limit).
"""

from __future__ import annotations

import pytest

from runx_actors.protocol import commands as C
from runx_actors.protocol.commit import (
    MAX_ID_BYTES,
    MAX_NAME_BYTES,
    create_group,
    envelope,
    validate_name,
)
from runx_actors.protocol.errors import ValidationError
from runx_actors.protocol.values import NewRun

REFUSED_CHARS = ["\x00", "\x01", "\t", "\n", "\r", "\x1f", "\x7f", "\x80", "\x85", "\x9f",
                 "\u061c", "\u200e", "\u200f", "\u2028", "\u2029", "\u202a", "\u202b",
                 "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"]
# the neighbours of each refused range, and characters people do use in names
ACCEPTED_CHARS = [" ", "~", "\xa0", "\xa1", "\u061b", "\u061d", "\u200d", "\u2027",
                  "\u202f", "\u2065", "\u206a", "é", "ラ", "\U0001f469", ":", "/"]


@pytest.mark.parametrize("char", REFUSED_CHARS, ids=lambda c: f"U+{ord(c):04X}")
def test_refused_character_is_named_with_its_index(char: str) -> None:
    with pytest.raises(ValidationError) as info:
        validate_name(f"run{char}x", "run id")
    assert str(info.value) == (f"run id contains U+{ord(char):04X} at index 3 (a control, "
                               f"line separator or bidirectional formatting character)")
    assert info.value.attrs["index"] == 3


@pytest.mark.parametrize("char", ACCEPTED_CHARS, ids=lambda c: f"U+{ord(c):04X}")
def test_accepted_character(char: str) -> None:
    validate_name(f"run{char}x", "run id")


def test_the_first_refused_character_is_the_one_named() -> None:
    with pytest.raises(ValidationError, match=r"U\+000A at index 1 "):
        validate_name("a\n\x00", "scope")


def test_byte_limits_count_utf8_bytes() -> None:
    validate_name("x" * MAX_NAME_BYTES, "scope")
    validate_name("x" * (MAX_NAME_BYTES - 2) + "é", "scope")  # é is two bytes
    with pytest.raises(ValidationError) as info:
        validate_name("x" * (MAX_NAME_BYTES - 1) + "é", "scope")
    assert str(info.value) == f"scope is {MAX_NAME_BYTES + 1} UTF-8 bytes, more than 512"
    assert info.value.attrs["size"] == MAX_NAME_BYTES + 1
    assert info.value.attrs["value"] == "x" * 64  # the error never carries the whole value
    validate_name("c" * MAX_ID_BYTES, "commit id", MAX_ID_BYTES)
    with pytest.raises(ValidationError, match="commit id is 1025 UTF-8 bytes, more than 1024"):
        validate_name("c" * (MAX_ID_BYTES + 1), "commit id", MAX_ID_BYTES)
    assert (MAX_NAME_BYTES, MAX_ID_BYTES) == (512, 1024)


def test_identity_rules_come_first() -> None:
    with pytest.raises(ValidationError, match="run id must be a non-empty string"):
        validate_name("", "run id")
    with pytest.raises(ValidationError, match="run id is not valid UTF-8"):
        validate_name("a\udc80", "run id")


def test_create_group_and_envelope_apply_the_rule() -> None:
    """The core refuses a Run created under a name that breaks the rule, and a command id
    (a caller may choose one: CancelRun) past the id rule; a derived id always passes."""
    with pytest.raises(ValidationError, match="run id contains U\\+202E at index 1"):
        create_group(NewRun("a\u202eb"))
    with pytest.raises(ValidationError, match=f"run id is {MAX_NAME_BYTES + 1} UTF-8"):
        create_group(NewRun("r" * (MAX_NAME_BYTES + 1)))
    assert len(create_group(NewRun("r" * MAX_NAME_BYTES))) == 1
    cancel = C.CancelRun(reason="stop")
    with pytest.raises(ValidationError, match="command id contains U\\+0000 at index 6"):
        envelope("run-1", "cancel\x00", cancel)
    with pytest.raises(ValidationError, match="command id is 1025 UTF-8 bytes"):
        envelope("run-1", "c" * (MAX_ID_BYTES + 1), cancel)
    assert envelope("run-1", "c" * MAX_ID_BYTES, cancel).id == "c" * MAX_ID_BYTES
    assert envelope("run-1", "f" * 64, cancel).id == "f" * 64
