"""Catalog views over Delta versions, and what the project may do to catalog objects.

Without Delta Lake jars Spark cannot read a Delta table by name, so the stream table and each of
its sources are published as persistent views over the parquet files of one version
(`runtime/delta/embedded/generations.py`): `dbt test`, downstream models and ad-hoc SQL read them by name.

Ownership: every view this project creates carries the table property
`dbt_spark_stream.role` (`stream_table` or `source`). The project alters only objects that carry
it, and drops only one kind: a source view of its own that no stream table has read for longer
than the retention (`drop_own_view`; the next stream table reading the source makes it again).
A source name that already belongs to someone else (a
managed or external table, a view of the user's) is left as it is and not published; the
stream table's own name is taken over only when the caller says it owns the name (dbt does, for
a model's relation, as its table materialization does).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Iterable, Optional

from sqlglot import exp

from python_helpers.errors import StreamTableError
from python_helpers.runtime.connections.base import CATALOG_SETTINGS, Connection

ROLE_PROPERTY = "dbt_spark_stream.role"
STREAM_TABLE = "stream_table"
SOURCE = "source"
# The Hive metastore (Derby) keeps about 32 KB of view text.
MAX_VIEW_TEXT = 30_000

_DDL_LOCK = threading.RLock()  # dbt threads share one session; keep catalog DDL one at a time
# View texts this process published, per (session, schema, name): a refresh that would publish
# the same text again skips the catalog entirely.
_PUBLISHED: dict = {}
# Views this process read from the catalog and found showing a generation, per (session, schema,
# name) -> that generation: a later refresh in the process expecting the same generation (dbt's
# next model reading the same source) asks the catalog nothing.
_VERIFIED: dict = {}
# Names check_name found free before a first build's write, per (session, schema, name): the
# publish after the write creates the view without asking again. Only "no object" is kept (a
# CREATE VIEW fails safely on anything made there since, and then the name is looked up again);
# every publish of the name, and a drop, forgets it.
_CHECKED: set = set()
# Names a `SHOW TABLE EXTENDED ... LIKE` pattern matches literally (its pattern is a regular
# expression with `*` and `|`).
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class NameTaken(StreamTableError):
    """A catalog object of the stream table's name exists and was not created by this project."""


def quote(*parts: str) -> str:
    """A Spark SQL identifier path, each part back-quoted (back-quotes inside doubled)."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def check_view_text(model: str, view: str, text: str) -> None:
    """Refuse a view text the metastore cannot keep (a file list where no generation directory
    can be made). Refreshes call it before their storage commit too (publishing.check_publishable),
    so a refresh never commits rows whose views it then cannot publish."""
    if len(text) > MAX_VIEW_TEXT:
        raise StreamTableError(
            model,
            f"the view {view} would need {len(text)} characters of text, "
            f"more than the metastore keeps ({MAX_VIEW_TEXT})",
            "keep the table on storage where hard links can be made, or compact it (OPTIMIZE) to fewer files",
        )


TABLE_KINDS = ("MANAGED", "EXTERNAL")  # the catalog's types of a table (a view is VIEW)


@dataclass(frozen=True)
class Described:
    """What the catalog says of one object: its view text (None for a table), the role
    property this project gives its views (None when it is not ours), for a table its type
    (MANAGED, EXTERNAL), format and location, and for a view how its columns follow what it
    reads (`schema_mode`: EVOLUTION, COMPENSATION, ...); None where the lookup does not show
    them."""

    text: Optional[str]
    role: Optional[str]
    kind: Optional[str] = None
    provider: Optional[str] = None
    location: Optional[str] = None
    schema_mode: Optional[str] = None

    @staticmethod
    def of(information: str) -> "Described":
        """From `SHOW TABLE EXTENDED`'s information (`key: value` lines)."""
        role = None
        # The last such line: a view's text, shown before it, may hold one of its own.
        matches = re.findall(r"(?:^|\n)Table Properties: \[(.*)\]", information)
        for entry in (matches[-1] if matches else "").split(", "):
            key, _, value = entry.partition("=")
            if key == ROLE_PROPERTY:
                role = value
        # Spark shows the type and the format before the comment (which may span lines), a
        # table's location after it, and a view's text in place of a location.
        head = information.split("View Text: ", 1)[0]
        before_comment = head.split("\nComment: ", 1)[0]
        kind = re.findall(r"(?:^|\n)Type: (.*)", before_comment)
        provider = re.findall(r"(?:^|\n)Provider: (.*)", before_comment)
        location = re.findall(r"(?:^|\n)Location: (.*)", head)
        # A view's mode follows its text (the last such line: the text may hold one of its own);
        # Spark leaves the line out where WITH SCHEMA is turned off (spark.sql.legacy.viewSchemaBindingMode).
        mode = re.findall(r"(?:^|\n)View Schema Mode: (.*)", information.rsplit("\nTable Properties: [", 1)[0])
        return Described(
            view_text_of(information),
            role,
            kind[0].strip() if kind else None,
            provider[0].strip().lower() if provider else None,
            location[-1].strip() if location else None,
            mode[-1].strip().upper() if mode else None,
        )


class Catalog:
    """Catalog lookups and DDL for one session."""

    def __init__(self, conn: Connection):
        self.conn = conn
        # {(schema, name), lowercased: Described, or None for no object} from one lookup of
        # several names (`remember`): publish_view uses an entry once instead of asking again.
        self.seen: dict = {}
        self.schemas_made: set = set()  # CREATE SCHEMA IF NOT EXISTS once per schema

    def remember(self, schema: str, names: Iterable[str]) -> None:
        """Describe `names` of `schema` in one statement for the publish_view calls that follow
        (a refresh's source views: one round trip instead of one per source). A failed lookup
        leaves each publish_view to ask for itself."""
        try:
            found = self.describe(schema, names)
        except Exception:  # noqa: BLE001 - each publish_view looks its name up alone
            return
        self.seen.update({(schema.lower(), n.lower()): d for n, d in found.items()})

    def lookup(self, schema: str, name: str) -> tuple[bool, Optional[Described]]:
        """(answered, what the catalog holds under `schema.name`: None for nothing). The answer
        is kept for the publish_view of that name that follows; (False, None) when the lookup
        failed."""
        self.remember(schema, [name])
        key = (schema.lower(), name.lower())
        return (True, self.seen[key]) if key in self.seen else (False, None)

    def properties(self, schema: str, name: str) -> Optional[dict]:
        """The object's table properties, or None when no table or view has that name."""
        if not self.exists(schema, name):  # asked first: a failed lookup logs a page of JSON
            return None
        try:
            rows = self.conn.rows(f"SHOW TBLPROPERTIES {quote(schema, name)}")
        except Exception as err:  # noqa: BLE001 - Spark reports a missing object as an AnalysisException
            if "TABLE_OR_VIEW_NOT_FOUND" in str(err) or "SCHEMA_NOT_FOUND" in str(err):
                return None
            raise
        return {r[0]: r[1] for r in rows}

    def table_type(self, schema: str, name: str) -> Optional[str]:
        return self.conn.table_type(quote(schema, name))

    def exists(self, schema: str, name: str) -> bool:
        try:
            return self.conn.table_exists(quote(schema, name))
        except Exception:  # noqa: BLE001
            return False

    def view_text(self, schema: str, name: str) -> Optional[str]:
        """The SQL text of the view `schema.name` as the catalog holds it; None when there is no
        view of that name."""
        return self._view_of(schema, name)[0]

    def _view_of(self, schema: str, name: str) -> tuple[Optional[str], Optional[str]]:
        """(the view's text, its schema mode where shown) from `DESCRIBE TABLE EXTENDED`;
        (None, None) when there is no view of that name."""
        try:
            rows = self.conn.rows(f"DESCRIBE TABLE EXTENDED {quote(schema, name)}")
        except Exception:  # noqa: BLE001 - no such object (or schema)
            return None, None
        text = mode = None
        for row in rows:
            key = str(row[0]).strip() if row else ""
            if key == "View Text" and text is None:
                text = str(row[1])
            elif key == "View Schema Mode" and text is not None:
                mode = str(row[1]).strip().upper()
        return text, mode

    def describe(self, schema: str, names: Iterable[str]) -> dict:
        """{name: Described, or None when no table or view has that name} for several names of
        one schema, in one catalog statement where the names allow it (each statement is a
        round trip, ~0.1 s over Spark Connect; `SHOW TBLPROPERTIES` also needs an existence
        check first, as a failed lookup logs a page of JSON)."""
        names = list(dict.fromkeys(names))
        plain = [n for n in names if _PLAIN_NAME.match(n)]
        out: dict = {}
        for name in names:
            if name not in plain:
                props = self.properties(schema, name)
                if props is None:
                    out[name] = None
                    continue
                text, mode = self._view_of(schema, name)
                out[name] = Described(text, props.get(ROLE_PROPERTY), schema_mode=mode)
        if not plain:
            return out
        try:
            rows = self.conn.rows(f"SHOW TABLE EXTENDED IN {quote(schema)} LIKE {_sql_string('|'.join(plain))}")
        except Exception as err:  # noqa: BLE001 - Spark reports a missing schema as an AnalysisException
            if "SCHEMA_NOT_FOUND" not in str(err) and "NoSuchDatabase" not in str(err):
                raise
            rows = []
        found = {}
        for namespace, table, temporary, information, *_ in rows:
            if str(temporary).lower() in ("true", "1") or str(namespace).lower() != schema.lower():
                continue  # a session's temporary view of the name: not the catalog's object
            found[str(table).lower()] = Described.of(str(information or ""))
        out.update({n: found.get(n.lower()) for n in plain})
        return out

    def view_texts(self, schema: str, names: Iterable[str]) -> dict:
        """{name: the view's SQL text, or None when no view of that name}."""
        try:
            described = self.describe(schema, names)
        except Exception:  # noqa: BLE001 - an unreadable entry counts as not shown
            return {}
        return {n: d.text if d is not None else None for n, d in described.items()}

    def role(self, schema: str, name: str) -> tuple[bool, Optional[str]]:
        """(exists, the role this project gave it or None when it is not ours).

        Only the role property proves ownership: what a view reads says nothing about who made
        it (a user's view may read a source's files, or files at a path that starts alike)."""
        found = self.describe(schema, [name]).get(name)
        if found is None:
            return False, None
        return True, found.role

    def publish_view(
        self,
        schema: str,
        name: str,
        query: exp.Expr,
        role: str,
        model: str,
        take_over: bool = False,
        published_before: bool = False,
        schema_mode: Optional[str] = None,
    ) -> bool:
        """Create or alter the view `schema.name` to `query`. Returns False (nothing done) when
        the name belongs to an object this project did not create and `take_over` is off for a
        source; raises NameTaken for the stream table's own name in that case.

        `schema_mode` (EVOLUTION): how the view's columns follow what it reads, set where the
        view is made or its text altered (Spark's own default keeps the columns the view was
        made with).

        `published_before`: this catalog's marker says an earlier refresh published the view.
        With `take_over` (the caller owns the name) the view is then altered at once, without
        asking the catalog who owns it first: a view of someone else's would be taken over
        anyway, and anything else makes ALTER VIEW fail and takes the long way."""
        from python_helpers.dvm.sqlgen import render

        text = render(query)
        key = (self.conn.key, schema.lower(), name.lower())
        with _DDL_LOCK:
            found_free = key in _CHECKED
            _CHECKED.discard(key)
            known = _PUBLISHED.get(key)
            if known == text:
                return True
            if known is not None or (published_before and take_over and len(text) <= MAX_VIEW_TEXT):
                # This process made the view, or an earlier refresh did and the caller owns the
                # name: swap the text (ALTER VIEW is one atomic catalog update; CREATE OR REPLACE
                # is a drop and a create that a reader can fall into).
                try:
                    self.conn.execute(f"ALTER VIEW {quote(schema, name)} AS {text}")
                    _PUBLISHED[key] = text
                    return True
                except Exception:  # noqa: BLE001 - dropped or replaced meanwhile: the long way below
                    _PUBLISHED.pop(key, None)
            check_view_text(model, f"{schema}.{name}", text)
            seen_key = (schema.lower(), name.lower())
            if seen_key not in self.seen and found_free:
                self.seen[seen_key] = None
            if seen_key in self.seen:
                found = self.seen.pop(seen_key)
                try:
                    return self._write_view(
                        schema,
                        name,
                        text,
                        role,
                        model,
                        take_over,
                        found is not None,
                        found.role if found else None,
                        schema_mode,
                    )
                except Exception:  # noqa: BLE001 - the object changed since `remember`: look again
                    pass
            exists, owner = self.role(schema, name)
            return self._write_view(schema, name, text, role, model, take_over, exists, owner, schema_mode)

    def _write_view(
        self,
        schema: str,
        name: str,
        text: str,
        role: str,
        model: str,
        take_over: bool,
        exists: bool,
        owner,
        schema_mode: Optional[str] = None,
    ) -> bool:
        """publish_view's DDL once the catalog's answer for the name is known (`exists`, and the
        role property it carries as `owner`); under _DDL_LOCK."""
        key = (self.conn.key, schema.lower(), name.lower())
        binding = f"WITH SCHEMA {schema_mode} " if schema_mode else ""
        if not exists:
            if schema.lower() not in self.schemas_made:
                self.conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
                self.schemas_made.add(schema.lower())
            self.conn.execute(
                f"CREATE VIEW {quote(schema, name)} {binding}"
                f"TBLPROPERTIES ({_sql_string(ROLE_PROPERTY)} = {_sql_string(role)}) AS {text}"
            )
        elif owner is not None:
            self.conn.execute(f"ALTER VIEW {quote(schema, name)} AS {text}")
            if schema_mode:  # a view made before the mode was asked for, or by Spark's default
                self.conn.execute(f"ALTER VIEW {quote(schema, name)} {binding.strip()}")
        elif role == SOURCE:
            return False
        elif take_over and self.table_type(schema, name) == "VIEW":
            self.conn.execute(f"ALTER VIEW {quote(schema, name)} AS {text}")
            self._mark(schema, name, role)
        else:
            kind = (self.table_type(schema, name) or "object").lower()
            raise NameTaken(
                model,
                f"{schema}.{name} is a {kind} that dbt-spark-stream did not create; it is left as it is",
                "drop or rename it, or give the stream table another name",
            )
        _PUBLISHED[key] = text
        return True

    def forget_view(self, schema: str, name: str) -> None:
        """Forget what this process believes it published, read or found free under
        `schema.name`: the catalog, just asked, shows something else (or the view was dropped)."""
        key = (self.conn.key, schema.lower(), name.lower())
        with _DDL_LOCK:
            _PUBLISHED.pop(key, None)
            _VERIFIED.pop(key, None)
            _CHECKED.discard(key)

    def drop_own_view(self, schema: str, name: str, role: str) -> bool:
        """Drop the view `schema.name` when it carries `role` (this project made it); anything
        else is left alone. Returns whether it dropped it."""
        with _DDL_LOCK:
            exists, owner = self.role(schema, name)
            if not exists or owner != role:
                return False
            self.conn.execute(f"DROP VIEW IF EXISTS {quote(schema, name)}")
            self.forget_view(schema, name)
            return True

    def check_name(
        self, schema: str, name: str, model: str, take_over: bool = False, information: Optional[str] = None
    ) -> None:
        """Refuse, before anything is written, a name that belongs to an object of someone else's
        (publish_view would refuse it after the storage commit).

        `information`: the object as dbt's relation cache described it at the start of the run.
        When that shows this project's role property, the name is ours and the catalog is not
        asked again (a round trip per full refresh); an object put there since is still refused
        where the view is published, after the commit, and the next run publishes again."""
        if known(self.conn, schema, name):
            return
        if information and Described.of(information).role is not None:
            return
        exists, owner = self.role(schema, name)
        if not exists:
            with _DDL_LOCK:
                _CHECKED.add((self.conn.key, schema.lower(), name.lower()))
        if not exists or owner is not None:
            return
        kind = self.table_type(schema, name)
        if take_over and kind == "VIEW":
            return
        raise NameTaken(
            model,
            f"{schema}.{name} is a {(kind or 'object').lower()} that dbt-spark-stream did not "
            "create; it is left as it is, and nothing was written",
            "drop or rename it, or give the stream table another name",
        )

    def _mark(self, schema: str, name: str, role: str) -> None:
        self.conn.execute(
            f"ALTER VIEW {quote(schema, name)} SET TBLPROPERTIES ({_sql_string(ROLE_PROPERTY)} = {_sql_string(role)})"
        )


def catalog_key(conn: Connection) -> str:
    """A short name of the metastore the session publishes to: views live per catalog, the
    stored result and its generations per storage, and several catalogs may share a storage."""
    import hashlib

    parts = []
    for key in CATALOG_SETTINGS:
        try:
            parts.append(str(conn.conf(key, "")))
        except Exception:  # noqa: BLE001
            parts.append("")
    return hashlib.md5("|".join(parts).encode()).hexdigest()[:12]


def view_text_of(information: str) -> Optional[str]:
    """The view text in a catalog object's description (`SHOW TABLE EXTENDED`'s information,
    or `DESCRIBE TABLE EXTENDED`'s rows as `key: value` lines, as dbt's relation cache keeps it);
    None for a table."""
    head, marker, rest = information.partition("View Text: ")
    if not marker or (head and not head.endswith("\n")):
        return None
    end = rest.find("\nView Original Text: ")
    return rest.split("\n", 1)[0] if end < 0 else rest[:end]


def verified(conn: Connection, schema: str, name: str, generation: Optional[str]) -> bool:
    """Did this process read the view `schema.name` showing `generation` (or publish it)?"""
    if known(conn, schema, name):
        return True
    with _DDL_LOCK:
        key = (conn.key, schema.lower(), name.lower())
        return key in _VERIFIED and _VERIFIED[key] == generation


def note_verified(conn: Connection, schema: str, name: str, generation: Optional[str]) -> None:
    with _DDL_LOCK:
        _VERIFIED[(conn.key, schema.lower(), name.lower())] = generation


def known(conn: Connection, schema: str, name: str) -> bool:
    """Did this process publish the view `schema.name` in the engine's session?"""
    with _DDL_LOCK:
        return (conn.key, schema.lower(), name.lower()) in _PUBLISHED


def forget(conn: Connection) -> None:
    """Forget what this process believes it published, or read, in the engine's session (a view
    was found missing or behind)."""
    with _DDL_LOCK:
        for seen in (_PUBLISHED, _VERIFIED):
            for key in [k for k in seen if k[0] == conn.key]:
                del seen[key]
        _CHECKED.difference_update([k for k in _CHECKED if k[0] == conn.key])
