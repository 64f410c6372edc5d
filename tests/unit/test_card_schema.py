"""The card contract (models/card.schema.json): every card training writes passes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_harp.learning import card_sections
from slurm_harp.model.card import check_schema
from tests.conftest import REPO


def test_the_models_directory_links_the_packaged_schema() -> None:
    linked = REPO / "models" / "card.schema.json"
    assert linked.resolve() == (REPO / "daemon" / "slurm_harp" / "model" / "card.schema.json").resolve()
    json.loads(linked.read_text())


def test_cards_written_by_training_pass_the_schema(trained_store: Path) -> None:
    cards = sorted(trained_store.glob("*/*/card.json"))
    assert cards
    for card in cards:
        check_schema(json.loads(card.read_text()))


def test_the_schema_names_where_a_card_is_wrong(trained_store: Path) -> None:
    card = json.loads(next(iter(sorted(trained_store.glob("*/*/card.json")))).read_text())
    card["quantiles"][0]["sha256"] = "not hex"
    with pytest.raises(ValueError, match=r"at \$\.quantiles\[0\]\.sha256"):
        check_schema(card)
    with pytest.raises(ValueError, match=r"at \$: 'target' is a required property"):
        check_schema({k: v for k, v in card.items() if k != "target"})


def test_a_time_no_date_holds_is_null_in_the_card_not_an_error(caplog: pytest.LogCaptureFixture) -> None:
    """A job store holding a time past the year 9999 (an SWF UnixStartTime read in milliseconds)
    ended every training in `year 27969 is out of range` while writing the card's window."""
    assert card_sections._iso(820454400000.0) is None and card_sections._iso(-1e20) is None
    assert card_sections._iso(float("nan")) is None
    assert card_sections._iso(0.0) == "1970-01-01T00:00:00+00:00"
    assert "time 820454400000.0 (unix seconds) is no date (year 27969 is out of range)" in caplog.text
