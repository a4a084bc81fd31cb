"""A bag's change that takes rows, applied by rewriting the touched files with Arrow (embedded engine).

A bag stored as its rows come (dvm/bag_result.py) meets its tuples by their columns. When a
change takes rows from some tuples, delta-rs' MERGE scans and joins every stored row to meet
them and rewrites every file holding one: on the demo's 11 M-row bag under 42 scattered change
rows, the lookup of the losing tuples (bag_lookup.py) plus the MERGE took 2.3 + 8.3 s on a slow
day, where this module's one pass took a third of it. Here, in the dbt process:

1. each stored file is read once, whole, and its candidate rows found (each column's value
   among the losing tuples' values of that column, as bag_lookup.losing_filter), with the file
   they are in; the files holding one are kept in memory up to HELD_BYTES;
2. their stored counts decide what each tuple becomes (bag_lookup.actions: the same rules, and
   StoredRowsMissing when the change takes more than is stored);
3. every file holding a row of a losing tuple is written again without that tuple's rows (NULL
   meets NULL), and with the last of them one row per losing tuple that keeps rows (its new
   count) and one per gaining tuple, into `merge-<id>/` of the table, two files at a time;
4. one commit removes the touched files and adds the new ones with the offsets, at the version
   the refresh read (storage.commit_rewrite: a rival's commit since fails it, nothing applied).

What it costs elsewhere: like the executors' rewrite (executor_merge.py) the commit carries no
`cdc` files, so a stream table reading this bag reads the touched files' rows whole, as deletes
and inserts that cancel out except for the change (change_feed.py consolidates them). Past
`MAX_CANDIDATES` candidate rows (a losing tuple's columns each matching many stored rows) the
caller keeps delta-rs' MERGE, whose join does not pass candidates through Python; so it does
for a stored result on an object store (this module writes local files only).

`plan` is pure (Arrow in, what to write out); `rewrite` reads, writes and commits.
"""

from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from python_helpers.dvm.merge_actions import ACTION, DELETE, INSERT, UPSERT
from python_helpers.dvm.stored_reads import COUNT
from python_helpers.dvm.tree import WEIGHT
from python_helpers.runtime import paths
from python_helpers.runtime.connections import files
from python_helpers.runtime.delta.base import ConcurrentCommit, Merged
from python_helpers.runtime.delta.embedded import bag_lookup, storage, tables
from python_helpers.runtime.delta.embedded.executor_merge import DIRECTORY_PREFIX, commit_touched

# Candidate rows (stored rows whose every column holds a value some losing tuple has) beyond
# which the caller keeps delta-rs' MERGE: each candidate is checked in Python.
MAX_CANDIDATES = 200_000
# Bytes of stored files (Arrow's, in memory) the scan keeps for the rewrite; a touched file past
# it is read again when written, so the dbt process holds about two files' rows at a time.
HELD_BYTES = 512 * 1024 * 1024
FILE_COLUMN = "__dvm_file"  # the stored file a candidate row is in
AT_COLUMN = "__dvm_at"  # its position in that file


def takes_rows(change: pa.Table) -> bool:
    """Does the consolidated change (a bag's columns and __dvm_w) take rows from a tuple?"""
    return bool(change.num_rows) and pc.any(pc.less(change.column(WEIGHT), 0)).as_py()


@dataclass(frozen=True)
class Plan:
    """What a change does to the stored files: which to replace, which rows of them to drop
    (the losing tuples' rows), the rows to add and the counts the MERGE would report."""

    touched: list  # absolute paths of the stored files to replace, in scan order
    gone: dict  # {touched file: the positions of its rows that go (a losing tuple's)}
    added: pa.Table  # the stored schema's rows written besides the kept ones
    actions: int  # the MERGE rows the change comes to (bag_lookup.actions), as delta-rs counts them
    inserted: int
    updated: int
    deleted: int


def plan(change: pa.Table, columns: list, candidates: pa.Table, schema: pa.Schema) -> Plan:
    """The plan for the consolidated `change` (`columns` and __dvm_w, one row per tuple, cast to
    the stored types) against `candidates` (`columns`, __dvm_count and FILE_COLUMN: at least
    every stored row of a losing tuple, and AT_COLUMN: its position in its file); `schema`: the
    stored columns (`columns` + __dvm_count)."""
    stored = bag_lookup.stored_counts(candidates.drop_columns([FILE_COLUMN, AT_COLUMN]), columns)
    merge = bag_lookup.actions(change, columns, stored)
    losing = change.filter(pc.less(change.column(WEIGHT), 0))
    dropped = frozenset(zip(*[losing.column(c).to_pylist() for c in columns]))
    gone: dict = {}  # in scan order: the first file seen first
    stored_rows: dict = {}
    names = [*columns, FILE_COLUMN, AT_COLUMN]
    for *values, file, at in zip(*[candidates.column(n).to_pylist() for n in names]):
        key = tuple(values)
        if key in dropped:
            gone.setdefault(file, []).append(at)
            stored_rows[key] = stored_rows.get(key, 0) + 1
    # What stays of a losing tuple is one row with its new count (the MERGE's UPSERT, or its
    # DELETE beside an INSERT), as is each gaining tuple's rows: the actions' non-DELETE rows.
    kept = merge.filter(pc.not_equal(merge.column(ACTION), DELETE))
    added = pa.table([kept.column(n).cast(schema.field(n).type) for n in schema.names], schema=schema)
    acts = merge.column(ACTION).to_pylist()
    firsts = zip(*[merge.column(c).to_pylist() for c in columns])
    deleted = sum(stored_rows.get(t, 0) for t, a in zip(firsts, acts) if a == DELETE)
    updated = acts.count(UPSERT)
    return Plan(list(gone), gone, added, len(acts), acts.count(INSERT), updated, deleted)


@dataclass
class Scanned:
    """One stored file that holds a candidate row: where they are, what they hold, and the file's
    rows when they are kept in memory for the rewrite (else it is read again)."""

    path: str
    at: pa.Array  # positions of the candidate rows in the file
    picked: pa.Table  # the candidate rows: `columns` and __dvm_count
    rows: Optional[pa.Table]  # the whole file in the stored schema, or None past HELD_BYTES


def scan(files: list, columns: list, losing: pa.Table, schema: pa.Schema) -> list:
    """Every stored file of `files` (local paths) that holds a candidate row (each of its
    `columns` holds a value of that column in `losing`); raises TooMany past MAX_CANDIDATES.
    Each file is read whole once, and kept while all kept stay under HELD_BYTES."""
    values = bag_lookup.losing_values(losing, columns)
    found = []
    total = held = 0
    for path in files:
        rows = _read(path, schema)
        mask = pa.array(np.ones(rows.num_rows, dtype=bool))
        for c in columns:
            # is_in meets a NULL with a NULL of the values, as the MERGE's IS NOT DISTINCT FROM.
            mask = pc.and_(mask, pc.is_in(rows.column(c), value_set=values[c]))
        at = pc.indices_nonzero(mask)
        total += len(at)
        if total > MAX_CANDIDATES:
            raise TooMany(total)
        if len(at):
            keep = held + rows.nbytes <= HELD_BYTES
            held += rows.nbytes if keep else 0
            found.append(Scanned(path, at, rows.select([*columns, COUNT]).take(at), rows if keep else None))
    return found


def _read(path: str, schema: pa.Schema) -> pa.Table:
    # Cast: files of delta-rs' MERGE hold strings as string_view, which Arrow's is_in does not
    # take, and every file is written again in the stored schema.
    try:
        return pq.read_table(path, columns=schema.names).cast(schema)
    except pa.ArrowException as err:
        raise type(err)(f"the stored file {path}: {err}") from None


def candidates(scanned: list, columns: list, schema: pa.Schema) -> pa.Table:
    """The candidate rows of `scanned` as `columns`, __dvm_count, FILE_COLUMN (their file) and
    AT_COLUMN (their position in it)."""
    extra = [pa.field(FILE_COLUMN, pa.string()), pa.field(AT_COLUMN, pa.int64())]
    parts = [pa.schema([schema.field(c) for c in columns] + [schema.field(COUNT), *extra]).empty_table()]
    for one in scanned:
        where = one.picked.append_column(FILE_COLUMN, pa.array([one.path] * len(one.at), pa.string()))
        parts.append(where.append_column(AT_COLUMN, one.at.cast(pa.int64())))
    return pa.concat_tables(parts)


class TooMany(Exception):
    """More candidate rows than MAX_CANDIDATES: the caller keeps delta-rs' MERGE."""


def kept_rows(one: Scanned, gone: list, schema: pa.Schema) -> pa.Table:
    """The rows of one stored file but those at the positions `gone` (Plan.gone)."""
    rows = one.rows if one.rows is not None else _read(one.path, schema)
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[gone] = False
    return rows.filter(pa.array(keep))


def rewrite(
    table: Any,
    target: str,
    change: pa.Table,
    columns: list,
    metadata: dict,
    read_version: int,
    reached: Callable[[str], None] = lambda step: None,
) -> Merged:
    """Apply the consolidated bag `change` (the delta query's rows: `columns` and __dvm_w) to the
    stored result at `target` (`table`: opened at `read_version`) in one commit with `metadata`.
    Raises TooMany before anything is written when the candidates are too many; `reached` is told
    the refresh's steps from then on (delta_computed, merging), once the rewrite goes ahead."""
    schema = tables.arrow_schema(table)
    types = {f.name: f.type for f in schema}
    change = pa.table({**{c: change.column(c).cast(types[c]) for c in columns}, WEIGHT: change.column(WEIGHT)})
    losing = change.filter(pc.less(change.column(WEIGHT), 0))
    assert losing.num_rows, "rewrite is for a change that takes rows (takes_rows)"
    stored_files = tables.file_paths(table, target)
    scanned = scan([paths.local(f) for f in stored_files], columns, losing, schema)
    decided = plan(change, columns, candidates(scanned, columns, schema), schema)
    reached("delta_computed")
    reached("merging")
    actions = tables.add_actions(table)
    log_paths = actions.column("path").to_pylist()
    sizes = dict(zip(log_paths, actions.column("size_bytes").to_pylist()))
    by_file = {paths.local(f): rel for rel, f in zip(log_paths, stored_files)}
    directory = f"{DIRECTORY_PREFIX}{uuid.uuid4().hex[:16]}"
    where = os.path.join(paths.local(target), directory)
    try:
        written = _write(where, decided, scanned, schema)
        footers = [files.footer(f) for f in written]
    except BaseException:
        files.remove(where)  # named by no commit
        raise
    removed = [by_file[paths.local(f)] for f in decided.touched]
    rows = (decided.inserted, decided.updated, decided.deleted)
    try:
        commit_touched(target, directory, written, footers, schema, removed, sizes, rows, metadata, read_version)
    except ConcurrentCommit:
        files.remove(where)  # the rival's commit stands; these files are named by none
        raise
    # Any other failure of the commit may come after the log named the files (a post-commit
    # hook, an interrupt): they stay, and the vacuum removes them if no commit names them.
    return Merged(decided.actions, decided.inserted, decided.updated, decided.deleted, files_rewritten=len(removed))


def _write(where: str, decided: Plan, scanned: list, schema: pa.Schema) -> list:
    """Write each touched file's kept rows (the added rows with the last) as a parquet file into
    the new local directory `where`, two files at a time (the reader and writer release the
    GIL); returns them as files.WrittenFile, sorted."""
    jobs: list = [f for f in scanned if f.path in decided.gone]
    for f in scanned:
        if f.path not in decided.gone:
            f.rows = None  # not rewritten: its rows need not stay in memory
    # A change that takes rows meets a stored row of each losing tuple (else plan raised
    # StoredRowsMissing), so some file is touched: the added rows go with the last one.
    assert jobs, "a change that takes rows touches a stored file"
    last = len(jobs) - 1

    def write_one(item: tuple) -> None:
        i, scanned_file = item
        data = kept_rows(scanned_file, decided.gone[scanned_file.path], schema)
        scanned_file.rows = None
        if i == last and decided.added.num_rows:
            data = pa.concat_tables([data, decided.added])
        if not data.num_rows:
            return  # every row of the file goes (no directory made for nothing)
        os.makedirs(where, exist_ok=True)
        pq.write_table(
            data,
            os.path.join(where, f"part-{i:05d}-{uuid.uuid4().hex}.snappy.parquet"),
            compression=storage.COMPRESSION.lower(),
            row_group_size=storage.ROW_GROUP_ROWS,
            use_dictionary=files.dictionary_columns(data),
        )

    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(write_one, enumerate(jobs)))
    return files.parquet_files(where)
