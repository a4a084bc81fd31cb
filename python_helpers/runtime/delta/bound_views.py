"""What both engines' bindings share: the relations of one refresh as temporary views named by
the refresh's id (dropped at its end), the change views by source index, materialized
intermediates."""

from __future__ import annotations

import datetime
import uuid
from typing import Optional

from sqlglot import exp

from python_helpers.dvm.sqlgen import counted_flag, flag_never_set, render
from python_helpers.runtime.connections.base import Connection

# Up to this many distinct keys, a key-restricted read also filters rows by them (`IN`): files
# and Parquet pages whose statistics hold none are skipped. Spark hands Parquet an `IN` list as
# a chain of ORs: a few thousand keys overflow an executor thread's stack.
PAGE_FILTER_KEYS = 512


# The kinds of key a key-restricted read writes out as literals (`column IN (<keys>)`): a literal
# must compare as the join's equality does, so column and key of one kind, and values of it.
INTEGRAL, DATE, STRING = "integral", "date", "string"


def _literal(kind: str, value) -> Optional[exp.Expr]:
    if kind == INTEGRAL and isinstance(value, int) and not isinstance(value, bool):
        return exp.Literal.number(value)
    if kind == DATE and isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return exp.Cast(this=exp.Literal.string(value.isoformat()), to=exp.DataType.build("date"))
    if kind == STRING and isinstance(value, str):
        return exp.Literal.string(value)
    return None


def key_in(column: str, values: list, column_kind: Optional[str], key_kind: Optional[str]) -> Optional[exp.Expr]:
    """`column IN (<values>)` for the distinct non-null keys of a change: FALSE when there are
    none (an equality meets no row then); None where a literal could compare otherwise than the
    join (kinds that differ or are unknown, a value not of its kind) or past PAGE_FILTER_KEYS.
    Delta prunes files, and Parquet pages, by such a list; not by an `IN` subquery (a join)."""
    if column_kind is None or column_kind != key_kind or len(values) > PAGE_FILTER_KEYS:
        return None
    literals = [_literal(column_kind, v) for v in sorted(values)]
    if any(lit is None for lit in literals):
        return None
    if not literals:
        return exp.false()
    return exp.In(this=exp.column(exp.to_identifier(column, quoted=True)), expressions=literals)


class BoundViews:
    def __init__(self, conn: Connection, pinned: dict, old_versions: dict, columns: dict, model: str = "?"):
        self.conn = conn
        self.model = model
        self.pinned = pinned  # relation -> PinnedSource (state at v_new)
        self.old = old_versions  # relation -> v_old (None on a full build)
        self.columns = columns  # relation -> columns the query reads (None: all)
        self.id = uuid.uuid4().hex[:12]
        self.views: list[str] = []
        self.views_by_key: dict = {}  # "s<i>_old|new|chg" -> registered temp view
        self.change_counts: dict = {}  # relation -> change rows
        self.files_read = 0
        self.files_skipped = 0
        self.page_filtered = 0  # key-restricted reads that also filter rows by the keys (in Spark)
        self.filtered_here = 0  # key-restricted reads whose rows the engine filtered itself (embedded: Arrow)
        self.key_reads = 0  # sources read for computed keys by the engine itself (embedded: with Arrow)
        self._index = {r: i for i, r in enumerate(sorted(pinned))}
        self._keys: dict = {}  # (relation, column) -> distinct values of the column in its change

    def view_name(self, suffix: str) -> str:
        """A temporary view name of this refresh (dropped by close)."""
        name = self.named(suffix)
        self.views.append(name)
        return name

    def named(self, suffix: str) -> str:
        """The name view_name gives `suffix`, without creating anything to drop."""
        return f"__dvm_{self.id}_{suffix}"

    def changes(self, relation: str) -> exp.Table:
        return self.views_by_key[f"s{self._index[relation]}_chg"].copy()

    def materialize(self, query: exp.Expr) -> exp.Expr:
        """Compute a (small) intermediate once, now, and serve it as a temp view: the SQL that
        reads it several times then does not recompute it (Spark would, for each reference)."""
        name = self.view_name(f"m{len(self.views)}")
        flag = counted_flag(query)
        computed = self.conn.view_of_query(name, render(query), materialize=True, flag=flag)
        served = exp.select("*").from_(exp.to_table(name))
        holds_rows = computed.holds_rows
        if holds_rows is None:
            holds_rows = bool(self.conn.rows(f"SELECT 1 FROM {name} LIMIT 1"))
        if not holds_rows:
            # Spark cannot see that a computed relation is empty; `WHERE FALSE` it can, and its
            # optimizer then drops what only reads it, and the rules see it (sqlgen.known_empty:
            # a group rescan is not even rendered when no group needs one).
            served = served.where(exp.false(), copy=False)
        elif flag is not None and computed.flagged is False:
            flag_never_set(served)  # the rules skip asking whether a row holds it
        return served

    def close(self) -> None:
        for name in self.views:
            self.conn.drop_view(name)
        self.views.clear()
