"""Publishing a refresh: the catalog views over the stored result and over each source.

Order, and what a crash at each step leaves:
1. the generation directory of the version is made (an unused directory; removed later);
2. the view is altered to read it (one catalog update: readers see the old or the new text);
3. the marker records what the view shows.
A refresh that finds its sources unchanged still compares the markers with the newest versions,
so a crash anywhere after the storage commit is repaired by the next run, whatever the
sources did meanwhile. Views never move back to an older version than their marker records:
steps 1-3 run under one lock per view in the process (dbt's threads refresh models that share
a source), so a refresh that pinned an older version reads the marker a newer one wrote.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
from typing import Callable, Iterator, Optional

import pyarrow as pa
from sqlglot import exp

from python_helpers.errors import PublishLockHeld
from python_helpers.runtime import paths
from python_helpers.runtime.catalog import comments as view_comments
from python_helpers.runtime.catalog import file_queries
from python_helpers.runtime.catalog import views as catalog_views
from python_helpers.runtime.catalog.views import Catalog
from python_helpers.runtime.connections.base import Connection, as_connection
from python_helpers.runtime.delta import locations
from python_helpers.runtime.delta.embedded import generations as published_files
from python_helpers.runtime.delta.embedded import tables as delta_tables
from python_helpers.runtime.refresh import steps
from python_helpers.runtime.refresh.view_inlining import is_stored_table
from python_helpers.runtime.spark_types import spark_type_strings

Log = Callable[[str, str], None]


_LOCKS: dict = {}
_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def _view_lock(root: str, catalog: str, model: str) -> Iterator[None]:
    """Serialize marker read, view update and marker write of one view: among this process's
    threads, and among processes that share the storage (dbt jobs on one warehouse)."""
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault((catalog, root), threading.Lock())
    with lock, _process_lock(root, model):
        yield


LOCK_FILE = ".publish.lock"
# A publish holds the lock for a few catalog statements; a holder that has not let go after this
# long is hung (a dead one's lock the OS releases at once), and waiting longer helps nobody.
LOCK_WAIT_SECONDS = 600.0


@contextlib.contextmanager
def _process_lock(root: str, model: str, wait_seconds: Optional[float] = None) -> Iterator[None]:
    """An exclusive flock on a file in the view's published root, held by one process at a time
    (released by the OS when a holder dies). On storage without one (an object store's URI, a
    directory this process may not write) only the in-process lock holds: docs/dbt-usage.md,
    Guarantees. Raises PublishLockHeld when another process holds it past `wait_seconds`."""
    handle = None
    if not paths.is_uri(root):
        try:
            os.makedirs(paths.local(root), exist_ok=True)
            handle = open(os.path.join(paths.local(root), LOCK_FILE), "a+")
        except OSError:
            handle = None
    if handle is not None:
        try:
            _wait_for(handle, root, model, LOCK_WAIT_SECONDS if wait_seconds is None else wait_seconds)
        except BaseException:
            handle.close()
            raise
    try:
        yield
    finally:
        if handle is not None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            handle.close()


def _wait_for(handle, root: str, model: str, wait_seconds: float) -> None:
    deadline = time.monotonic() + wait_seconds
    pause = 0.01
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise PublishLockHeld(
                    model,
                    f"another process has held the publishing lock {os.path.join(root, LOCK_FILE)} for more "
                    f"than {wait_seconds:.0f} s; the stored result is committed, its views are not moved yet",
                    "find the dbt process that hangs (it holds the lock file open) and stop it, then run again",
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.5)


def _schema_hash(spark_types: dict) -> str:
    return hashlib.md5(json.dumps(spark_types, sort_keys=True).encode()).hexdigest()[:16]


def _newer(marker: Optional[dict], table_id: str, version: int) -> bool:
    """The marker already shows `version` of this table, or a later one."""
    return marker is not None and marker.get("table_id") == table_id and marker.get("version", -1) >= version


def _version_files(table, table_path: str) -> tuple[list, list]:
    """(files, partition values per file) of a Delta version, as the log lists them."""
    actions = delta_tables.add_actions(table)
    files = delta_tables.file_paths(table, table_path)
    columns = [c for c in actions.column_names if c.startswith("partition.")]
    if not columns:
        return files, [() for _ in files]
    values = [actions.column(c).to_pylist() for c in columns]
    names = [c[len("partition.") :] for c in columns]
    partitions = [
        tuple(sorted((n, None if v is None else _log_string(v)) for n, v in zip(names, row))) for row in zip(*values)
    ]
    return files, partitions


def _log_string(value) -> str:
    """A partition value as the log writes it (delta-rs hands back typed values)."""
    import datetime

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(value)


def _shows(conn: Connection, schema: str, name: str, marker: dict, catalog: Optional[Catalog] = None) -> bool:
    # What `catalog` looked up for several names at once counts as dbt's relation cache does: a
    # text showing the marker's generation is enough; any other answer is asked again, now.
    found = catalog.seen.get((schema.lower(), name.lower())) if catalog is not None else None
    hints = {(schema.lower(), name.lower()): found.text} if found is not None and found.text is not None else None
    return _all_shown(conn, [(schema, name, marker.get("generation"))], hints)


def _all_shown(conn: Connection, expected: list, hints: Optional[dict] = None) -> bool:
    """Does the catalog's view `schema.name` read the generation the marker names, for each
    (schema, name, generation) of `expected`? The markers live in storage and the views in the
    metastore: a metastore restored from a backup holds older view texts than the markers say,
    over generations that may be pruned since. What this process published or read already, and
    what `hints` ({(schema, name): text} as dbt's relation cache read it at the start of the run)
    shows, asks the catalog nothing; the rest is read in one statement per schema."""
    pending: dict = {}
    for schema, name, generation in expected:
        if catalog_views.verified(conn, schema, name, generation):
            continue
        hint = (hints or {}).get((schema.lower(), name.lower()))
        if hint is not None and (generation is None or generation in hint):
            catalog_views.note_verified(conn, schema, name, generation)
            continue
        pending.setdefault(schema, []).append((name, generation))
    catalog = Catalog(conn)
    for schema, items in pending.items():
        texts = catalog.view_texts(schema, [name for name, _ in items])
        for name, generation in items:
            text = texts.get(name)
            if text is None or (generation is not None and generation not in text):
                return False
            catalog_views.note_verified(conn, schema, name, generation)
    return True


def stream_table_marker(spark, target: str) -> Optional[dict]:
    return published_files.read_marker(
        published_files.stream_root(target), catalog_views.catalog_key(as_connection(spark))
    )


def publish_stream_table(
    conn: Connection,
    schema: str,
    name: str,
    model: str,
    target: str,
    view_sql: Callable,
    take_over: bool = False,
    retention_seconds: Optional[float] = None,
    docs: Optional[dict] = None,
) -> None:
    """Point the view `schema.name` at the newest version of the stored result (with the column
    comments of `docs`, dbt's persisted descriptions: runtime/catalog/comments.py)."""
    root = published_files.stream_root(target)
    catalog = catalog_views.catalog_key(conn)
    with _view_lock(root, catalog, model):
        _publish_stream_table(conn, schema, name, model, target, view_sql, take_over, retention_seconds, docs)


def _publish_stream_table(conn, schema, name, model, target, view_sql, take_over, retention_seconds, docs) -> None:
    stored = delta_tables.table_at(target)  # read under the lock: the newest version now
    arrow = delta_tables.arrow_schema(stored)
    types = spark_type_strings(arrow)
    version, table_id = stored.version(), str(stored.metadata().id)
    root = published_files.stream_root(target)
    catalog = catalog_views.catalog_key(conn)
    marker = published_files.read_marker(root, catalog)
    if marker is not None and _newer(marker, table_id, version + 1) and _shows(conn, schema, name, marker):
        return  # a later refresh published a newer version already
    files = delta_tables.file_paths(stored, target)
    gen = published_files.link_generation(root, table_id, version, files) if files else None
    steps.reached("stream_generation_linked")
    relation: exp.Expr
    if gen is not None:
        relation = file_queries.directory_relation(gen)
    else:
        relation = file_queries.files_relation(target, files, types)
    query = view_comments.with_column_docs(conn, schema, name, view_sql(relation, types), docs)
    Catalog(conn).publish_view(
        schema,
        name,
        query,
        catalog_views.STREAM_TABLE,
        model,
        take_over=take_over,
        published_before=marker is not None and not marker.get("skipped"),
    )
    steps.reached("stream_view_altered")
    published_files.write_marker(
        root,
        {
            "table_id": table_id,
            "version": version,
            "schema": _schema_hash(types),
            "generation": paths.basename(gen) if gen else None,
        },
        catalog,
    )
    published_files.prune(root, retention_seconds=retention_seconds)


def source_schema_dir(conn: Connection, relation: str) -> str:
    return locations.schema_dir(conn, relation.split(".")[-2])


def publish_source(
    conn: Connection,
    relation: str,
    src,
    model: str,
    log: Log,
    retention_seconds: Optional[float] = None,
    looked_up: Optional[Catalog] = None,
) -> None:
    """The view `schema.table` over a source at its pinned version (never moved back).
    `looked_up`: a Catalog that described this view with the refresh's other sources."""
    schema, name = relation.split(".")[-2:]
    root = published_files.source_root(source_schema_dir(conn, relation), name)
    catalog = catalog_views.catalog_key(conn)
    with _view_lock(root, catalog, model):
        _publish_source(conn, relation, schema, name, root, catalog, src, model, log, retention_seconds, looked_up)


def _publish_source(conn, relation, schema, name, root, catalog, src, model, log, retention_seconds, looked_up) -> None:
    marker = published_files.read_marker(root, catalog)
    state = src.state
    views = looked_up if looked_up is not None else Catalog(conn)
    if (
        marker is not None
        and _newer(marker, state.table_id, state.version)
        and _shows(conn, schema, name, marker, views)
    ):
        return  # shown already, or a newer version is: a source view never moves back
    query, gen = _source_query(root, src)
    steps.reached("source_generation_linked")
    published = views.publish_view(schema, name, query, catalog_views.SOURCE, model)
    steps.reached("source_view_altered")
    if not published:
        # Said once per table (a warning), then at info level while the marker remembers it.
        seen = marker is not None and marker.get("skipped") and marker.get("table_id") == state.table_id
        log(
            "info" if seen else "warn",
            f"{model}: {relation} is a catalog object dbt-spark-stream did not create; it is left as it "
            f"is, so other models and queries reading {relation} read that object, not the Delta table at "
            f"{src.path} that this stream table reads (drop or rename it to have the source published there)",
        )
        published_files.write_marker(
            root, {"table_id": state.table_id, "version": state.version, "skipped": True}, catalog
        )
        return
    published_files.write_marker(
        root,
        {"table_id": state.table_id, "version": state.version, "generation": paths.basename(gen) if gen else None},
        catalog,
    )
    published_files.prune(root, retention_seconds=retention_seconds)


def _source_query(root: str, src) -> tuple:
    """(the view's query, its generation directory or None) for a source at its pinned version;
    links the generation when none is there yet (reused by every later call)."""
    state = src.state
    table = delta_tables.table_at(src.path, state.version)
    files, partitions = _version_files(table, src.path)
    types = src.spark_types
    parts = list(state.partition_columns)
    if not files:
        return file_queries.empty_query(types), None
    data_schema = pa.schema([f for f in state.arrow_schema if f.name not in parts])
    part_schema = pa.schema([state.arrow_schema.field(p) for p in parts])
    gen = published_files.link_generation(
        root, state.table_id, state.version, files, partitions if parts else None, data_schema, part_schema
    )
    if gen is not None:
        return file_queries.generation_query(gen, types, parts), gen
    return file_queries.files_query(src.path, files, types, parts, partitions), None


def check_publishable(conn: Connection, request, plan) -> None:
    """Before the storage commit: can every source view this refresh moves be written? Where no
    generation directory can be made (an object store, a mount without hard links) a view names
    its files one by one, and a long list does not fit in the metastore; found after the commit,
    the stream table would have moved while its sources' views could not follow. The generations
    linked here are the ones publishing then reuses."""
    from python_helpers.dvm.sqlgen import render

    catalog = catalog_views.catalog_key(conn)
    for relation, src in plan.pinned.items():
        if is_stored_table(relation):
            continue
        schema, name = relation.split(".")[-2:]
        root = published_files.source_root(source_schema_dir(conn, relation), name)
        marker = published_files.read_marker(root, catalog)
        if marker is not None and marker.get("table_id") == src.state.table_id:
            if marker.get("skipped") or _newer(marker, src.state.table_id, src.state.version):
                continue  # a user's object there (not written), or the view shows it already
        query, gen = _source_query(root, src)
        if gen is None:
            catalog_views.check_view_text(request.model, f"{schema}.{name}", render(query))


def publish(
    conn: Connection,
    request,
    plan,
    target: str,
    view_sql: Callable,
    log: Log,
    retention_seconds: Optional[float] = None,
) -> None:
    # The stream table's own view first: a source view that then fails to publish leaves only
    # that view behind (the next run publishes it again), never the stream table's.
    publish_stream_table(
        conn,
        request.schema,
        request.identifier,
        request.model,
        target,
        view_sql,
        take_over=request.take_over_relation,
        retention_seconds=retention_seconds,
        docs=request.docs,
    )
    catalog = catalog_views.catalog_key(conn)
    sources_dirs = {}
    looked_up = _look_up_sources(conn, [r for r in plan.pinned if not is_stored_table(r)])
    for relation, src in plan.pinned.items():
        if not is_stored_table(relation):  # an upstream stream table's stored table has its own view
            publish_source(conn, relation, src, request.model, log, retention_seconds, looked_up)
            schema, name = relation.split(".")[-2:]
            root = published_files.source_root(source_schema_dir(conn, relation), name)
            published_files.note_read(root, catalog)
            sources_dirs[schema] = paths.dirname(root)
    orphan_hours = max(float(getattr(request, "retention_hours", 0) or 0), DEFAULT_ORPHAN_HOURS)
    try:
        sweep_sources(conn, catalog, sources_dirs, orphan_hours, request.model, log)
    except Exception as err:  # noqa: BLE001 - housekeeping never fails a published refresh
        log("warn", f"{request.model}: sweeping unread source views failed ({type(err).__name__}: {err})")


def _look_up_sources(conn: Connection, relations: list) -> Catalog:
    """A Catalog holding what the catalog says of the source views this process has not
    published yet: one `SHOW TABLE EXTENDED` per schema, where each source asked alone before
    (the 6 M-row fact's three sources: three statements, each a round trip over Spark Connect).
    Read after the stream table's view is published and before the sources' locks are taken;
    each answer is used once, and DDL that fails on it looks the name up again."""
    looked_up = Catalog(conn)
    by_schema: dict = {}
    for relation in relations:
        schema, name = relation.split(".")[-2:]
        if not catalog_views.known(conn, schema, name):
            by_schema.setdefault(schema, []).append(name)
    for schema, names in by_schema.items():
        if len(names) > 1:  # one name is looked up where it is published, as before
            looked_up.remember(schema, names)
    return looked_up


# A source view no stream table has read for this long (or the refreshing model's retention_hours,
# when longer) is dropped with its generations: its readers were dropped, or have not run for
# longer than their own sources' files are kept.
DEFAULT_ORPHAN_HOURS = 168.0
SWEEP_EVERY_SECONDS = 3600.0
SWEPT_PREFIX = ".swept-"


def sweep_sources(
    conn: Connection,
    catalog: str,
    sources_dirs: dict,
    orphan_hours: float,
    model: str,
    log: Log,
    now: Optional[float] = None,
) -> list:
    """Drop the source views published in `catalog` from `sources_dirs` ({schema: the directory
    of its sources' published roots}) that no stream table read for `orphan_hours`, with their
    generations (which pin the sources' old files against their VACUUM): only views this project
    made (role property), each under its publishing lock, each schema at most hourly. Returns the
    views swept."""
    now = time.time() if now is None else now
    swept = []
    for schema, sources_dir in sorted(sources_dirs.items()):
        sources = paths.local(sources_dir)
        if paths.is_uri(sources) or not os.path.isdir(sources):
            continue
        stamp = os.path.join(sources, f"{SWEPT_PREFIX}{catalog}")
        if os.path.exists(stamp) and now - os.stat(stamp).st_mtime < SWEEP_EVERY_SECONDS:
            continue
        with open(stamp, "a"):
            pass
        os.utime(stamp, (now, now))
        for name in sorted(os.listdir(sources)):
            root = os.path.join(sources, name)
            if name.startswith(".") or not os.path.isdir(root):
                continue
            if not _unread(root, catalog, orphan_hours, now):
                continue
            with _view_lock(root, catalog, model):
                if not _unread(root, catalog, orphan_hours, now):
                    continue  # read while we waited for the lock
                Catalog(conn).drop_own_view(schema, name, catalog_views.SOURCE)
                published_files.forget_catalog(root, catalog)
                swept.append(f"{schema}.{name}")
    if swept:
        log(
            "info",
            f"{model}: dropped the source views {', '.join(swept)} and their published files: no stream table "
            f"has read them for {orphan_hours:g} hours (a stream table that reads one again publishes it again)",
        )
    return swept


def _unread(root: str, catalog: str, orphan_hours: float, now: float) -> bool:
    """Published in `catalog` (a marker or a read stamp) and not read for `orphan_hours`."""
    last = published_files.last_read(root, catalog)
    return last > 0 and now - last > orphan_hours * 3600


def up_to_date(conn: Connection, request, plan, target: str) -> bool:
    """Do the views show the newest stored version and the pinned source versions?
    (A crash after the storage commit leaves them behind; then the refresh publishes again.)"""
    stored = delta_tables.open_table(target)
    if stored is None:
        return False
    own = stream_table_marker(conn, target)
    if own is None or not _newer(own, str(stored.metadata().id), stored.version()):
        return False
    key = catalog_views.catalog_key(conn)
    expected = []
    for relation, src in plan.pinned.items():
        if is_stored_table(relation):
            continue
        schema, name = relation.split(".")[-2:]
        root = published_files.source_root(source_schema_dir(conn, relation), name)
        published_files.note_read(root, key)  # read now, even when nothing is published
        marker = published_files.read_marker(root, key)
        if marker is None or not _newer(marker, src.state.table_id, src.state.version):
            return False
        if not marker.get("skipped"):
            expected.append((schema, name, marker.get("generation")))
    expected.append((request.schema, request.identifier, own.get("generation")))
    hint = catalog_views.view_text_of(request.catalog_information or "")
    hints = {(request.schema.lower(), request.identifier.lower()): hint} if hint is not None else {}
    if not _all_shown(conn, expected, hints):
        catalog_views.forget(conn)
        return False
    # Column descriptions changed (or were never published): publish the view again.
    return view_comments.columns_current(conn, request.schema, request.identifier, request.docs)
