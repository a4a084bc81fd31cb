"""The spark engine's memory of a source's id and properties (runtime/delta/spark/identity.py):
reused only while DESCRIBE HISTORY proves the same log moved on by commits that keep them."""

from __future__ import annotations

import datetime
import uuid

from python_helpers.runtime.delta.spark import identity


def _commit(version: int, operation: str = "WRITE", mode: str = "Append", second: int = 0) -> dict:
    stamp = datetime.datetime(2026, 11, 29, 8, 0, second) + datetime.timedelta(minutes=version)
    return {"version": version, "timestamp": stamp, "operation": operation, "operationParameters": {"mode": mode}}


class _Detail:
    """DESCRIBE DETAIL, counted; each call answers the id it is given."""

    def __init__(self, table_id: str = "id-1", cdf: str = "true"):
        self.calls, self.table_id, self.cdf = 0, table_id, cdf

    def __call__(self):
        self.calls += 1
        return {"id": self.table_id, "properties": {"delta.enableChangeDataFeed": self.cdf}, "partitionColumns": []}


def _place() -> str:
    return f"/tables/{uuid.uuid4().hex}"


def test_a_log_moved_on_by_writes_merges_and_deletes_is_not_described_again():
    place, detail = _place(), _Detail()
    history = [_commit(0, "CREATE TABLE"), _commit(1)]
    assert identity.of(place, history, detail).table_id == "id-1" and detail.calls == 1
    history += [_commit(2, "MERGE"), _commit(3, "DELETE"), _commit(4, "UPDATE"), _commit(5, "OPTIMIZE")]
    detail.table_id = "never asked"
    found = identity.of(place, history[-3:] + history[:3], detail)  # any order, the seen commit in it
    assert found.table_id == "id-1" and found.properties["delta.enableChangeDataFeed"] == "true"
    assert detail.calls == 1


def test_a_replace_where_keeps_what_was_seen():
    place, detail = _place(), _Detail()
    identity.of(place, [_commit(0, "CREATE TABLE"), _commit(1)], detail)
    where = {**_commit(2, mode="Overwrite"), "operationParameters": {"mode": "Overwrite", "predicate": "[k IN (1)]"}}
    as_text = {**_commit(3), "operationParameters": "{mode -> Overwrite, predicate -> [k IN (2)]}"}
    assert identity.of(place, [_commit(1), where, as_text], detail).table_id == "id-1" and detail.calls == 1
    # an overwrite of a table with a column named like the key is an overwrite
    column = {**_commit(4), "operationParameters": '{mode -> Overwrite, partitionBy -> ["predicate_day"]}'}
    assert identity.of(place, [as_text, column], detail) is not None and detail.calls == 2


def test_a_replace_a_property_set_or_an_overwrite_is_described_again():
    for after in (
        _commit(2, "CREATE OR REPLACE TABLE AS SELECT"),
        _commit(2, "SET TBLPROPERTIES"),
        _commit(2, "WRITE", mode="Overwrite"),
    ):
        place, detail = _place(), _Detail()
        identity.of(place, [_commit(0, "CREATE TABLE"), _commit(1)], detail)
        detail.table_id, detail.cdf = "id-2", "false"
        found = identity.of(place, [_commit(0, "CREATE TABLE"), _commit(1), after, _commit(3)], detail)
        assert (found.table_id, found.properties["delta.enableChangeDataFeed"], detail.calls) == ("id-2", "false", 2)


def test_a_new_log_at_the_same_place_or_a_long_gap_is_described_again():
    place, detail = _place(), _Detail()
    identity.of(place, [_commit(0, "CREATE TABLE"), _commit(1)], detail)
    # made anew: version 1 is another commit (its time differs)
    detail.table_id = "id-2"
    assert identity.of(place, [_commit(0, "CREATE TABLE", second=9), _commit(1, second=9)], detail).table_id == "id-2"
    # more commits since than the history read shows: the seen one is not among them
    detail.table_id = "id-3"
    later = [_commit(v) for v in range(30, 46)]
    assert identity.of(place, later, detail).table_id == "id-3" and detail.calls == 3


def test_not_a_delta_table_is_none():
    assert identity.of(_place(), [_commit(0)], lambda: None) is None


def _offset(place: str, version: int, commit: dict, **extra) -> dict:
    return {
        "path": place,
        "table_id": "id-9",
        "version": version,
        "commit": identity.digest(commit),
        "cdf": True,
        "partition_columns": ["day"],
        **extra,
    }


def test_a_stored_results_offsets_stand_for_a_describe_detail_in_a_new_process():
    place, detail = _place(), _Detail(table_id="never asked")
    history = [_commit(0, "CREATE TABLE"), _commit(1), _commit(2, "MERGE")]
    identity.recall({"s.t": _offset(place, 1, history[1])})
    found = identity.of(place, history, detail)
    assert (found.table_id, found.properties["delta.enableChangeDataFeed"], found.partition_columns) == (
        "id-9",
        "true",
        ["day"],
    )
    assert detail.calls == 0


def test_offsets_that_no_longer_hold_or_say_too_little_are_not_trusted():
    history = [_commit(0, "CREATE TABLE"), _commit(1), _commit(2, "SET TBLPROPERTIES")]
    cases = [
        (history, _offset("", 1, history[1])),  # a property set since the consumed commit
        (history[:2], _offset("", 1, _commit(1, second=9))),  # another log's commit 1
        (history[:2], {k: v for k, v in _offset("", 1, history[1]).items() if k != "cdf"}),  # an older format
    ]
    for commits, offset in cases:
        place, detail = _place(), _Detail(table_id="id-2")
        identity.recall({"s.t": {**offset, "path": place}})
        assert identity.of(place, commits, detail).table_id == "id-2" and detail.calls == 1
