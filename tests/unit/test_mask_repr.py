"""Issue 55, point 6: the canary's dying server quoted a declared secret the way Python does
(`invalid literal for int() with base 10: '...\\'...'`): a value holding `\\` or both quotes
reads differently inside a repr, and the mask, which knew the plain, shell-quoted and JSON
forms only, left its pieces in the deploy's failure line, events.jsonl and --json."""

from __future__ import annotations

import json

from specops.secrets import MASK, mask_text, remember

VALUE = 'r55"Rp\\rZ $q\'Vx7Ny2'


def test_a_secret_in_a_python_repr_is_masked_in_text_and_in_json() -> None:
    remember(VALUE, declared=True)
    line = f"error: invalid literal for int() with base 10: {VALUE!r}"
    assert mask_text(line).endswith(f"'{MASK}'")
    assert VALUE[-8:] not in mask_text(json.dumps({"reason": line}))
