"""Bind the DVM's abstract relations to temporary views of the connection for one refresh.

Every name carries the refresh's unique id, because dbt runs models on several threads against
one session; all of them are dropped when the refresh ends.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import Optional

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from python_helpers.dvm.sqlgen import Context, keyed_rows, render, sub
from python_helpers.errors import ChangesUnavailable
from python_helpers.runtime import paths
from python_helpers.runtime.connections.base import Connection
from python_helpers.runtime.delta.bound_views import PAGE_FILTER_KEYS, BoundViews
from python_helpers.runtime.delta.embedded import change_feed, change_keys, key_lineage, key_reads
from python_helpers.runtime.delta.embedded import log as delta_log
from python_helpers.runtime.delta.embedded import tables as delta_tables
from python_helpers.runtime.refresh import scan_settings
from python_helpers.runtime.spark_types import spark_type_strings

# Up to this many change rows (all sources together) the delta side of a join is broadcast.
SMALL_DELTA_ROWS = 200_000
# Distinct join keys of a change beyond which file statistics are not consulted (each key is
# looked up in every file's [min, max]; with this many keys most files would stay anyway).
MAX_KEYS = 100_000
# A source of fewer bytes than the session's spark.sql.autoBroadcastJoinThreshold is broadcast
# by Spark itself, so a join's delta gains nothing from first narrowing it to a change's keys.
BROADCAST_THRESHOLD = "spark.sql.autoBroadcastJoinThreshold"
BROADCAST_BYTES = 10 * 1024 * 1024  # its default, used when the session's value cannot be read


class Bindings(BoundViews):
    def __init__(self, conn: Connection, pinned: dict, old_versions: dict, columns: dict, model: str = "?"):
        super().__init__(conn, pinned, old_versions, columns, model)
        # change_counts: exact once consolidated, else estimated from the log
        self.change_files: dict = {}  # relation -> delta_log.ChangeFiles of the versions consumed
        self.change_columns: dict = {}  # relation -> the columns of its change view
        # files_read / files_skipped: files of snapshots narrowed by statistics
        self.consolidated: set = set()  # relations whose change rows are consolidated already
        self._ranges: dict = {}  # (relation, column) -> [min, max] ranges covering its change
        self.view_bytes: dict = {}  # bound snapshot view -> bytes of the data files it covers (read_bytes)
        self._broadcast_bytes: Optional[int] = None  # the session's threshold, read once when asked
        self._key_reads: dict = {}  # (relation, version, pairs, keys' SQL) -> view of rows_for_keys, or None
        self._listed_keys: dict = {}  # (keys' SQL, key columns) -> {key column: values} (None: too many)
        self._keyed: dict = {}  # keyed_snapshot's arguments -> its answer
        self._arrow_views: dict = {}  # view (lower case) -> Arrow rows held here (driver changes, key reads)
        self._rows_views: dict = {}  # relation -> its change rows bound as they are
        self._empty_asked: dict = {}  # empty_change's (relation, key) -> its answer

    def bind_files(self, suffix: str, files: list, schema) -> exp.Table:
        """A view over data files of a Delta table (paths as Spark reads them)."""
        name = self.view_name(suffix)
        self.conn.view_of_files(name, files, schema)
        return exp.to_table(name)

    def stored(self, target: str, version: int) -> tuple[exp.Table, dict]:
        """The stored result at `version` (its live files) and its columns' Spark types."""
        stored = delta_tables.table_at(target, version)
        schema = delta_tables.arrow_schema(stored)
        files = delta_tables.file_paths(stored, target)
        relation = self.bind_files("store", [paths.glob_escaped(f) for f in files], schema)
        self.view_bytes[relation.name] = delta_tables.bytes_of_files(delta_tables.add_actions(stored), [])
        return relation, spark_type_strings(schema)

    def read_bytes(self) -> dict:
        return dict(self.view_bytes)

    def full_read_bytes(self) -> Optional[int]:
        total = 0
        for src in self.pinned.values():
            table = delta_tables.open_table(src.path, src.state.version)
            if table is not None:
                total += delta_tables.bytes_of_files(delta_tables.add_actions(table), [])
        return total

    def snapshot(self, relation: str, version: str) -> exp.Table:
        src = self.pinned[relation]
        number = src.state.version if version == "new" else self.old[relation]
        key = f"s{self._index[relation]}_{version}"
        if key not in self.views_by_key:
            if version == "old":
                self._check_readable(relation, number)
            name = self.view_name(key)
            delta_tables.bind_snapshot(self.conn, name, src.state, number, self.columns.get(relation))
            self.views_by_key[key] = exp.to_table(name)
            table = delta_tables.open_table(src.path, number)
            if table is not None:
                self.view_bytes[self.views_by_key[key].name] = delta_tables.bytes_of_files(
                    delta_tables.add_actions(table), []
                )
        return self.views_by_key[key].copy()

    def _version_number(self, relation: str, version: str) -> Optional[int]:
        """The Delta version a pinned source's `version` ("new" / "old") is (None: no old one)."""
        return self.pinned[relation].state.version if version == "new" else self.old.get(relation)

    def _table_at(self, relation: str, version: str, number: int):
        """A pinned source's table at `number`, an old version checked readable first."""
        if version == "old":
            self._check_readable(relation, number)
        return delta_tables.table_at(self.pinned[relation].path, number)

    def _check_readable(self, relation: str, version: int) -> None:
        """The old snapshot is read lazily by Spark; find vacuumed files or an expired log now,
        so the refresh can fall back to a full one instead of failing half way."""
        path = self.pinned[relation].path
        try:
            table = delta_tables.table_at(path, version)
        except Exception as err:  # noqa: BLE001 - delta-rs raises several kinds for a lost version
            raise ChangesUnavailable(
                self.model,
                f"version {version} of source {relation} can no longer be read "
                f"(log expired: {type(err).__name__}: "
                f"{str(err).splitlines()[0][:200]})",
            ) from None
        missing = [f for f in delta_tables.file_paths(table, path) if not paths.is_uri(f) and not os.path.exists(f)]
        if missing:
            raise ChangesUnavailable(
                self.model,
                f"version {version} of source {relation} can no longer be read "
                f"(vacuumed; first missing file: {missing[0]})",
            )

    def count_changes(self) -> dict:
        """Count the change of every source that moved from the Delta log, before reading any
        of it; returns relation -> change rows (counted where the log has statistics,
        estimated from file sizes elsewhere). Raises ChangesUnavailable when the versions
        consumed can no longer be read (log cleaned up, files vacuumed, feed turned off)."""
        for relation, src in self.pinned.items():
            v_old = self.old.get(relation)
            if v_old is None or v_old >= src.state.version:
                continue
            try:
                files = delta_log.change_files(src.path, v_old + 1, src.state.version)
            except delta_log.CommitMissing as err:
                raise ChangesUnavailable(
                    self.model,
                    f"the Delta log of source {relation} no longer holds the "
                    f"commits since version {v_old} (cleaned up: {err})",
                ) from None
            missing = change_feed.missing_files(files.files)
            if missing:
                raise ChangesUnavailable(
                    self.model,
                    f"change files of source {relation} since version {v_old} "
                    f"were vacuumed (first missing: {missing[0]})",
                )
            self.change_files[relation] = files
            exact = change_feed.exact_rows(files.files)
            if exact is None:
                _, per_row = change_feed.table_stats(delta_tables.open_table(src.path, src.state.version))
                exact = files.estimated_rows(per_row)
            self.change_counts[relation] = exact
        return dict(self.change_counts)

    def load_changes(self) -> set:
        """Read the change of every source that moved (count_changes first); returns the
        relations whose changes do not cancel out (a source whose changes all cancel is
        treated as unchanged)."""
        changed = set()
        for relation, files in self.change_files.items():
            src = self.pinned[relation]
            key = f"s{self._index[relation]}_chg"
            name = self.view_name(key)
            changes = change_feed.read_changes(
                self.conn,
                name,
                src.state.arrow_schema,
                src.state.partition_columns,
                src.path,
                files.files,
                self.columns.get(relation) or [f.name for f in src.state.arrow_schema],
                self.change_counts[relation],
                # One partition for a small change: an aggregate or a join over it then needs no
                # shuffle (a single partition satisfies any clustering), a Spark stage less.
                one_partition_up_to=SMALL_DELTA_ROWS,
                rows_name=self.named(f"{key}_rows"),
            )
            self.change_counts[relation] = changes.rows
            self.change_columns[relation] = changes.columns
            self.views += changes.file_views
            if changes.rows_view is not None:
                self.views.append(changes.rows_view)
                self._rows_views[relation] = changes.rows_view
            if changes.arrow is not None:
                self._arrow_views[name.lower()] = changes.arrow
            if changes.consolidated and changes.rows == 0:
                continue
            if changes.consolidated:
                self.consolidated.add(relation)
            self.views_by_key[key] = exp.to_table(name)
            changed.add(relation)
        return changed

    def context(self, changed: set) -> Context:
        return Context(
            changes=self.changes,
            snapshot=self.snapshot,
            changed=set(changed),
            consolidated=set(self.consolidated) & set(changed),
            small_delta=sum(self.change_counts.values()) <= SMALL_DELTA_ROWS,
            materialize=self.materialize,
            keyed_snapshot=self.keyed_snapshot,
            rows_for_keys=self.rows_for_keys,
            large_source=self.large_source,
            empty_change=self.empty_change,
        )

    def empty_change(self, relation: str, key: str, query: exp.Expr) -> bool:
        """Context.empty_change, of driver rows consolidated (else SQL groups them: a job), once."""
        if (relation, key) not in self._empty_asked:
            rows = self._rows_views.get(relation) if relation in self.consolidated else None  # no working table
            self._empty_asked[(relation, key)] = rows is not None and change_feed.keeps_no_row(
                self.conn, query, self.changes(relation).name, rows
            )
        return self._empty_asked[(relation, key)]

    def large_source(self, relation: str) -> bool:
        """Are the source's data files more bytes than the session's broadcast threshold? (Spark's
        estimate of a scan starts from the files' size.) Unknown counts as large, and so does
        every source when the threshold is -1 (Spark broadcasts nothing by itself)."""
        if relation not in self.pinned:
            return True
        size = self.view_bytes.get(self.snapshot(relation, "new").name)
        return size is None or size > self.broadcast_bytes()

    def broadcast_bytes(self) -> int:
        """The session's spark.sql.autoBroadcastJoinThreshold in bytes, read once per refresh."""
        if self._broadcast_bytes is None:
            try:
                value = self.conn.setting(BROADCAST_THRESHOLD)
            except Exception:  # noqa: BLE001 - a server that does not answer settings: the default
                value = None
            parsed = byte_size(value) if value is not None else None
            self._broadcast_bytes = BROADCAST_BYTES if parsed is None else parsed
        return self._broadcast_bytes

    def keyed_snapshot(
        self, relation: str, version: str, column: str, changed_relation: str, changed_column: str, more: tuple = ()
    ):
        """`relation` at `version`, only the files whose statistics of `column` can hold a value
        that `changed_relation`'s change has in `changed_column` (Delta keeps min and max per file
        and column; data laid out by key, as a fact table by its business key usually is, leaves
        few files to read), and for a change of few keys only the rows holding one of them (the
        caller selects from it on the equality `column = changed_column`, which no other row
        meets). `more`: further (relation, column) changes whose keys count too (then only by
        their key lists, not ranges). None when that rules out nothing or cannot be decided."""
        # Asked again with the same arguments (auto renders the delta SQL ahead: ReadBudget),
        # the same view: bound once.
        asked = (relation, version, column, changed_relation, changed_column, tuple(more))
        if asked not in self._keyed:
            self._keyed[asked] = self._keyed_snapshot(relation, version, column, changed_relation, changed_column, more)
        found = self._keyed[asked]
        return None if found is None else found.copy()

    def _keyed_snapshot(
        self, relation: str, version: str, column: str, changed_relation: str, changed_column: str, more: tuple
    ):
        changes = ((changed_relation, changed_column), *more)
        if relation not in self.pinned or any(r not in self.pinned for r, _ in changes):
            return None  # (a recursion's working table is no source)
        keys = self._change_keys(changed_relation, changed_column)
        if more:
            keys = change_keys.union([keys, *(self._change_keys(r, c) for r, c in more)])
            if keys is None:
                return None
        ranges = None if keys is not None else self._change_ranges(changed_relation, changed_column)
        if keys is None and ranges is None:
            return None
        src = self.pinned[relation]
        number = self._version_number(relation, version)
        if number is None:
            return None
        table = self._table_at(relation, version, number)
        if keys is not None:
            files = delta_tables.files_meeting_keys(table, src.path, column, keys)
        else:
            files = delta_tables.files_meeting_ranges(table, src.path, column, ranges or [])
        every = delta_tables.file_paths(table, src.path)
        schema = delta_tables.arrow_schema(table)
        row_filter = change_keys.key_filter(column, keys, schema) if keys is not None else None
        narrowed = files is not None and len(files) < len(every)
        if not narrowed and row_filter is None:
            return None
        kept = files if files is not None and narrowed else every
        listed = pc.drop_null(keys) if row_filter is not None else None
        if (
            listed is not None
            and change_keys.read_with_arrow(len(listed), len(kept), len(every))
            and self._arrow_readable(relation, [column])
        ):
            # A few keys scattered over most files (a column the data is not laid out by): Spark
            # would scan those files whole, Parquet's statistics skipping nothing; Arrow's
            # filtered scan in the dbt process reads the key column, then only the row groups
            # that meet a key (the demo's region_stats: orders of a few moved customers).
            read = self._arrow_read(relation, version, table, kept, every, {column: listed})
            if read is not None:
                self.filtered_here += 1
                return keyed_rows(read)
        self.files_read += len(kept)
        self.files_skipped += len(every) - len(kept)
        name = self.view_name(f"s{self._index[relation]}_{version}_k{len(self.views)}")
        delta_tables.bind_files(self.conn, name, src.state, table, kept, self.columns.get(relation))
        view = exp.to_table(name)
        # (with a row filter, an upper bound: Parquet skips pages too)
        self.view_bytes[view.name] = delta_tables.bytes_of_files(delta_tables.add_actions(table), every, kept)
        if row_filter is None:
            return view
        self.page_filtered += 1
        return keyed_rows(sub(exp.select(exp.Star()).from_(view).where(row_filter), f"{name}_rows"))

    def rows_for_keys(self, relation: str, version: str, pairs: list, keys: exp.Expr) -> Optional[exp.Table]:
        """`relation` at `version`, only the rows whose source columns of `pairs` ((source
        column, key column) ...) can meet a row of `keys` (a computed relation of few rows),
        read with Arrow in the dbt process (key_reads.py) and served as a small view. None
        where that is not done: a remote or partitioned table, a source Spark broadcasts anyway,
        no integer or date key column, too many keys or rows. Asked again with the same keys,
        the same view."""
        if not self._arrow_readable(relation, [s for s, _ in pairs]):
            return None
        number = self._version_number(relation, version)
        if number is None:
            return None
        query = render(keys)
        cached = (relation, number, tuple(pairs), query)
        if cached not in self._key_reads:
            self._key_reads[cached] = self._read_for_keys(relation, version, number, pairs, keys, query)
        found = self._key_reads[cached]
        return None if found is None else found.copy()

    def _read_for_keys(self, relation: str, version: str, number: int, pairs: list, keys: exp.Expr, keys_sql: str):
        found = self._listed(keys, keys_sql, tuple(k for _, k in pairs))
        if found is None:
            return None
        src = self.pinned[relation]
        table = self._table_at(relation, version, number)
        values = {source: found[k] for source, k in pairs}
        every = delta_tables.file_paths(table, src.path)
        kept = set(every)
        for source, column_keys in values.items():
            if not column_keys.null_count:  # (statistics rule out files of NULLs, which a NULL key meets)
                meeting = delta_tables.files_meeting_keys(table, src.path, source, column_keys)
                kept &= set(every if meeting is None else meeting)
        read = self._arrow_read(relation, version, table, [f for f in every if f in kept], every, values)
        self.key_reads += read is not None
        return read

    def _arrow_readable(self, relation: str, columns: list) -> bool:
        """Can the dbt process read `relation`'s rows for keys of one of `columns` (key_reads.py)?
        Not a remote or partitioned table, nor a source Spark broadcasts anyway, and only on an
        integer or date column."""
        src = self.pinned.get(relation)
        if src is None or paths.is_uri(src.path) or src.state.partition_columns or not self.large_source(relation):
            return False
        return key_reads.filterable(src.state.arrow_schema, columns)

    def _arrow_read(self, relation: str, version: str, table, files: list, every: list, values: dict):
        """The rows of `files` (of `every` file of `table`) meeting `values` ({source column: key
        values}), read with Arrow and served as a small view; None past key_reads.MAX_ROWS."""
        src = self.pinned[relation]
        schema = delta_tables.schema_at(src.state, table)
        columns = self.columns.get(relation) or list(schema.names)
        try:
            rows = key_reads.read([paths.local(f) for f in files], schema, list(columns), values)
        except pa.ArrowException:
            return None  # (a value Arrow cannot take in the column's type: Spark reads the source)
        if rows is None:
            return None
        name = self.view_name(f"s{self._index[relation]}_{version}_a{len(self.views)}")
        self.conn.view_of_arrow(name, rows)
        self._arrow_views[name.lower()] = rows
        self.files_read += len(files)
        self.files_skipped += len(every) - len(files)
        self.view_bytes[name] = delta_tables.bytes_of_files(delta_tables.add_actions(table), every, files)
        return exp.to_table(name)

    def _listed(self, keys: exp.Expr, keys_sql: str, key_columns: tuple) -> Optional[dict]:
        """{key column: values} holding every value of `keys`' `key_columns` (a superset is
        enough: the restriction is applied exactly on top), None past MAX_KEYS. Keys copied from
        rows this process holds come from them; others cost a Spark job. `keys_sql` is `keys`
        rendered (the same keys restrict both versions of a source: listed once)."""
        cached = (keys_sql, key_columns)
        if cached not in self._listed_keys:
            found = key_lineage.held_values(keys, key_columns, self._arrow_views, MAX_KEYS)
            if found is None:
                listed = exp.select(*[exp.column(k) for k in key_columns]).distinct()
                rows = self.conn.arrow(render(listed.from_(sub(keys.copy(), "__dvm_keys")).limit(MAX_KEYS + 1)))
                found = {k: rows.column(k) for k in key_columns} if rows.num_rows <= MAX_KEYS else None
            self._listed_keys[cached] = found
        return self._listed_keys[cached]

    def scan_settings(self):
        """The session settings the bound reads need while a query over them runs: Parquet
        receives the key lists of key-restricted reads (runtime/refresh/scan_settings.py). The
        dictionary filter needs no setting here: every file read carries it off as a read option."""
        if not self.page_filtered:
            return contextlib.nullcontext()
        return scan_settings.at_least(self.conn, scan_settings.IN_FILTER_THRESHOLD, PAGE_FILTER_KEYS)

    def _change_keys(self, relation: str, column: str):
        """The distinct values of `column` in `relation`'s change (an Arrow array), or None when
        there are too many for statistics to rule out files. A change read in the driver has
        them at hand; a larger one read by Spark costs one small job for its distinct keys."""
        if (relation, column) in self._keys:
            return self._keys[(relation, column)]
        keys = None
        held = self.named(f"s{self._index[relation]}_chg").lower()
        if held in self._arrow_views:
            if column in self._arrow_views[held].column_names:
                found = key_lineage.held_values(exp.to_table(held), (column,), self._arrow_views, MAX_KEYS)
                keys = None if found is None else found[column]
        elif (
            self.change_counts.get(relation, 0) <= SMALL_DELTA_ROWS
            and f"s{self._index[relation]}_chg" in self.views_by_key
        ):
            view = self.views_by_key[f"s{self._index[relation]}_chg"]
            if column in self.change_columns.get(relation, []):
                query = exp.select(exp.column(column, quoted=True)).distinct().from_(view.copy()).limit(MAX_KEYS + 1)
                found = self.conn.arrow(render(query))
                keys = found.column(0) if found.num_rows <= MAX_KEYS else None
        self._keys[(relation, column)] = keys
        return keys

    def _change_ranges(self, relation: str, column: str):
        """[min, max] ranges covering every non-null value of `column` in `relation`'s change as
        Spark holds it (one small job), for a change whose distinct keys were not fetched; None
        for a change not in Spark or a column that is not an integer or a date."""
        if (relation, column) in self._ranges:
            return self._ranges[(relation, column)]
        ranges = None
        view = self.views_by_key.get(f"s{self._index[relation]}_chg")
        schema = self.pinned[relation].state.arrow_schema
        if view is not None and column in self.change_columns.get(relation, []) and column in schema.names:
            kind = schema.field(column).type
            if pa.types.is_integer(kind) or pa.types.is_date(kind):
                found = self.conn.arrow(render(change_keys.ranges_query(view, column, pa.types.is_date(kind))))
                ranges = list(zip(found.column(0).to_pylist(), found.column(1).to_pylist()))
        self._ranges[(relation, column)] = ranges
        return ranges


_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def byte_size(text: str) -> Optional[int]:
    """A Spark byte setting's value in bytes ("10485760b", "20MB", "1g", "-1"), as Spark reads
    one without a unit (bytes); None when it is not one."""
    found = re.fullmatch(r"\s*(-?\d+)\s*([kmgtp]?)b?\s*", str(text).lower())
    if found is None:
        return None
    return int(found.group(1)) * _BYTE_UNITS[found.group(2)]
