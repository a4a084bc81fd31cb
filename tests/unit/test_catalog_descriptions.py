"""What the catalog's descriptions of an object say (runtime/catalog/views.py): the view text and
the role property, from `SHOW TABLE EXTENDED`'s information and from dbt's relation cache, which
keeps `DESCRIBE TABLE EXTENDED`'s rows as `key: value` lines."""

from __future__ import annotations

from python_helpers.runtime.catalog.views import ROLE_PROPERTY, Described, view_text_of

SHOWN = (
    "Catalog: spark_catalog\nDatabase: bench\nTable: q06\nType: VIEW\n"
    "View Text: SELECT revenue FROM parquet.`/w/__dvm_published/q06/g3-18ae`\n"
    "View Original Text: SELECT revenue FROM parquet.`/w/__dvm_published/q06/g3-18ae`\n"
    f"Table Properties: [{ROLE_PROPERTY}=stream_table, transient_lastDdlTime=1795849865]\n"
    "Schema: root\n |-- revenue: decimal(38,4) (nullable = true)\n"
)


def test_a_view_shows_its_text_and_role():
    described = Described.of(SHOWN)
    assert described.text == "SELECT revenue FROM parquet.`/w/__dvm_published/q06/g3-18ae`"
    assert described.role == "stream_table"


def test_a_table_has_no_view_text_and_a_users_object_no_role():
    table = "Catalog: spark_catalog\nTable: t\nType: MANAGED\nTable Properties: [owner=a, b]\n"
    assert Described.of(table) == Described(None, None, kind="MANAGED")


def test_a_table_shows_its_type_format_and_location():
    # As Spark 4.1 shows a Delta table registered at a path; its comment spans lines and holds a
    # line like a location, which comes before the table's own.
    table = (
        "Catalog: spark_catalog\nDatabase: a\nTable: st\nType: EXTERNAL\nProvider: delta\n"
        "Comment: moved\nLocation: file:/elsewhere\nTable Properties: [delta.minReaderVersion=1]\n"
        "Location: file:/tmp/w/t1\nPartition Provider: Catalog\nSchema: root\n |-- id: long (nullable = true)\n"
    )
    described = Described.of(table)
    assert (described.kind, described.provider, described.location) == ("EXTERNAL", "delta", "file:/tmp/w/t1")
    assert described.text is None


def test_a_views_comment_cannot_pass_for_a_tables_lines():
    forged = "Type: VIEW\nComment: x\nProvider: delta\nLocation: file:/tmp/w/m\nView Text: SELECT 1\n"
    described = Described.of(forged)
    assert (described.kind, described.provider, described.text) == ("VIEW", None, "SELECT 1")


def test_a_views_text_gives_it_no_location():
    view = "Type: VIEW\nView Text: SELECT 1 AS a\nLocation: file:/x\nView Original Text: SELECT 1 AS a\n"
    described = Described.of(view)
    assert (described.kind, described.provider, described.location) == ("VIEW", None, None)


def test_dbt_cache_lines_without_the_original_text_give_the_first_line():
    cached = "Type: VIEW\nView Text: SELECT 1 AS a\nView Schema Mode: COMPENSATION\n"
    assert view_text_of(cached) == "SELECT 1 AS a"


def test_view_text_inside_another_value_is_not_a_view_text():
    assert view_text_of("Comment: see View Text: SELECT 1\nType: MANAGED\n") is None


class _NoCatalog:
    """A connection whose catalog must not be asked."""

    key = "no-catalog"

    def __getattr__(self, name):
        raise AssertionError(f"the catalog was asked ({name})")


USERS_TABLE = "Type: MANAGED\nTable Properties: [owner=a]\n"
USERS_VIEW = "Type: VIEW\nView Text: SELECT 2\nTable Properties: [owner=a]\n"


class _Scripted:
    """A connection whose catalog answers each lookup of `name` with the next of `answers` (an
    object's information, or None for no object; the last answer repeats); counts lookups,
    records DDL, and refuses CREATE VIEW when `create_fails`."""

    def __init__(self, key, name, answers, kind="VIEW", create_fails=False):
        self.key, self.name, self.answers, self.kind, self.create_fails = key, name, answers, kind, create_fails
        self.asked = 0
        self.ddl: list = []

    def rows(self, sql):
        answer = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        return [] if answer is None else [("bench", self.name, False, answer)]

    def table_type(self, name):
        return self.kind

    def execute(self, sql):
        if self.create_fails and sql.startswith("CREATE VIEW"):
            raise RuntimeError("TABLE_OR_VIEW_ALREADY_EXISTS")
        self.ddl.append(sql.split(" AS ")[0])


def test_a_name_dbts_cache_shows_as_ours_is_not_looked_up_again():
    from python_helpers.runtime.catalog.views import Catalog

    # _NoCatalog fails the test on any catalog call; returning is the check.
    Catalog(_NoCatalog()).check_name("bench", "q06", "q06", information=SHOWN)


def test_the_last_properties_line_is_the_objects_own():
    own = "Type: VIEW\nView Text: SELECT 1\nTable Properties: [dbt_spark_stream.role=stream_table]\n"
    users = "Type: VIEW\nView Text: SELECT 1\nTable Properties: [owner=a]\n"
    assert Described.of(own).role == "stream_table"
    assert Described.of(users.replace("SELECT 1", "SELECT 1\nTable Properties: [dbt_spark_stream.role=x]")).role is None


def test_a_name_dbts_cache_shows_as_someone_elses_is_looked_up_and_refused():
    import pytest

    from python_helpers.runtime.catalog.views import Catalog, NameTaken, forget

    conn = _Scripted("users-table", "q06", [USERS_TABLE], kind="MANAGED")
    for information in (USERS_TABLE, None):
        with pytest.raises(NameTaken, match="did not create"):
            Catalog(conn).check_name("bench", "q06", "q06", information=information)
    assert conn.asked == 2
    forget(conn)


def test_a_first_build_looks_its_name_up_once_before_the_write_and_creates_the_view():
    from sqlglot import exp

    from python_helpers.runtime.catalog.views import STREAM_TABLE, Catalog, forget

    conn = _Scripted("empty", "fresh", [None])
    Catalog(conn).check_name("bench", "fresh", "fresh")
    assert Catalog(conn).publish_view("bench", "fresh", exp.select("1"), STREAM_TABLE, "fresh")
    assert conn.asked == 1
    assert conn.ddl[-1].startswith("CREATE VIEW `bench`.`fresh` TBLPROPERTIES")
    forget(conn)


def test_a_view_made_after_the_lookup_is_looked_up_again_and_altered():
    from sqlglot import exp

    from python_helpers.runtime.catalog.views import STREAM_TABLE, Catalog, forget

    conn = _Scripted("made-meanwhile", "fresh", [None, SHOWN], create_fails=True)
    Catalog(conn).check_name("bench", "fresh", "fresh")
    assert Catalog(conn).publish_view("bench", "fresh", exp.select("1"), STREAM_TABLE, "fresh")
    assert conn.asked == 2 and conn.ddl[-1] == "ALTER VIEW `bench`.`fresh`"
    forget(conn)


def test_what_the_check_found_existing_is_not_trusted_when_publishing():
    import pytest
    from sqlglot import exp

    from python_helpers.runtime.catalog.views import STREAM_TABLE, Catalog, NameTaken, forget

    conn = _Scripted("ours-then-users", "q06", [SHOWN, USERS_VIEW])
    Catalog(conn).check_name("bench", "q06", "q06")
    with pytest.raises(NameTaken, match="did not create"):
        Catalog(conn).publish_view("bench", "q06", exp.select("1"), STREAM_TABLE, "q06")
    assert conn.asked == 2 and conn.ddl == []
    forget(conn)


class _SparkCatalog:
    """A spark-engine connection whose catalog shows one object under every name (`information`,
    or None for nothing); records every call, refuses DESCRIBE DETAIL (not a Delta table)."""

    def __init__(self, key, information, settings=None):
        self.key, self.information = key, information
        self.settings = settings or {}
        self.calls: list = []

    def rows(self, sql):
        self.calls.append(sql)
        return [] if self.information is None else [("src", "t1", False, self.information)]

    def table_type(self, name):
        self.calls.append(f"table_type {name}")
        return None

    def records(self, sql):
        self.calls.append(sql)
        raise RuntimeError("DELTA_TABLE_NOT_FOUND")

    def execute(self, sql):
        self.calls.append(sql)

    def conf(self, key, default=None):
        self.calls.append(f"conf {key}")
        return self.settings.get(key, default)


def _source_view(conn):
    from types import SimpleNamespace

    from python_helpers.runtime.delta.spark import publishing

    logged: list = []
    publishing._publish_source(conn, "src.t1", SimpleNamespace(path="/w/src.db/t1"), "m", lambda *a: logged.append(a))
    return logged


SOURCE_TEXT = "SELECT * FROM delta.`/w/src.db/t1`"


def _our_source_view(mode):
    mode_line = f"View Schema Mode: {mode}\n" if mode else ""
    return (
        f"Type: VIEW\nView Text: {SOURCE_TEXT}\nView Original Text: {SOURCE_TEXT}\n{mode_line}"
        f"View Query Output Columns: [`k`]\nTable Properties: [{ROLE_PROPERTY}=source]\n"
    )


def test_a_views_schema_mode_is_read_and_its_text_cannot_forge_one():
    assert Described.of(_our_source_view("EVOLUTION")).schema_mode == "EVOLUTION"
    assert Described.of(_our_source_view(None)).schema_mode is None
    forged = "Type: VIEW\nView Text: SELECT 1\nView Schema Mode: EVOLUTION\nView Schema Mode: COMPENSATION\n"
    assert Described.of(forged).schema_mode == "COMPENSATION"


def test_a_source_view_the_catalog_shows_as_published_is_left_after_one_lookup():
    conn = _SparkCatalog("spark-source-ours", _our_source_view("EVOLUTION"))
    assert _source_view(conn) == []
    assert conn.calls == ["SHOW TABLE EXTENDED IN `src` LIKE 't1'"]


def test_a_source_view_whose_columns_stay_as_made_is_altered_to_follow_its_table():
    # Made by an earlier release (or a mode the lookup does not show): the same text, but columns
    # fixed when the view was made (a column added to the source would not show).
    for mode in ("COMPENSATION", None):
        conn = _SparkCatalog(f"spark-source-{mode}", _our_source_view(mode))
        _source_view(conn)
        assert f"ALTER VIEW `src`.`t1` AS {SOURCE_TEXT}" in conn.calls, conn.calls
        assert conn.calls[-1] == "ALTER VIEW `src`.`t1` WITH SCHEMA EVOLUTION", conn.calls


def test_a_missing_source_view_is_made_and_another_text_replaced():
    missing = _SparkCatalog("spark-source-missing", None)
    _source_view(missing)
    made = [c for c in missing.calls if c.startswith("CREATE VIEW `src`.`t1`")]
    assert made and made[0].startswith("CREATE VIEW `src`.`t1` WITH SCHEMA EVOLUTION TBLPROPERTIES"), missing.calls
    old = f"Type: VIEW\nView Text: SELECT 1\nTable Properties: [{ROLE_PROPERTY}=source]\n"
    moved = _SparkCatalog("spark-source-moved", old)
    _source_view(moved)
    assert any(c.startswith("ALTER VIEW `src`.`t1` AS SELECT * FROM delta.`/w/src.db/t1`") for c in moved.calls)


def test_where_spark_turns_the_views_mode_off_a_source_view_is_made_and_altered_without_it():
    from python_helpers.runtime.delta.spark import publishing

    off = {publishing.VIEW_SCHEMA_SETTING: "false"}
    missing = _SparkCatalog("spark-source-no-mode", None, off)
    _source_view(missing)
    made = [c for c in missing.calls if c.startswith("CREATE VIEW")]
    assert made and made[0].startswith("CREATE VIEW `src`.`t1` TBLPROPERTIES"), missing.calls
    existing = _SparkCatalog("spark-source-no-mode-existing", _our_source_view(None), off)
    _source_view(existing)
    assert existing.calls[-1] == f"ALTER VIEW `src`.`t1` AS {SOURCE_TEXT}", existing.calls
    assert not any("WITH SCHEMA" in c for c in existing.calls), existing.calls


def test_what_this_process_published_gives_way_to_what_the_catalog_shows():
    # The process made the view (it remembers its text); the catalog now shows it with columns
    # fixed as made (dropped and made again by an earlier release): it is switched all the same.
    from python_helpers.runtime.catalog.views import forget

    conn = _SparkCatalog("spark-source-remembered", None)
    _source_view(conn)
    conn.information, conn.calls = _our_source_view("COMPENSATION"), []
    _source_view(conn)
    assert conn.calls[-1] == "ALTER VIEW `src`.`t1` WITH SCHEMA EVOLUTION", conn.calls
    forget(conn)


class _DescribedOneByOne:
    """A catalog for a name `SHOW TABLE EXTENDED` cannot take: existence, properties, and
    `DESCRIBE TABLE EXTENDED`'s rows, each asked for itself."""

    key = "described-one-by-one"

    def table_exists(self, name):
        return True

    def rows(self, sql):
        if sql.startswith("SHOW TBLPROPERTIES"):
            return [(ROLE_PROPERTY, "source")]
        assert sql.startswith("DESCRIBE TABLE EXTENDED"), sql
        return [("k", "int", None), ("", "", ""), ("View Text", SOURCE_TEXT, ""), ("View Schema Mode", "EVOLUTION", "")]


def test_a_name_described_by_itself_shows_its_views_mode_too():
    from python_helpers.runtime.catalog.views import Catalog

    found = Catalog(_DescribedOneByOne()).describe("src", ["t-1"])["t-1"]
    assert (found.text, found.role, found.schema_mode) == (SOURCE_TEXT, "source", "EVOLUTION")


def test_a_view_at_the_stored_name_is_not_taken_for_the_stored_table():
    from python_helpers.runtime.catalog.views import Catalog
    from python_helpers.runtime.delta.spark import publishing

    forged = "Type: VIEW\nComment: x\nProvider: delta\nLocation: file:/tmp/w/m\nView Text: SELECT 1\n"
    conn = _SparkCatalog("spark-stored-forged", forged)
    catalog = Catalog(conn)
    catalog.remember("src", ["t1"])
    assert not publishing._delta_at(conn, catalog, "src", "t1", "/tmp/w/m")
    assert any(c.startswith("DESCRIBE DETAIL") for c in conn.calls)  # asked, and refused
    table = "Type: EXTERNAL\nProvider: delta\nLocation: file:/tmp/w/m\n"
    conn = _SparkCatalog("spark-stored-ours", table)
    catalog = Catalog(conn)
    catalog.remember("src", ["t1"])
    assert publishing._delta_at(conn, catalog, "src", "t1", "/tmp/w/m")
    assert not publishing._delta_at(conn, catalog, "src", "t1", "/tmp/w/other")
