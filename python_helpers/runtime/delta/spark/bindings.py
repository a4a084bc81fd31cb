"""The relations of one refresh, bound for the spark engine: Delta Lake SQL reads them.

A source's change is `table_changes_by_path(path, v_old + 1, v_new)` with weights; a snapshot
is `delta.`path` VERSION AS OF n`; the stored result the same at the version the refresh read.
Delta skips files by their statistics itself, so a key-restricted read is the snapshot filtered
by the change's keys (`key IN (<the keys>)`, few keys, written out as literals where their type
allows: Delta prunes files and Parquet pages only by a literal list, not by a subquery).
Every name carries the refresh's id; all are dropped at the end.
"""

from __future__ import annotations

import contextlib
from typing import Optional

from sqlglot import exp

from python_helpers.dvm.sqlgen import Context, keyed_rows, render, sub
from python_helpers.dvm.tree import WEIGHT
from python_helpers.errors import ChangesUnavailable
from python_helpers.runtime.delta.bound_views import DATE, INTEGRAL, PAGE_FILTER_KEYS, STRING, BoundViews, key_in
from python_helpers.runtime.delta.spark import sql as delta_sql
from python_helpers.runtime.refresh import scan_settings

_INTEGRAL = {"tinyint", "smallint", "int", "integer", "bigint", "long", "short", "byte"}


def key_kind(spark_type: Optional[str]) -> Optional[str]:
    """The kind of key (bound_views.key_in) a column of this Spark type holds, or None. A
    collated string's type names its collation (`string collate ...`): not a plain string."""
    spark_type = (spark_type or "").lower()
    if spark_type in _INTEGRAL:
        return INTEGRAL
    return {"date": DATE, "string": STRING}.get(spark_type)


# Up to this many change rows (all sources together) the delta side of a join is broadcast.
SMALL_DELTA_ROWS = 200_000
_CHANGE_TYPE = "_change_type"


def _weight() -> exp.Expr:
    change = exp.column(_CHANGE_TYPE)
    return exp.Cast(
        this=exp.Case(
            ifs=[
                exp.If(this=change.isin("insert", "update_postimage"), true=exp.Literal.number(1)),
                exp.If(this=change.isin("delete", "update_preimage"), true=exp.Literal.number(-1)),
            ],
            default=exp.Literal.number(0),
        ),
        to=exp.DataType.build("bigint"),
    )


def unavailable(text: str) -> bool:
    """Does Spark's error say a consumed version or its change files can no longer be read?"""
    marks = (
        "DELTA_CHANGE_DATA_FILE_NOT_FOUND",
        "DELTA_FILE_NOT_FOUND",
        "FileNotFoundException",
        "VersionNotFoundException",
        "DELTA_VERSION_NOT_FOUND",
        "DELTA_MISSING_CHANGE_DATA",
        "DELTA_CHANGE_TABLE_FEED_DISABLED",
        "DELTA_CHANGE_DATA_FEED_DISABLED",
        "DELTA_TIMESTAMP_GREATER_THAN_COMMIT",
        "cannot time travel",
    )
    return any(m.lower() in text.lower() for m in marks)


class SparkBindings(BoundViews):
    """files_read / files_skipped stay 0: Delta prunes files itself (Spark's metrics count them).
    `stored_bytes`: the engine's answer to the stored result's size (SparkDelta._stored_bytes)."""

    def __init__(self, conn, pinned: dict, old_versions: dict, columns: dict, model: str, stored_bytes=None):
        super().__init__(conn, pinned, old_versions, columns, model)
        self._size_of = stored_bytes or (lambda location: 0)
        self._stored_bytes: dict = {}
        self._read: dict = {}  # relation -> the view of its change computed by count_changes
        self.stored_columns: list = []  # the stored table's columns in its order, once stored() ran

    def _columns(self, relation: str) -> list:
        src = self.pinned[relation]
        return list(self.columns.get(relation) or [f.name for f in src.state.arrow_schema])

    def _select(self, relation: str, source: str, *extra: str) -> str:
        cols = ", ".join([*(exp.column(c, quoted=True).sql("spark") for c in self._columns(relation)), *extra])
        return f"SELECT {cols} FROM {source}"

    def _change_query(self, relation: str, v_old: int) -> str:
        """The change of `relation` after version `v_old`: the columns read and a weight each."""
        feed = delta_sql.changes(self.pinned[relation].path, v_old + 1, self.pinned[relation].state.version)
        return self._select(relation, feed, f"{_weight().sql('spark')} AS {WEIGHT}")

    def snapshot(self, relation: str, version: str) -> exp.Table:
        src = self.pinned[relation]
        number = src.state.version if version == "new" else self.old[relation]
        key = f"s{self._index[relation]}_{version}"
        if key not in self.views_by_key:
            name = self.view_name(key)
            self.conn.view_of_query(name, self._select(relation, delta_sql.at_version(src.path, number)))
            self.views_by_key[key] = exp.to_table(name)
        return self.views_by_key[key].copy()

    def count_changes(self) -> dict:
        """The change rows of every moved source (one Spark job each: Delta reads the change
        files, kept for the delta query); ChangesUnavailable when the consumed versions can no
        longer be read."""
        for relation, src in self.pinned.items():
            v_old = self.old.get(relation)
            if v_old is None or v_old >= src.state.version:
                continue
            # Read once: the weighted change is computed into the executors' storage now and
            # counted there, and the delta query reads the computed rows (a lazy view would have
            # Delta read the change files again, and the MERGE once more).
            name = self.view_name(f"s{self._index[relation]}_read")
            try:
                self.conn.view_of_query(name, self._change_query(relation, v_old), materialize=True)
                self.change_counts[relation] = int(self.conn.rows(f"SELECT count(*) FROM {name}")[0][0])
                self._read[relation] = name
            except Exception as err:  # noqa: BLE001 - Spark's error class says what is missing
                if unavailable(str(err)):
                    raise ChangesUnavailable(
                        self.model,
                        f"the changes of source {relation} since version {v_old} can no longer be read "
                        f"({str(err).splitlines()[0][:200]})",
                    ) from None
                if "DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA" in str(err):
                    # A column renamed or dropped on a column-mapping table: Delta reads no change
                    # across it (the old files' columns would be matched by their new names).
                    raise ChangesUnavailable(
                        self.model,
                        f"source {relation}'s schema changed between versions {v_old} and "
                        f"{src.state.version} (a column renamed or dropped): Delta's change feed "
                        "cannot be read across it",
                    ) from None
                raise
        return dict(self.change_counts)

    def load_changes(self) -> set:
        changed = set()
        for relation, rows in self.change_counts.items():
            if not rows:
                continue
            query = f"SELECT * FROM {self._read[relation]}"
            name = self.view_name(f"s{self._index[relation]}_chg")
            # One partition for a small change: an aggregate or a join over it needs no shuffle.
            self.conn.view_of_query(name, query, one_partition=rows <= SMALL_DELTA_ROWS)
            self.views_by_key[f"s{self._index[relation]}_chg"] = exp.to_table(name)
            changed.add(relation)
        return changed

    def context(self, changed: set) -> Context:
        return Context(
            changes=self.changes,
            snapshot=self.snapshot,
            changed=set(changed),
            consolidated=set(),
            small_delta=sum(self.change_counts.values()) <= SMALL_DELTA_ROWS,
            materialize=self.materialize,
            keyed_snapshot=self.keyed_snapshot,
        )

    def keyed_snapshot(
        self, relation: str, version: str, column: str, changed_relation: str, changed_column: str, more: tuple = ()
    ):
        """`relation` at `version` filtered by the keys `changed_relation`'s change has in
        `changed_column` (and each of the `more` (relation, column) changes has), when they are
        few; None otherwise (the plain snapshot: Delta's own data skipping still prunes by the
        join)."""
        changes = ((changed_relation, changed_column), *more)
        if relation not in self.pinned or any(r not in self.pinned for r, _ in changes):
            return None
        found = [self._change_keys(r, c) for r, c in changes]
        known = [values for values in found if values is not None]
        if len(known) < len(found):
            return None
        conditions = []
        for (changed, changed_col), values in zip(changes, known):
            condition = key_in(
                column, values, key_kind(self._type_of(relation, column)), key_kind(self._type_of(changed, changed_col))
            )
            if condition is None:  # keys whose literals could compare otherwise: the change's own
                column_ref = exp.column(exp.to_identifier(column, quoted=True))
                keys = self._distinct_keys(changed, changed_col)
                condition = exp.In(this=column_ref, query=exp.Subquery(this=exp.select("*").from_(keys)))
            conditions.append(condition)
        snapshot = self.snapshot(relation, version)
        self.page_filtered += 1
        condition = exp.or_(*conditions) if len(conditions) > 1 else conditions[0]
        name = f"{snapshot.name}_k{len(self.views)}"
        return keyed_rows(sub(exp.select(exp.Star()).from_(snapshot).where(condition), name))

    def _change_keys(self, relation: str, column: str) -> Optional[list]:
        """The distinct non-null keys of `relation`'s change in `column` (one small Spark job),
        when there are at most PAGE_FILTER_KEYS of them."""
        if (relation, column) not in self._keys:
            values = None
            if self.views_by_key.get(f"s{self._index[relation]}_chg") is not None and column in self._columns(relation):
                query = self._distinct_keys_query(relation, column).limit(PAGE_FILTER_KEYS + 1)
                values = [r[0] for r in self.conn.rows(render(query))]
            self._keys[(relation, column)] = values if values is not None and len(values) <= PAGE_FILTER_KEYS else None
        return self._keys[(relation, column)]

    def _distinct_keys_query(self, relation: str, column: str) -> exp.Select:
        key = exp.column(exp.to_identifier(column, quoted=True))
        view = self.views_by_key[f"s{self._index[relation]}_chg"]
        return (
            exp.select(key)
            .distinct()
            .from_(view.copy())
            .where(exp.Not(this=exp.Is(this=key.copy(), expression=exp.Null())))
        )

    def _distinct_keys(self, relation: str, column: str) -> exp.Table:
        """The same keys as a relation, computed once (read by every restricted read of them)."""
        key = f"keys_{self._index[relation]}_{column}"
        if key not in self.views_by_key:
            name = self.view_name(f"keys{len(self.views)}")
            self.conn.view_of_query(name, render(self._distinct_keys_query(relation, column)), materialize=True)
            self.views_by_key[key] = exp.to_table(name)
        return self.views_by_key[key].copy()

    def _type_of(self, relation: str, column: str) -> Optional[str]:
        types = self.pinned[relation].state.spark_types or {}
        return types.get(column)

    def stored(self, target: str, version: int) -> tuple[exp.Table, dict]:
        name = self.view_name("store")
        self.conn.view_of_query(name, f"SELECT * FROM {delta_sql.at_version(target, version)}")
        # Its size (from the commits this refresh read its metadata from, where they tell it):
        # whether a small change reads the stored rows through their row ids (touched_storage)
        # depends on it.
        self._stored_bytes = {name: int(self._size_of(target))}
        columns = self.conn.output_columns(f"SELECT * FROM {name}")
        self.stored_columns = [c.name for c in columns]  # in the table's order (the engine's replace)
        return exp.to_table(name), {c.name: c.type for c in columns}

    def read_bytes(self) -> dict:
        """Only the stored result's size (sources: Delta prunes their files itself)."""
        return dict(self._stored_bytes)

    def full_read_bytes(self) -> Optional[int]:
        return None  # the read estimate of `auto` needs file-level statistics: not asked of Spark here

    def scan_settings(self):
        if not self.page_filtered:
            return contextlib.nullcontext()
        return scan_settings.key_filtered(self.conn, PAGE_FILTER_KEYS)
