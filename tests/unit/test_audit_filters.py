"""The audit log's filters: the timestamps they read, and the ones a page carries into its links."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine.directory.audit_log import AuditFilters, parse_timestamp


def test_a_timestamp_is_read_in_utc_with_or_without_its_zone() -> None:
    noon = datetime(2020, 1, 1, 12, tzinfo=UTC)
    for written in ("2020-01-01T12:00:00Z", "2020-01-01T12:00:00z", " 2020-01-01T12:00 ", "2020-01-01T13:00+01:00"):
        moment = parse_timestamp(written)
        assert moment == noon and moment.utcoffset() is not None and moment.utcoffset().total_seconds() == 0
    assert parse_timestamp("2020-01-01") == datetime(2020, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("written", ["yesterday", "2020-13-45", "", "Z"])
def test_what_is_not_a_timestamp_is_a_value_error(written: str) -> None:
    with pytest.raises(ValueError):
        parse_timestamp(written)


@pytest.mark.parametrize("written", ["0001-01-01T00:30+01:00", "9999-12-31T23:30-01:00"])
def test_a_time_its_offset_pushes_out_of_the_storable_years_is_a_value_error(written: str) -> None:
    with pytest.raises(ValueError, match="outside the years 1 to 9999 in UTC"):
        parse_timestamp(written)


def test_only_the_given_text_filters_are_carried_as_parameters() -> None:
    filters = AuditFilters(
        type="webhook.*", category="", actor_id=None, since="2020-01-01", actor_ids=("usr_1",), subject_ids=()
    )
    assert filters.as_params() == {"type": "webhook.*", "since": "2020-01-01"}
    assert AuditFilters().as_params() == {}
