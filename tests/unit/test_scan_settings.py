"""held_settings.at_least (as refresh/scan_settings uses it): a setting raised while any refresh
of the session needs it, and put back by the last one (dbt's threads share one session). The
connection here is a dictionary of settings: what is tested is the bookkeeping, not Spark (the
Spark tests check the setting is back after real refreshes)."""

from __future__ import annotations

import threading
from typing import Optional

from python_helpers.runtime.refresh import scan_settings

KEY = scan_settings.IN_FILTER_THRESHOLD


class Settings:
    def __init__(self):
        self.values: dict = {}
        self.settings_key = id(self)
        self.writes: list = []

    def conf(self, key: str, default: Optional[str] = None) -> Optional[str]:
        return self.values.get(key, default)

    def set_conf(self, key: str, value: Optional[str]) -> None:
        self.writes.append((key, value))
        if value is None:
            self.values.pop(key, None)
        else:
            self.values[key] = value


def test_raised_inside_and_restored_after():
    conn = Settings()
    conn.values[KEY] = "10"
    with scan_settings.at_least(conn, KEY, 512):  # type: ignore[arg-type]
        assert conn.values[KEY] == "512"
    assert conn.values[KEY] == "10"


def test_left_alone_when_high_enough_already():
    conn = Settings()
    conn.values[KEY] = "4096"
    with scan_settings.at_least(conn, KEY, 512):  # type: ignore[arg-type]
        pass
    assert conn.writes == [] and conn.values[KEY] == "4096"


def test_unset_before_is_unset_after():
    conn = Settings()
    with scan_settings.at_least(conn, KEY, 512):  # type: ignore[arg-type]
        assert conn.values[KEY] == "512"
    assert KEY not in conn.values


def test_overlapping_refreshes_restore_the_sessions_own_value_once_the_last_ends():
    conn = Settings()
    conn.values[KEY] = "10"
    first_in, second_in, release_first = threading.Event(), threading.Event(), threading.Event()
    seen = []

    def first():
        with scan_settings.at_least(conn, KEY, 512):  # type: ignore[arg-type]
            first_in.set()
            release_first.wait(5)
        seen.append(conn.values[KEY])  # the second still runs: still raised

    def second():
        first_in.wait(5)
        with scan_settings.at_least(conn, KEY, 512):  # type: ignore[arg-type]
            second_in.set()
            release_first.set()
            while not seen:
                threading.Event().wait(0.01)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == ["512"] and conn.values[KEY] == "10"
    assert conn.writes == [(KEY, "512"), (KEY, "10")]


def test_restored_when_the_block_raises():
    conn = Settings()
    conn.values[KEY] = "10"
    try:
        with scan_settings.at_least(conn, KEY, 512):  # type: ignore[arg-type]
            raise RuntimeError("the delta query failed")
    except RuntimeError:
        pass
    assert conn.values[KEY] == "10"


def test_an_intermediate_computed_once_runs_with_the_threshold_raised_once_its_reads_are_restricted():
    """refresh/differential.with_scan_settings: a materialized intermediate (a join's delta
    computed once) reads key-restricted snapshots; the threshold must be up while it runs, and
    back after. Its restricted reads are bound while the query is rendered, before it runs."""
    from python_helpers.runtime.refresh.differential import with_scan_settings

    conn = Settings()

    class Bindings:
        page_filtered = 0

        def scan_settings(self):
            import contextlib

            if not self.page_filtered:
                return contextlib.nullcontext()
            return scan_settings.at_least(conn, KEY, 512)

    bindings = Bindings()
    seen = []
    run = with_scan_settings(bindings, lambda query: seen.append((query, conn.conf(KEY))) or query)
    run("unrestricted")
    bindings.page_filtered = 1  # a restricted read bound while the next query was rendered
    run("restricted")
    assert seen == [("unrestricted", None), ("restricted", "512")]
    assert conn.conf(KEY) is None


def test_a_key_filtered_query_raises_the_list_and_turns_the_dictionary_filter_off_until_it_ends():
    conn = Settings()
    conn.values["parquet.filter.dictionary.enabled"] = "true"
    with scan_settings.key_filtered(conn, 512):  # type: ignore[arg-type]
        assert conn.values == {KEY: "512", "parquet.filter.dictionary.enabled": "false"}
    assert conn.values == {"parquet.filter.dictionary.enabled": "true"}
