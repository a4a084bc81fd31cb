"""Which recorded settings count as a change (runtime/refresh/settings.py): a change of any
rebuilds the stream table, naming it; keys added to the list later are not a change for a
record made before them."""

from __future__ import annotations

from python_helpers.runtime.refresh.settings import SPARK_VERSION, changed_setting

OLD_RECORD = {"spark.sql.session.timeZone": "UTC", "spark.sql.ansi.enabled": "true"}


def test_a_record_made_before_the_later_keys_is_not_a_change():
    now = {**OLD_RECORD, SPARK_VERSION: "4.1.4", "spark.sql.files.ignoreMissingFiles": "false"}
    assert changed_setting(OLD_RECORD, now) is None


def test_a_later_key_that_changes_is_named():
    old = {**OLD_RECORD, SPARK_VERSION: "4.1.4", "spark.sql.files.ignoreMissingFiles": "false"}
    now = {**old, "spark.sql.files.ignoreMissingFiles": "true"}
    said = changed_setting(old, now)
    assert said is not None and "spark.sql.files.ignoreMissingFiles changed from false to true" in said


def test_a_spark_upgrade_is_a_change_named_as_such():
    old = {**OLD_RECORD, SPARK_VERSION: "4.1.3"}
    said = changed_setting(old, {**OLD_RECORD, SPARK_VERSION: "4.1.4"})
    assert said is not None and said.startswith("Spark's version changed from 4.1.3 to 4.1.4")


def test_an_original_key_still_counts_against_an_old_record():
    said = changed_setting(OLD_RECORD, {**OLD_RECORD, "spark.sql.session.timeZone": "Asia/Tokyo"})
    assert said is not None and "spark.sql.session.timeZone changed from UTC to Asia/Tokyo" in said
