"""The connection binding for a Spark Thrift server (HiveServer2 protocol): everything through SQL.

A Thrift client can only send SQL text and fetch rows, so what the other bindings pass as data
goes through the storage that the dbt process and the cluster share (the warehouse):
* rows the client holds (a small change) are written as a parquet file under the warehouse's
  scratch directory and bound as `CREATE TEMPORARY VIEW ... USING parquet`;
* a result the client needs (the delta to MERGE, a full recompute) is written by the executors
  with `INSERT OVERWRITE DIRECTORY ... USING parquet` and read back with pyarrow, exact types
  included (rows fetched over Thrift would come back as strings and floats);
* data files of a Delta version are bound by path with the table's schema, never pasted rows.

Temporary views live in the connection's Hive session, which the refresh holds alone. Scratch
directories are removed when their view is dropped, and at close.
"""

from __future__ import annotations

import datetime
import json
import re
import time
import uuid
import zoneinfo
from typing import Any, Callable, Optional

import pyarrow as pa

from python_helpers.runtime import paths
from python_helpers.runtime.connections import files, held_settings
from python_helpers.runtime.connections.base import NO_DICTIONARY_FILTER, NOT_TOLD, Computed, FunctionKind, OutputColumn
from python_helpers.runtime.connections.files import _ident, _string
from python_helpers.runtime.connections.server_checks import required_version, too_old

SCRATCH_DIR = "__dvm_scratch"
SCRATCH_MAX_AGE_SECONDS = 24 * 3600

# Thrift operation states (TCLIService's TOperationState): the client waits while a statement is
# INITIALIZED (0), RUNNING (1) or PENDING (7); FINISHED is 2; ERROR (5) carries errorMessage.
_PENDING = {0, 1, 7}
_FINISHED = 2


def set_statement(key: str, value: str) -> str:
    """`SET key=value` for any value: backquoted, backquotes inside doubled (a `;` ends an
    unquoted value, and refresh metadata holds reasons with semicolons)."""
    return f"SET {key}=`{value.replace('`', '``')}`"


def _zone(name: str) -> datetime.tzinfo:
    """Spark's session time zone: a region id, or an offset such as +01:00 (timings only)."""
    try:
        return zoneinfo.ZoneInfo(name)
    except (ValueError, zoneinfo.ZoneInfoNotFoundError):
        pass
    text = name.upper().removeprefix("UTC").removeprefix("GMT")
    if text[:1] in "+-" and len(text) > 1:
        hours, _, minutes = text[1:].partition(":")
        delta = datetime.timedelta(hours=int(hours), minutes=int(minutes or 0))
        return datetime.timezone(-delta if text[0] == "-" else delta)
    return datetime.timezone.utc


def _decoded(value: Any, kind: str, zone: Optional[datetime.tzinfo]) -> Any:
    """A value as a Spark session's collect() returns it: HiveServer2 sends maps, arrays and
    structs as text, and timestamps as text in the session's time zone (collect() gives a naive
    datetime in the dbt process's local time)."""
    if kind == "TIMESTAMP_TYPE" and isinstance(value, datetime.datetime) and value.tzinfo is None:
        # PyHive parses it already: the session zone's wall time, to be read in the dbt process's
        return value.replace(tzinfo=zone or datetime.timezone.utc).astimezone().replace(tzinfo=None)
    if not isinstance(value, str):
        return value
    if kind in ("MAP_TYPE", "ARRAY_TYPE", "STRUCT_TYPE"):
        try:
            return json.loads(value)
        except ValueError:
            # an array or struct of text with quotes inside: left as text (no refresh reads one)
            return _string_map(value) if kind == "MAP_TYPE" else value
    if kind == "TIMESTAMP_TYPE":
        moment = datetime.datetime.fromisoformat(value).replace(tzinfo=zone or datetime.timezone.utc)
        return moment.astimezone().replace(tzinfo=None)
    return value


# A key of a map<string,string> as HiveServer2 prints it: `"key":"`, at the start or after `",`.
_MAP_KEY = re.compile(r'(?:^\{|",)"([^"]+)":"')


def _string_map(text: str) -> dict:
    """A map<string,string> from HiveServer2's text, which leaves quotes inside values unescaped
    (Delta's history parameters hold SQL predicates): values run from one key to the next."""
    keys = list(_MAP_KEY.finditer(text))
    out = {}
    for at, key in enumerate(keys):
        end = keys[at + 1].start() if at + 1 < len(keys) else len(text) - 2  # the closing `"}`
        out[key.group(1)] = text[key.end() : end]
    return out


def old_server_message(server_key: str, version: str) -> str:
    return (
        f"the Thrift server at {server_key} (profile `host`/`port`) runs Spark {version}; "
        f"stream tables need {required_version()}: point the profile at a newer server"
    )


class ThriftConnection:
    kind = "thrift"
    folds_local_rows = False  # the client's rows reach the server as parquet files: a filter is a job

    def __init__(self, connect: Callable[[], Any], server_key: str, close: Optional[Callable[[Any], None]] = None):
        """`connect()` opens a DB-API connection to the Thrift server (PyHive's); `server_key`
        names the server (catalog caches are per server: every session sees one catalog)."""
        self._connection = connect()
        self._close = close
        self._server_key = server_key
        self._scratch: dict[str, str] = {}  # view -> scratch directory it reads
        self._helpers: dict[str, list[str]] = {}  # view -> the views it reads (dropped with it)
        self._cached: set[str] = set()
        self._warehouse: Optional[str] = None
        self._confs: dict[str, Optional[str]] = {}
        version = str(self.rows("SELECT version()")[0][0]).split()[0]
        self._version = version
        if too_old(version):
            self.close()
            raise RuntimeError(old_server_message(server_key, version))
        # Results come back as parquet: timestamps as Parquet's own microsecond type, which
        # pyarrow reads with their time zone semantics (INT96, Spark's default, it would not).
        self.execute("SET spark.sql.parquet.outputTimestampType=TIMESTAMP_MICROS")

    @property
    def key(self) -> int:
        return hash(("thrift", self._server_key))

    @property
    def settings_key(self) -> int:
        return id(self)  # each refresh holds a Hive session of its own; `key` names the server

    def spark_version(self) -> str:
        return self._version

    def private(self) -> "ThriftConnection":
        return self  # a Hive session of the refresh's own already (adapter: thrift_refresh.py)

    def release(self) -> None:
        pass  # closed by whoever opened it (close)

    def close(self) -> None:
        for name in list(self._scratch) + list(self._helpers) + list(self._cached):
            self.drop_view(name)
        try:
            if self._close is not None:
                self._close(self._connection)
            else:
                self._connection.close()
        except Exception:  # noqa: BLE001 - the session ends with the connection either way
            pass

    # Statements and results.
    def _run(self, sql: str):
        cursor = self._connection.cursor()
        cursor.execute(sql, async_=True)
        # A refresh is dozens of short statements: poll often (a status call is cheap), so each
        # one returns within ~0.1 s of finishing.
        wait = 0.005
        state = cursor.poll()
        while state.operationState in _PENDING:
            time.sleep(wait)
            wait = min(wait * 2, 0.1)
            state = cursor.poll()
        if state.errorMessage:
            cursor.close()
            raise RuntimeError(state.errorMessage)
        if state.operationState != _FINISHED:
            cursor.close()
            raise RuntimeError(f"the Thrift server ended the statement in state {state.operationState}")
        return cursor

    def execute(self, sql: str) -> None:
        if sql.lstrip()[:4].upper() == "SET ":
            self._confs.clear()
        self._run(sql).close()

    def rows(self, sql: str) -> list[tuple]:
        cursor = self._run(sql)
        try:
            return [tuple(r) for r in cursor.fetchall()]
        finally:
            cursor.close()

    def records(self, sql: str) -> list[dict]:
        cursor = self._run(sql)
        try:
            # The result's own column names (DESCRIBE QUERY cannot wrap DESCRIBE DETAIL/HISTORY).
            described = [(d[0], str(d[1] or "")) for d in cursor.description or []]
            rows = cursor.fetchall()
        finally:
            cursor.close()
        zone = None
        if any(kind == "TIMESTAMP_TYPE" for _, kind in described) and rows:
            zone = _zone(self.conf("spark.sql.session.timeZone") or "UTC")
        return [{name: _decoded(value, kind, zone) for (name, kind), value in zip(described, r)} for r in rows]

    def arrow(self, sql: str, names: Optional[list[str]] = None) -> pa.Table:
        where = self._scratch_dir("result")
        try:
            files.write_query(self, sql, names, where)
            data = files.read_directory(where)
        finally:
            files.remove(where)
        if data is None:  # Spark writes a file with the schema even for no rows
            raise RuntimeError(f"the Thrift server wrote no result file under {where}")
        return data

    def output_columns(self, sql: str) -> list[OutputColumn]:
        out = []
        for row in self.rows(f"DESCRIBE QUERY {sql}"):
            if not row[0] or str(row[0]).startswith("#"):
                break
            out.append(OutputColumn(str(row[0]), str(row[1])))
        return out

    # Temporary views.
    def view_of_arrow(
        self, name: str, data: pa.Table, one_partition: bool = False, rows_name: Optional[str] = None
    ) -> None:
        where = self._scratch_dir(name)
        files.write_parquet(data, where)
        self._scratch[name] = where
        columns = ", ".join(f"{_ident(f.name)} {t}" for f, t in zip(data.schema, _spark_types(data.schema)))
        self.execute(
            f"CREATE OR REPLACE TEMPORARY VIEW {_ident(name)} ({columns}) USING parquet "
            f"OPTIONS (path {_string(paths.for_spark(where, where))})"
        )

    def view_of_files(
        self,
        name: str,
        files: list[str],
        schema: pa.Schema,
        base_path: Optional[str] = None,
        columns: Optional[list[str]] = None,
        cache_key: Optional[tuple] = None,
    ) -> None:
        types = _spark_types(schema)
        if not files:
            empty = ", ".join(f"CAST(NULL AS {t}) AS {_ident(f.name)}" for f, t in zip(schema, types))
            body = f"SELECT {empty} WHERE false"
        else:
            declared = ", ".join(f"{_ident(f.name)} {t}" for f, t in zip(schema, types))
            # One glob per directory (a glob's braces cannot span directories); Spark lists
            # what a glob names when its view is created.
            groups = _by_directory(files)
            with held_settings.listing_in_driver(self, max(groups.values(), key=len)):
                helpers = self._helpers.setdefault(name, [])
                parts = []
                for i, (directory, group) in enumerate(groups.items()):
                    parts.append(f"{name}__f{i}")
                    helpers.append(parts[-1])  # dropped with the view, even if the next fails
                    self._view_of_glob(parts[-1], directory, group, declared, base_path)
            body = " UNION ALL ".join(f"SELECT * FROM {_ident(part)}" for part in parts)
        if columns is not None:
            body = f"SELECT {', '.join(_ident(c) for c in columns)} FROM ({body}) AS __dvm_files"
        self.execute(f"CREATE OR REPLACE TEMPORARY VIEW {_ident(name)} AS {body}")

    def _view_of_glob(self, part: str, directory: str, group: list, declared: str, base_path: Optional[str]) -> None:
        pattern = group[0] if len(group) == 1 else f"{directory}/{{{','.join(_glob_names(group))}}}"
        settings = [f"{_string(k)} {_string(v)}" for k, v in NO_DICTIONARY_FILTER.items()]
        options = ", ".join([f"path {_string(pattern)}", *settings])
        if base_path is not None:
            options += f", basePath {_string(base_path)}"
        self.execute(f"CREATE OR REPLACE TEMPORARY VIEW {_ident(part)} ({declared}) USING parquet OPTIONS ({options})")

    def view_of_query(
        self,
        name: str,
        sql: str,
        one_partition: bool = False,
        materialize: bool = False,
        flag: Optional[str] = None,
    ) -> Computed:
        if one_partition:
            sql = f"SELECT /*+ COALESCE(1) */ * FROM ({sql}) AS __dvm_one"
        if materialize:
            self.execute(f"CACHE TABLE {_ident(name)} AS {sql}")
            self._cached.add(name)
        else:
            self.execute(f"CREATE OR REPLACE TEMPORARY VIEW {_ident(name)} AS {sql}")
        return NOT_TOLD

    def drop_view(self, name: str) -> None:
        try:
            if name in self._cached:
                self._cached.discard(name)
                self.execute(f"UNCACHE TABLE IF EXISTS {_ident(name)}")
            self.execute(f"DROP VIEW IF EXISTS {_ident(name)}")
        except Exception:  # noqa: BLE001 - best effort cleanup
            pass
        where = self._scratch.pop(name, None)
        if where is not None:
            files.remove(where)
        for helper in self._helpers.pop(name, []):
            self.drop_view(helper)

    # Catalog and settings.
    def table_exists(self, name: str) -> bool:
        try:
            self.rows(f"DESCRIBE TABLE {name}")
            return True
        except Exception:  # noqa: BLE001 - TABLE_OR_VIEW_NOT_FOUND
            return False

    def table_type(self, name: str) -> Optional[str]:
        try:
            rows = self.rows(f"DESCRIBE TABLE EXTENDED {name}")
        except Exception:  # noqa: BLE001 - no such object
            return None
        return next((str(r[1]).strip() for r in rows if str(r[0]).strip() == "Type"), None)

    def conf(self, key: str, default: Optional[str] = None) -> Optional[str]:
        # A refresh reads the same settings several times (checks, the recorded settings); each
        # read is a round trip here. Only this session's own SET changes them.
        if key not in self._confs:
            rows = self.rows(f"SET {key}")
            self._confs[key] = rows[0][1] if rows else None
        value = self._confs[key]
        return default if value is None or value == "<undefined>" else str(value)

    def setting(self, key: str) -> Optional[str]:
        return self.conf(key)  # `SET key` answers with Spark's default when the session has none

    def settings(self, keys: list[str]) -> dict:
        return {key: self.setting(key) for key in keys}  # read once each, then cached (conf)

    def set_conf(self, key: str, value: Optional[str]) -> None:
        self._confs.pop(key, None)  # read back from the server next time
        if value is None:
            self.execute(f"RESET {key}")
        else:
            self.execute(set_statement(key, value))

    def explicit_confs(self) -> dict:
        return {str(k): str(v) for k, v, *_ in self.rows("SET")}

    # What only some connections can tell.
    def classify_function(self, name: str, arity: int) -> Optional[FunctionKind]:
        from python_helpers.runtime.refresh.functions import classify_by_sql

        return classify_by_sql(self, name)

    def ui_url(self) -> Optional[str]:
        return None

    def add_tag(self, tag: str) -> bool:
        return False

    def remove_tag(self, tag: str) -> None:
        return None

    # Scratch space on the shared storage.
    def _scratch_dir(self, what: str) -> str:
        if self._warehouse is None:
            warehouse = paths.normalize(self.conf("spark.sql.warehouse.dir") or "")
            try:
                files.make_dir(paths.join(warehouse, SCRATCH_DIR))
            except Exception as err:  # noqa: BLE001 - any storage error means the same to the user
                raise RuntimeError(
                    f"the dbt process cannot write to the Thrift server's warehouse {warehouse} "
                    f"(spark.sql.warehouse.dir): {type(err).__name__}: {str(err).splitlines()[0][:200]}; "
                    "over method: thrift the data of a refresh crosses through it, so mount it at the "
                    "same path (or give the client credentials for its storage URI), or use method: connect"
                ) from None
            self._warehouse = warehouse
            # What killed refreshes left: a refresh's scratch lives minutes, never a day.
            files.remove_older(paths.join(warehouse, SCRATCH_DIR), SCRATCH_MAX_AGE_SECONDS)
        return paths.join(self._warehouse, SCRATCH_DIR, f"{uuid.uuid4().hex}-{what[-40:]}")


def _spark_types(schema: pa.Schema) -> list[str]:
    from python_helpers.runtime.spark_types import spark_type_strings

    return list(spark_type_strings(schema).values())


def _by_directory(files: list[str]) -> dict:
    groups: dict = {}
    for f in files:
        directory, _, _ = f.rpartition("/")
        groups.setdefault(directory, []).append(f)
    return groups


def _glob_names(group: list[str]) -> list[str]:
    # Inside braces a comma separates alternatives: escape the ones in names (once).
    return [f.rpartition("/")[2].replace("\\,", ",").replace(",", "\\,") for f in group]
