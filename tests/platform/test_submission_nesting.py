"""The body's nesting check skips its character walk for a body with few brackets (api/submission.py): the
verdict, and the depth it reports past the limit, are those of the full walk."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from loadmaster.platform.api.submission import block_depth, bracket_depth, nesting

TEXT = st.text(alphabet='[]{}"\\\'- \nab:', max_size=120)


@given(TEXT, st.integers(min_value=0, max_value=12))
def test_nesting_is_exact_past_its_limit_and_within_it_otherwise(text: str, limit: int) -> None:
    full = max(bracket_depth(text), block_depth(text))
    got = nesting(text, limit)
    assert (got > limit) == (full > limit)
    if full > limit:
        assert got == full
    else:
        assert got <= limit


def test_a_shallow_manifest_with_a_deep_block_style_is_still_caught() -> None:
    deep = "- " * 40 + "x"  # YAML: forty nested sequences, no bracket at all
    assert nesting(deep, 32) == 40
    assert nesting('{"a": [[[1]]], "b": "[[[[[[[["}', 3) == 4  # walked: brackets in a string do not count
