"""What the Thrift binding makes of HiveServer2's text: maps, timestamps and time zones read as a
Spark session's collect() returns them (the spark engine's digests and metadata must not depend
on the connection method)."""

from __future__ import annotations

import datetime

from python_helpers.runtime.connections.thrift import _decoded, _string_map, _zone


def test_a_map_with_quotes_inside_its_values_is_read_whole():
    # Delta's history parameters as HiveServer2 prints them: quotes inside values unescaped
    text = '{"predicate":"["(t.id = s.id)"]","matchedPredicates":"[{"actionType":"update"}]"}'
    assert _decoded(text, "MAP_TYPE", None) == {
        "predicate": '["(t.id = s.id)"]',
        "matchedPredicates": '[{"actionType":"update"}]',
    }
    assert _string_map("{}") == {}
    assert _decoded('{"mode":"Append","partitionBy":"[]"}', "MAP_TYPE", None) == {"mode": "Append", "partitionBy": "[]"}
    assert _decoded('["a","b"]', "ARRAY_TYPE", None) == ["a", "b"]


def test_a_timestamp_is_the_same_instant_as_collect_gives():
    moment = _decoded("2026-11-26 17:11:00.123", "TIMESTAMP_TYPE", _zone("+01:00"))
    assert moment.tzinfo is None  # naive local time, as collect() returns
    utc = datetime.datetime(2026, 11, 26, 16, 11, 0, 123000, tzinfo=datetime.timezone.utc)
    assert moment == utc.astimezone().replace(tzinfo=None)


def test_a_timestamp_pyhive_parsed_is_read_in_the_session_zone_too():
    parsed = datetime.datetime(2026, 11, 26, 17, 11, 0, 123000)  # what PyHive returns: wall time
    moment = _decoded(parsed, "TIMESTAMP_TYPE", _zone("+01:00"))
    utc = datetime.datetime(2026, 11, 26, 16, 11, 0, 123000, tzinfo=datetime.timezone.utc)
    assert moment == utc.astimezone().replace(tzinfo=None)


def test_time_zones_by_region_and_by_offset():
    assert _zone("UTC").utcoffset(None) == datetime.timedelta(0)
    assert _zone("GMT-05:30").utcoffset(None) == -datetime.timedelta(hours=5, minutes=30)
    winter = datetime.datetime(2026, 1, 1)
    assert _zone("Europe/Paris").utcoffset(winter) == datetime.timedelta(hours=1)


def test_other_values_pass_as_they_are():
    assert _decoded("delta", "STRING_TYPE", None) == "delta"
    assert _decoded(3, "BIGINT_TYPE", None) == 3
