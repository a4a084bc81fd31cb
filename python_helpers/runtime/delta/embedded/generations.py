"""Generation directories: one Delta table version's live files, as hard links, for a view.

A view that names a Delta version's files one by one breaks on a file list longer than the
metastore keeps (about 32 KB of view text, ~750 files) and on file names that Hadoop reads as
glob patterns (`{ } [ ] , *`). So each published version gets a directory of its own,
`<root>/g<version>-<identity>/`, holding hard links to exactly its live files, and the view
reads that directory. The identity digests the table's id, the version and its files, so a
table recreated at the same path never reuses another table's directory. The directory never
changes once made, so a query that listed it keeps reading the same files however many
refreshes happen meanwhile (`current` pointers that are swapped under a reader make it open
names that no longer exist). A generation is removed only when it is older
than the retention and not among the newest few; the data itself stays while any link does.

Partitioned tables: files are linked under `data/__dvm_p=<i>/` (i numbers the partition
values) and `parts/` holds one small parquet file mapping i to the typed partition values;
`data/_common_metadata` carries the table's data schema, so Spark takes the columns from it and
not from an old file that predates an added column.

`published-<catalog>.json` in the root records what the view shows in one catalog (the marker;
several metastores can publish views of the same storage). It is written after the view, so a
crash in between leaves the marker behind and the next refresh publishes again. A source's
root also holds `read-<catalog>`, whose time says when a stream table last read the source
(touched at most hourly): a source view no stream table read for longer than its retention
is swept (publishing.sweep_sources), so the models that were dropped do not pin its files.

Where links cannot be made (remote storage, another file system) `link_generation` returns None
and the caller names the files in the view instead.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from typing import Optional

import pyarrow as pa

from python_helpers.runtime import paths

PUBLISHED_DIR = "__dvm_published"
SOURCES_DIR = "__sources"
MARKER_PREFIX = "published-"
PARTITION_DIR = "__dvm_p"
KEEP_GENERATIONS = 3
# Generations younger than this stay even when more than KEEP_GENERATIONS exist: a query that
# resolved the view to one of them may still be reading it.
DEFAULT_GENERATION_RETENTION_SECONDS = 3600
# `.staging-*` directories older than this are leftovers of a killed refresh.
LEFTOVER_SECONDS = 600


def stream_root(target: str) -> str:
    """Where the generations of a stream table's stored result live."""
    return paths.join(paths.dirname(target), PUBLISHED_DIR, paths.basename(target))


def source_root(schema_dir: str, table: str) -> str:
    """Where the generations of a source's view live (in the view's schema directory)."""
    return paths.join(schema_dir, PUBLISHED_DIR, SOURCES_DIR, table.lower())


def _generation(name: str) -> Optional[int]:
    """The version a generation directory shows: `g<version>-<identity>` (or `g<version>`, as
    earlier releases named them)."""
    number = name[1:].split("-", 1)[0]
    return int(number) if name.startswith("g") and number.isdigit() else None


def generation_name(
    table_id: str,
    version: int,
    files: list,
    partitions: Optional[list] = None,
    data_schema: Optional[pa.Schema] = None,
    partition_schema: Optional[pa.Schema] = None,
) -> str:
    """`g<version>-<identity>`: the identity digests what the directory holds (the table's id,
    the version, the files and their partitions, the schema), so a directory made for one table
    is never served for another that reached the same version at the same place (a table
    recreated at its path, a source moved to another table, a stored result reset)."""
    import hashlib

    what = [
        table_id,
        version,
        list(files),
        [list(p) for p in partitions] if partitions is not None else None,
        str(data_schema) if data_schema is not None else None,
        str(partition_schema) if partition_schema is not None else None,
    ]
    digest = hashlib.md5(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"g{version}-{digest}"


def _marker_name(catalog: str) -> str:
    return f"{MARKER_PREFIX}{catalog}.json"


def read_marker(root: str, catalog: str = "default") -> Optional[dict]:
    try:
        return json.loads(paths.read_text(paths.join(root, _marker_name(catalog))))
    except (FileNotFoundError, ValueError):
        return None


def write_marker(root: str, marker: dict, catalog: str = "default") -> None:
    paths.write_text_atomic(paths.join(root, _marker_name(catalog)), json.dumps(marker, sort_keys=True))


READ_STAMP_PREFIX = "read-"
# A read stamp is touched when older than this: one stat per source per refresh, rarely a write.
READ_STAMP_EVERY_SECONDS = 3600.0


def note_read(root: str, catalog: str = "default", now: Optional[float] = None) -> None:
    """Record that a refresh read the source published under `root` in `catalog`."""
    if paths.is_uri(root):
        return
    stamp = os.path.join(paths.local(root), f"{READ_STAMP_PREFIX}{catalog}")
    now = time.time() if now is None else now
    if now - _mtime(stamp) < READ_STAMP_EVERY_SECONDS:
        return
    try:
        os.makedirs(paths.local(root), exist_ok=True)
        with open(stamp, "a"):
            pass
        os.utime(stamp, (now, now))
    except OSError:
        pass  # storage this process may not write: the source is then never swept


def last_read(root: str, catalog: str = "default") -> float:
    """When a refresh last read (or published) the source under `root` in `catalog`; 0: never
    recorded."""
    local = paths.local(root)
    return max(
        _mtime(os.path.join(local, f"{READ_STAMP_PREFIX}{catalog}")), _mtime(os.path.join(local, _marker_name(catalog)))
    )


def forget_catalog(root: str, catalog: str = "default") -> bool:
    """Remove what `root` holds for `catalog` (marker, read stamp), and the whole root when no
    other catalog publishes from it. Returns whether the root is gone."""
    local = paths.local(root)
    for name in (_marker_name(catalog), f"{READ_STAMP_PREFIX}{catalog}"):
        _remove(os.path.join(local, name))
    if not os.path.isdir(local):
        return True
    if any(n.startswith(MARKER_PREFIX) for n in os.listdir(local)):
        prune(root)
        return False
    shutil.rmtree(local, ignore_errors=True)
    return not os.path.isdir(local)


def _live_generations(root: str) -> set:
    """Generations some catalog's view reads (every marker's)."""
    live = set()
    for name in os.listdir(root):
        if name.startswith(MARKER_PREFIX) and name.endswith(".json"):
            try:
                with open(os.path.join(root, name), encoding="utf-8") as handle:
                    live.add(json.load(handle).get("generation"))
            except (OSError, ValueError):
                continue
    return live


def link_generation(
    root: str,
    table_id: str,
    version: int,
    files: list,
    partitions: Optional[list] = None,
    data_schema: Optional[pa.Schema] = None,
    partition_schema: Optional[pa.Schema] = None,
) -> Optional[str]:
    """The directory `<root>/<generation_name(...)>` holding links to `files` of the table
    `table_id` at `version` (made once; reused after by the same table's same version only).

    `partitions[i]` is the tuple of partition values of `files[i]` (None: not partitioned).
    Returns None where links cannot be made here."""
    if paths.is_uri(root) or any(paths.is_uri(f) for f in files):
        return None
    name = generation_name(table_id, version, files, partitions, data_schema, partition_schema)
    gen = os.path.join(root, name)
    if os.path.isdir(gen):
        return gen
    staging = os.path.join(root, f".staging-{uuid.uuid4().hex}")
    try:
        os.makedirs(staging)
        if partitions is None:
            for i, f in enumerate(files):
                os.link(f, os.path.join(staging, _link_name(i, f)))
        else:
            _link_partitioned(staging, files, partitions, data_schema, partition_schema)
        try:
            os.rename(staging, gen)
        except OSError:  # another process made this generation first
            shutil.rmtree(staging, ignore_errors=True)
            if not os.path.isdir(gen):
                return None
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return None
    return gen


def _link_name(i: int, f: str) -> str:
    # Numbered: two partitions' files may share a name; never starting with `_` or `.`,
    # which Spark's listing skips.
    return f"{i:06d}-{os.path.basename(f)}"


def _link_partitioned(
    staging: str, files: list, partitions: list, data_schema: pa.Schema, partition_schema: pa.Schema
) -> None:
    import pyarrow.parquet as pq

    from python_helpers.runtime.delta.embedded.log import typed_partition_value

    data = os.path.join(staging, "data")
    os.makedirs(data)
    numbers: dict = {}
    for i, (f, values) in enumerate(zip(files, partitions)):
        n = numbers.setdefault(values, len(numbers))
        directory = os.path.join(data, f"{PARTITION_DIR}={n}")
        os.makedirs(directory, exist_ok=True)
        os.link(f, os.path.join(directory, _link_name(i, f)))
    pq.write_metadata(data_schema, os.path.join(data, "_common_metadata"))
    columns = {PARTITION_DIR: pa.array(list(numbers.values()), pa.int32())}
    for field in partition_schema:
        columns[field.name] = (
            pa.concat_arrays([typed_partition_value(dict(v).get(field.name), field.type, 1) for v in numbers])
            if numbers
            else pa.array([], field.type)
        )
    os.makedirs(os.path.join(staging, "parts"))
    pq.write_table(pa.table(columns), os.path.join(staging, "parts", "part-0.parquet"))


def prune(
    root: str, keep: Optional[int] = None, retention_seconds: Optional[float] = None, now: Optional[float] = None
) -> list:
    """Remove generations older than the retention beyond the newest `keep`, never the one the
    marker names, and leftovers of killed refreshes. Returns what was removed."""
    if paths.is_uri(root) or not os.path.isdir(root):
        return []
    keep = KEEP_GENERATIONS if keep is None else keep
    retention = DEFAULT_GENERATION_RETENTION_SECONDS if retention_seconds is None else retention_seconds
    now = time.time() if now is None else now
    live = _live_generations(root)
    removed = []
    # In the order they were made (a recreated table starts its versions again).
    gens = sorted((_mtime(os.path.join(root, n)), g, n) for n in os.listdir(root) if (g := _generation(n)) is not None)
    gens_by_age = [(g, n) for _, g, n in gens]
    # A generation can be read until the next one is published: its age counts from then.
    superseded = {name: _mtime(os.path.join(root, nxt)) for (_, name), (_, nxt) in zip(gens_by_age, gens_by_age[1:])}
    for _, name in gens_by_age[:-keep] if keep else gens_by_age:
        if name in live or name not in superseded or now - superseded[name] < retention:
            continue
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        removed.append(name)
    for name in os.listdir(root):
        full = os.path.join(root, name)
        if (name.startswith(".staging-") or name.startswith(".tmp-")) and now - _mtime(full) > LEFTOVER_SECONDS:
            if os.path.isdir(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                _remove(full)
            removed.append(name)
    return removed


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
