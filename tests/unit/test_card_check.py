"""Reading and checking a version's card (model.card_check): what the JSON parser lets through and
a schema cannot hold back, at a memory cost that does not grow with the card's elements."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from slurm_harp.model import card_check
from slurm_harp.model.card_check import CardError, check_card, read_card
from tests.conftest import REPO

REFERENCE = next((REPO / "models" / "reference" / "time").glob("*/card.json"))


def _reference() -> dict[str, Any]:
    card: dict[str, Any] = json.loads(REFERENCE.read_text())
    return card


def test_a_quantile_that_is_nan_is_refused() -> None:
    """The schema's exclusiveMinimum 0 and exclusiveMaximum 1 do not hold NaN back (an infinity they
    do): a card of another writer than harp's may hold one."""
    card = _reference()
    card["quantiles"][0]["quantile"] = float("nan")
    with pytest.raises(CardError, match=r"card\.json: quantile not a finite number in \[nan, 0\.7"):
        check_card(card, REFERENCE, REFERENCE.parent.name)
    card["quantiles"][0]["quantile"] = float("inf")
    with pytest.raises(CardError, match=r"card schema: at \$\.quantiles\[0\]\.quantile: inf"):
        check_card(card, REFERENCE, REFERENCE.parent.name)


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_card_holding_what_json_has_no_number_for_is_not_json(tmp_path: Path, text: str) -> None:
    path = tmp_path / "card.json"
    path.write_text(REFERENCE.read_text().replace('"format": 2', f'"format": 2, "x": {text}'))
    said = "is beyond a float's range" if text == "1e999" else "is not a JSON number"
    with pytest.raises(CardError, match=f"card.json: not valid JSON: {text} {said}"):
        read_card(path)


def test_the_depth_check_needs_memory_for_the_depth_not_for_each_element() -> None:
    """It pushed a tuple for every element before checking any: 689 MiB for a card of 10 million
    numbers, 35 times what json.loads took for it."""
    wide = {"format": 2, "padding": [0] * 1_000_000, "deep": [[[[]]]]}
    tracemalloc.start()
    try:
        assert not card_check._deeper_than(wide, 32)
        assert card_check._deeper_than(wide, 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"{peak} bytes for a million elements"
    nested: list[Any] = []
    for _ in range(40):
        nested = [nested]
    assert card_check._deeper_than(nested, 40) and not card_check._deeper_than(nested, 41)  # 41 lists
