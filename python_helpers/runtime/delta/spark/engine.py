"""The spark Delta engine: Delta Lake SQL inside Spark, for a Spark with Delta Lake loaded.

Everything goes through SQL on the refresh's own session (a clone of dbt's: Connection.private),
so it works over an in-process session, Spark Connect and a Thrift server alike, and nothing of
a result passes through the dbt process:
* sources are read with `table_changes_by_path` and `VERSION AS OF` (deletion vectors, column
  mapping and row tracking are Delta's business then);
* the stored result is a Delta table (change feed and deletion vectors on) registered in the
  catalog as `<schema>.__dvm_stored__<model>`; the model's name is a plain view over it that
  shows the model's columns (the stored rows carry bookkeeping columns: row id, counts,
  aggregate state) and needs no change when the table moves on;
* a full refresh is `CREATE OR REPLACE TABLE ... AS SELECT`; a differential one computes its
  merge rows once and writes them in one commit, `INSERT INTO ... REPLACE WHERE` over their row
  ids when there are few (no join to the stored rows), else `MERGE INTO`; the executors write;
* each commit carries the refresh metadata as its `userMetadata` and an application
  transaction (`txnAppId`/`txnVersion`) in the same commit: Delta's optimistic concurrency
  makes a rival refresh's commit fail, and the session settings behind both are the refresh's
  own (a cloned session), never seen by dbt's other threads.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any, Callable, Iterator, Optional

import pyarrow as pa

from python_helpers.dvm.merge_actions import ACTION, DELETE
from python_helpers.runtime.catalog.views import quote
from python_helpers.runtime.connections.base import Connection
from python_helpers.runtime.delta import base, locations
from python_helpers.runtime.delta import metadata as metadata_format
from python_helpers.runtime.delta.base import ConcurrentCommit, Log, Merged, TableState
from python_helpers.runtime.delta.spark import identity, publishing, sizes
from python_helpers.runtime.delta.spark import sql as delta_sql
from python_helpers.runtime.delta.spark.bindings import SparkBindings
from python_helpers.runtime.delta.spark.publishing import STORED_PREFIX
from python_helpers.runtime.refresh import steps
from python_helpers.runtime.spark_types import arrow_type

VACUUM_EVERY = 20  # commits between two vacuums of a stored result
COMPACT_AFTER_FILES = 48  # OPTIMIZE the stored result once it has more files than this
# A differential commit whose merge rows have few keys replaces them by their row ids
# (sql.replace_keys: `INSERT INTO ... REPLACE WHERE row_id IN (<ids>)`) instead of a MERGE. Delta's
# MERGE joins its rows to the whole stored result, every column, shuffled: about 3 s and then
# 30-75 s per GB of stored result (5.0 s for 29 k keys into the 70 MB SF 10 rollup, 129 s for
# 120 k into the 1.7 GB SF 10 fact). The replace scans the row-id column and marks rows (deletion
# vectors), and pays about 80 us per key (the list in the statement, in Delta's planning and in
# the commit: 36 bytes a key): 3.75 s for those 29 k keys, 24.7 s for those 120 k, with Delta's
# per-row check off (sql.REPLACE_WHERE_CONSTRAINT_CHECK). So a commit replaces up to REPLACE_KEYS_MIN keys
# and one more per STORED_BYTES_PER_KEY of stored result (both below the break-even), never more
# than REPLACE_KEYS_MAX (a 4.7 MB commit, which every DESCRIBE HISTORY of the stored result then
# reads: 0.7 s for 32 commits of 4.3 MB against 0.16 s).
REPLACE_KEYS_MIN = 16_384
STORED_BYTES_PER_KEY = 4_096
REPLACE_KEYS_MAX = 131_072
# A change of more rows than this (all moved sources) goes straight into a MERGE: its merge rows
# would rarely have few enough keys to pay for computing them first. An update is two change rows
# (before and after), and a join's other side adds its own: 1,000 scattered lineitem updates with
# their 250 orders are 2,500 change rows and about 1,000 keys of the fact over them; TPC-H's
# refresh functions at SF 1 15,000 change rows and about 12,000 keys, at SF 10 about 150,000
# change rows and 120,000 keys.
SMALL_CHANGE_ROWS = 2 * REPLACE_KEYS_MAX
RECENT_COMMITS = 16  # commits read when a source is pinned (commit_digest finds the consumed one there)
# A source with more commits than that since the one its identity was seen at (frequent small
# writes between two runs) has its history read back to that commit, up to this many: one
# DESCRIBE HISTORY proves the identity where DESCRIBE DETAIL would compute the table's state.
REACH_BACK_COMMITS = 512
_CONCURRENT = ("Concurrent", "DELTA_CONCURRENT", "ProtocolChangedException", "MetadataChangedException")


class SparkDelta:
    name = "spark"
    keeps_row_ids = True

    def __init__(self, conn: Connection):
        self.conn = conn
        # Within one refresh (an engine lives as long as one): DESCRIBE DETAIL answers by location,
        # reused where a stale answer cannot matter (fresh=True elsewhere), and the whole history
        # of a source for commit digests (a commit at a version does not change within a log; a
        # replaced log is what the digest detects from one refresh to the next).
        self._details: dict[str, Optional[dict]] = {}
        self._histories: dict[str, list] = {}
        # Sources: is_delta's DESCRIBE HISTORY (taken by the pin that follows) and each pinned
        # source's id and properties (identity.py: DESCRIBE DETAIL only where the log moved on
        # in a way that may change them).
        self._recent: dict[str, Optional[list]] = {}
        self._identities: dict[str, identity.Identity] = {}
        self._bindings: Optional[SparkBindings] = None  # this refresh's (the stored table's columns)
        self._pinned_versions: dict[str, int] = {}  # the newest version each source was pinned at
        self._newest: Optional[dict] = None  # the commit this refresh made (its metrics, version)
        self._wrote_full = False  # a full write may change the columns the views show

    def close(self) -> None:
        self.conn.release()

    # Where things are.
    def stored_location(self, schema: str, identifier: str) -> str:
        return locations.storage_path(self.conn, schema, identifier)

    def source_location(self, relation: str, overrides: dict) -> str:
        return locations.source_path(self.conn, relation, overrides)

    def _detail(self, location: str, fresh: bool = False) -> Optional[dict]:
        """DESCRIBE DETAIL of the Delta table at `location` (None: not one); the answer this
        refresh already had unless `fresh`."""
        if not fresh and location in self._details:
            return self._details[location]
        try:
            records = self.conn.records(delta_sql.detail(location))
        except Exception:  # noqa: BLE001 - not a Delta table (or nothing there)
            records = []
        detail = records[0] if records else None
        if detail is not None and str(detail.get("format", "delta")).lower() != "delta":
            detail = None
        self._details[location] = detail
        return detail

    def is_delta(self, location: str) -> bool:
        # DESCRIBE HISTORY fails where no Delta table is, without DESCRIBE DETAIL's jobs; the
        # answer is the newest commits table_state pins the source at next.
        if location not in self._recent:
            self._recent[location] = self._history_or_none(location, RECENT_COMMITS)
        return self._recent[location] is not None

    def stream_tables(self, schema: str) -> list:
        rows = self.conn.rows(f"SHOW TABLES IN {quote(schema)} LIKE '{STORED_PREFIX}*'")
        return sorted(str(r[1])[len(STORED_PREFIX) :] for r in rows if str(r[1]).startswith(STORED_PREFIX))

    # Sources.
    def _history(self, location: str, limit: Optional[int]) -> list[dict]:
        return self.conn.records(delta_sql.history(location, limit))

    def _history_or_none(self, location: str, limit: Optional[int]) -> Optional[list[dict]]:
        """_history, or None where no Delta table is (DESCRIBE HISTORY fails there as DESCRIBE
        DETAIL does, without the Spark job DESCRIBE DETAIL runs to compute the table's size)."""
        try:
            return self._history(location, limit)
        except Exception:  # noqa: BLE001 - not a Delta table (or nothing there)
            return None

    def table_state(self, location: str, version: Optional[int] = None) -> Optional[TableState]:
        # The newest version is pinned with a fresh answer (the table's id must be the one of the
        # log the version comes from; is_delta's, read just before, counts as fresh once); a
        # given version reuses it.
        if version is None or location not in self._identities:
            recent = self._recent.pop(location, None) or self._history_or_none(location, RECENT_COMMITS)
            if not recent:
                return None
            recent = self._back_to_seen(location, recent)
            found = identity.of(location, recent, lambda: self._detail(location, fresh=True))
            if found is None:
                return None
            self._identities[location] = found
            # The newest commits, not only the newest one: commit_digest finds the version the
            # last refresh consumed among them (one DESCRIBE HISTORY per source, not two).
            newest = max(int(c["version"]) for c in recent)
            self._pinned_versions[location] = newest
            self._histories[location] = recent
            version = newest if version is None else version
        known = self._identities[location]
        columns = self.conn.output_columns(f"SELECT * FROM {delta_sql.at_version(location, version)}")
        # Every column nullable: a Thrift server cannot say which are NOT NULL (DESCRIBE QUERY has
        # no nullability), and a plan that never assumes NOT NULL is right either way, whichever
        # method the team's jobs refresh with.
        schema = pa.schema([pa.field(c.name, arrow_type(c.type), True) for c in columns])
        return TableState(
            path=location,
            version=int(version),
            table_id=known.table_id,
            cdf_enabled=str(known.properties.get(base.CDF_PROPERTY, "false")).lower() == "true",
            arrow_schema=schema,
            partition_columns=list(known.partition_columns),
            unreadable_features=[],
            spark_types={c.name: c.type for c in columns},
        )

    def _back_to_seen(self, location: str, recent: list) -> list:
        """`recent`, or the history back to the commit the source's identity was seen at when that
        is older than `recent` reaches (commit_digest then finds the consumed commit in it too)."""
        seen = identity.seen_version(location)
        versions = [int(c["version"]) for c in recent]
        if seen is None or seen >= min(versions) or max(versions) - seen >= REACH_BACK_COMMITS:
            return recent
        try:
            return self._history_back_to(location, max(versions), seen)
        except Exception:  # noqa: BLE001 - the log was replaced meanwhile: the pin reads it again
            return recent

    def _history_back_to(self, location: str, newest: int, version: int) -> list[dict]:
        """The commits from `version` to `newest` in one DESCRIBE HISTORY (its LIMIT counts back
        from the newest commit)."""
        return self._history(location, newest - int(version) + 1)

    def commit_digest(self, location: str, version: int) -> Optional[str]:
        history = self._histories.get(location) or []
        if not any(int(c["version"]) == int(version) for c in history):
            # The commits from `version` to the pinned one (a consumed version is near the newest):
            # DESCRIBE HISTORY without a limit reads every commit file the log still holds.
            pinned = self._pinned_versions.get(location)
            history = []
            if pinned is not None and pinned >= int(version):
                history = self._history_back_to(location, pinned, version)
            if not any(int(c["version"]) == int(version) for c in history):
                history = self._history(location, None)
            self._histories[location] = history
        commit = next((c for c in history if int(c["version"]) == int(version)), None)
        if commit is None:
            return None
        # Scalars only, as every binding returns them alike (a Thrift server prints the parameter
        # map as text): a digest must not change when the team's jobs use another method.
        return identity.digest(commit)

    def row_count(self, location: str, version: int) -> Optional[int]:
        # Delta answers a bare count(*) from the log's statistics (no scan).
        return int(self.conn.rows(f"SELECT count(*) FROM {delta_sql.at_version(location, version)}")[0][0])

    # One refresh's reads.
    def bindings(self, pinned: dict, old_versions: dict, columns: dict, model: str) -> base.Bindings:
        self._bindings = SparkBindings(self.conn, pinned, old_versions, columns, model, stored_bytes=self._stored_bytes)
        return self._bindings

    def _stored_bytes(self, target: str) -> int:
        """The stored result's size: from the commits read_metadata read (sizes.py), else from
        DESCRIBE DETAIL (a Spark job over the table's state)."""
        size = sizes.size_from_history(self._histories.get(target) or [])
        if size is None:
            size = int((self._detail(target) or {}).get("sizeInBytes") or 0)
        return size

    # The stored result.
    def refresh_commits(self, target: str) -> list:
        if self._detail(target, fresh=True) is None:
            return []
        return metadata_format.refresh_commits(
            (
                int(c["version"]),
                identity.millis(c.get("timestamp")),
                c.get("operation"),
                _ours(c.get("userMetadata")),
                c.get("operationMetrics"),
            )
            for c in self._history(target, None)
        )

    def read_metadata(self, target: str) -> Optional[dict]:
        for limit in (32, None):  # the newest commits nearly always hold it
            history = self._history_or_none(target, limit)
            if not history:
                return None
            self._histories[target] = history
            read_version = max(int(c["version"]) for c in history)
            found = metadata_format.newest_refresh(
                (
                    (
                        int(c["version"]),
                        identity.millis(c.get("timestamp")),
                        c.get("operation"),
                        _ours(c.get("userMetadata")),
                    )
                    for c in sorted(history, key=lambda c: -int(c["version"]))
                ),
                read_version,
            )
            if found is not None or limit is None or len(history) < limit:
                if found is not None:
                    identity.recall(found.get("offsets"))  # the sources as the last refresh found them
                return found
        return None

    def stored_version(self, target: str) -> Optional[int]:
        history = self._history_or_none(target, 1)
        return int(history[0]["version"]) if history else None

    @contextlib.contextmanager
    def _committing(
        self, target: str, metadata: dict, read_version: Optional[int], by_keys: bool = False
    ) -> Iterator[str]:
        """Run a commit of `metadata` against `read_version`: the session's commit settings
        around it, and afterwards proof that the newest commit is this one (Delta skips a write
        whose application transaction is not newer than the one it holds: a rival was first)."""
        token = uuid.uuid4().hex
        text = metadata_format.encode({**metadata, "commit_token": token})
        settings = {
            delta_sql.USER_METADATA: text,
            delta_sql.TXN_APP_ID: metadata_format.APP_ID,
            delta_sql.TXN_VERSION: str(0 if read_version is None else read_version + 1),
        }
        if by_keys:
            settings[delta_sql.REPLACE_WHERE_DATA_COLUMNS] = "true"
            settings[delta_sql.REPLACE_WHERE_CONSTRAINT_CHECK] = "false"
        for key, value in settings.items():
            self.conn.set_conf(key, value)
        try:
            yield token
        except Exception as err:  # noqa: BLE001 - a lost race is ConcurrentCommit, the rest as it is
            if any(mark in str(err) for mark in _CONCURRENT):
                raise ConcurrentCommit(str(err).splitlines()[0][:300]) from None
            raise
        finally:
            for key in settings:
                self.conn.set_conf(key, None)
        newest = self._history(target, 1)[0]
        if (_ours(newest.get("userMetadata")) or "").find(token) < 0:
            raise ConcurrentCommit(f"version {newest['version']} was committed by another writer first")
        self._newest = newest

    def write_full(
        self, target: str, sql: str, names: list, metadata: dict, read_version: Optional[int], phases: Any
    ) -> int:
        if read_version is None and self._detail(target, fresh=True) is not None:
            raise ConcurrentCommit("another refresh created the stored result meanwhile")
        with phases("write"):
            steps.reached("computed")
            with self._committing(target, metadata, read_version):
                self.conn.execute(delta_sql.replace_table(target, sql, names))
        self._wrote_full = True
        metrics = (self._newest or {}).get("operationMetrics") or {}
        return int(metrics.get("numOutputRows", 0) or 0)

    def _commit(self, target: str, statement: str, metadata: dict, read_version: int, by_keys: bool = False) -> None:
        """One differential commit (the kill drill's steps around it)."""
        steps.reached("merging")
        with self._committing(target, metadata, read_version, by_keys=by_keys):
            self.conn.execute(statement)
        steps.reached("committed")

    def looks_up_tuples(self, target: str, read_version: int) -> bool:
        return False  # its bags keep row ids (keeps_row_ids): one stored row per tuple

    def merge(
        self,
        target: str,
        sql: Optional[str],
        columns: list,
        match: list,
        metadata: dict,
        read_version: int,
        phases: Any,
        change_rows: Optional[int] = None,
        resolve: bool = False,
    ) -> Merged:
        assert not resolve, "the spark engine's bags keep row ids: their MERGE rows come whole"
        with phases("merge"):
            unchanged = metadata_format.with_inserts_only(metadata)  # an empty commit: the offsets alone
            if sql is None:
                self._commit(target, delta_sql.empty_append(target), unchanged, read_version)
                return Merged(0)
            if change_rows is None or change_rows > SMALL_CHANGE_ROWS:
                # Its merge rows would rarely have few enough keys to pay for computing them
                # first: one MERGE of the delta query.
                self._commit(target, delta_sql.merge(target, sql, columns, match), metadata, read_version)
                return _merged(self._newest)
            # A small change: its merge rows are computed once into the executors' storage and
            # their row ids read; few enough keys (_replace_keys_bound) replace their stored rows without
            # a join to the stored result (replace_keys), more go through one MERGE of those rows.
            rows_view = f"__dvm_{uuid.uuid4().hex[:12]}_merge_rows"
            try:
                self.conn.view_of_query(rows_view, sql, materialize=True)
                # Keys by the one column that matches them: the row id, or a keyed result's key of
                # one integer or string column (keeps_row_ids).
                key = match[0]
                keyed = self.conn.rows(
                    f"SELECT {quote(key)}, {quote(ACTION)} FROM {quote(rows_view)} LIMIT {REPLACE_KEYS_MAX + 1}"
                )
                # An INSERT matches columns by position: it names them in the stored table's order
                # (as this refresh's bindings read it); a table whose columns are not these takes
                # the MERGE, which matches by name.
                stored = self._bindings.stored_columns if self._bindings is not None else []
                by_keys = (
                    0 < len(keyed) <= self._replace_keys_bound(target, len(keyed))
                    and len(match) == 1
                    and all(delta_sql.listable(k) for k, _ in keyed)
                    and sorted(stored) == sorted(columns)
                )
                committed = metadata  # the statement's own metrics count what it did
                if not keyed:
                    statement, committed = delta_sql.empty_append(target), unchanged
                elif by_keys:
                    keys = [k for k, _ in keyed]
                    statement = delta_sql.replace_keys(target, rows_view, keys, stored, key)
                else:
                    statement = delta_sql.merge(target, f"SELECT * FROM {quote(rows_view)}", columns, match)
                self._commit(target, statement, committed, read_version, by_keys=by_keys)
            finally:
                self.conn.drop_view(rows_view)
        if not keyed:
            return Merged(0)
        if by_keys:
            deletes = sum(1 for _, action in keyed if action == DELETE)
            return _replaced(self._newest, upserts=len(keyed) - deletes, deletes=deletes)
        return _merged(self._newest)

    def _replace_keys_bound(self, target: str, keys: int) -> int:
        """How many keys a commit may replace by their row ids (REPLACE_KEYS_MIN..MAX); the stored
        result's size is asked only past the minimum."""
        if keys <= REPLACE_KEYS_MIN:
            return REPLACE_KEYS_MIN
        return min(REPLACE_KEYS_MAX, REPLACE_KEYS_MIN + self._stored_bytes(target) // STORED_BYTES_PER_KEY)

    def tidy(self, target: str, retention_hours: float, log: Log, model: str) -> bool:
        try:
            # Every VACUUM_EVERY-th version (known from this refresh's commit: no round trip).
            version = None if self._newest is None else int(self._newest["version"])
            if version is not None and version % VACUUM_EVERY != 0:
                return False
            history = self._history(target, VACUUM_EVERY)
            if len(history) < VACUUM_EVERY or any(str(c.get("operation", "")).startswith("VACUUM") for c in history):
                return False
            steps.reached("vacuuming")
            detail = self._detail(target, fresh=True) or {}
            if int(detail.get("numFiles") or 0) > COMPACT_AFTER_FILES:
                self.conn.execute(f"OPTIMIZE {delta_sql.by_path(target)}")
            listing = self.conn.conf(delta_sql.LISTING_PARALLELISM)  # the user's, put back after
            self.conn.set_conf(delta_sql.RETENTION_CHECK, "false")  # our own table, our retention
            self.conn.set_conf(delta_sql.LISTING_PARALLELISM, delta_sql.VACUUM_LISTING_TASKS)
            try:
                self.conn.execute(f"VACUUM {delta_sql.by_path(target)} RETAIN {float(retention_hours)} HOURS")
            finally:
                self.conn.set_conf(delta_sql.RETENTION_CHECK, None)
                self.conn.set_conf(delta_sql.LISTING_PARALLELISM, listing)
        except Exception as err:  # noqa: BLE001 - tidying is retried by a later refresh
            log(
                "warn",
                f"{model}: tidying the stored result failed ({str(err).splitlines()[0][:200]}); tried again later",
            )
            return False
        steps.reached("vacuumed")
        return True

    # What readers see (publishing.py).
    def publish(self, request: Any, plan: Any, target: str, view_sql: Callable, log: Log) -> None:
        if not self._wrote_full and self.up_to_date(request, plan, target):
            return  # a MERGE keeps the columns: the views over the table and the sources stand
        publishing.publish(self.conn, request, plan, target, view_sql, log)

    def check_publishable(self, request: Any, plan: Any) -> None:
        pass  # views over catalog Delta tables: no text grows with the data

    def up_to_date(self, request: Any, plan: Any, target: str) -> bool:
        return publishing.up_to_date(self.conn, request, plan)


def _merged(commit: Optional[dict]) -> Merged:
    """What a MERGE commit did, from its metrics."""
    metrics = (commit or {}).get("operationMetrics") or {}
    counts = {
        what: int(metrics.get(f"numTargetRows{what.title()}", 0) or 0) for what in ("inserted", "updated", "deleted")
    }
    return Merged(int(metrics.get("numSourceRows", 0) or 0), counts["inserted"], counts["updated"], counts["deleted"])


def _replaced(commit: Optional[dict], upserts: int, deletes: int) -> Merged:
    """What a replace_keys commit did, from its metrics (rows deleted) and the merge rows'
    actions. A delete is only computed for a stored key (stored_result keeps no other), so the
    stored rows it deleted beyond those were the old rows of updated keys."""
    metrics = (commit or {}).get("operationMetrics") or {}
    removed = int(metrics.get("numDeletedRows", 0) or 0)
    updated = max(min(removed - deletes, upserts), 0)
    return Merged(upserts + deletes, upserts - updated, updated, deletes)


def _ours(user_metadata: Any) -> Optional[str]:
    """The commit's userMetadata when it is a refresh's (our JSON), else None."""
    if not user_metadata:
        return None
    text = str(user_metadata)
    try:
        return text if isinstance(json.loads(text), dict) and "offsets" in json.loads(text) else None
    except ValueError:
        return None
