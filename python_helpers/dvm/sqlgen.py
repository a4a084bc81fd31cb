"""Small builders for the SQL the delta rules emit (sqlglot expressions, never string pasting)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from sqlglot import exp

from python_helpers.dvm.nested_sums import without_inner_sums
from python_helpers.dvm.tree import WEIGHT
from python_helpers.sql.dialect import spark_sql


@dataclass
class Context:
    """What a refresh binds the abstract relations to (docs/architecture.md, Engines).

    changes(relation) -> a FROM-able expression with the source's columns plus __dvm_w;
    snapshot(relation, "old"|"new") -> the source at the pinned old / new version;
    changed: the relations whose pinned range holds changes (others have an empty delta);
    consolidated: those whose change rows the engine consolidated already (no Spark GROUP BY).
    """

    changes: Callable[[str], exp.Expr]
    snapshot: Callable[[str, str], exp.Expr]
    changed: set = field(default_factory=set)
    consolidated: set = field(default_factory=set)
    small_delta: bool = False  # the engine counted few change rows: broadcast the delta side
    # A small delta against a large stored result (the engine knows its size): the MERGE rows'
    # query reads only the stored rows the delta can match (stored_result.touched_storage). Off
    # for small stored results, where the extra broadcast job costs more than the join it saves.
    restrict_storage: bool = False
    # The engine looks up the stored rows of a bag's losing tuples itself, after the query (the
    # embedded engine where delta-rs applies the MERGE in the dbt process): a bag stored as its
    # rows come then sends its consolidated change alone (MaintainedResult.sends_change), and Spark
    # does not scan the stored result for it.
    engine_looks_up: bool = False
    # The engine's way to compute an intermediate once and read it back as a relation (None:
    # keep it inline). Used for what the SQL reads more than once: a recursion's delta, the
    # changed keys of a key-restricted operator over a computed delta (a join's, an aggregate's).
    materialize: Optional[Callable[[exp.Expr], exp.Expr]] = None
    # The engine's way to read only the part of a snapshot that can match the change of another
    # relation on an equality: keyed_snapshot(relation, version, column, changed_relation,
    # changed_column, more=()) -> a FROM-able expression, or None when it cannot narrow the
    # read; `more` names further (changed_relation, changed_column) pairs whose changes' keys
    # count too. An engine that also keeps only the rows holding a key (a key list), not only
    # the files that can, says so with `keyed_rows` on the expression.
    keyed_snapshot: Optional[Callable[..., Optional[exp.Expr]]] = None
    # The engine's way to read a source's snapshot only where some of its columns can meet a
    # computed relation of keys: rows_for_keys(relation, version, [(source column, key column),
    # ...], keys) -> a FROM-able expression holding at least every row whose columns meet a key
    # row null-safely, or None (restricted_reads.read_for_keys; the caller restricts exactly).
    rows_for_keys: Optional[Callable[..., Optional[exp.Expr]]] = None
    # The engine's judgement whether a source is too large for Spark to broadcast it in a join
    # (None: unknown, taken as large).
    large_source: Optional[Callable[[str], bool]] = None
    # The engine's judgement that a filter over a source's change keeps none of its rows:
    # empty_change(relation, key, query) -> True only when it knows `query` (the filter's delta
    # over the change rows) is empty; `key` names the question (the filter and the columns),
    # asked again by a second rendering. The embedded engine asks Spark only of rows the driver
    # read and consolidated, which the optimizer folds the filter into (no job; a change that
    # needs Spark's GROUP BY to consolidate, or rows past pyspark's local-relation threshold,
    # would make it one). None: never asked.
    empty_change: Optional[Callable[[str, str, exp.Expr], bool]] = None
    _alias: int = 0

    def __post_init__(self):
        # A relation outside `changed` has an empty delta, so its old rows are its new rows:
        # every read of it is the new version. The engine binds one snapshot instead of two,
        # and Spark sees one relation where a rule recomputes an unchanged side at both
        # versions (nested outer joins over sublinks read each such side four times).
        snapshot, keyed, changed = self.snapshot, self.keyed_snapshot, frozenset(self.changed)
        self.snapshot = lambda relation, version: snapshot(relation, version if relation in changed else "new")
        if keyed is not None:
            self.keyed_snapshot = lambda relation, version, *rest, **more: keyed(
                relation, version if relation in changed else "new", *rest, **more
            )
        by_keys = self.rows_for_keys
        if by_keys is not None:
            self.rows_for_keys = lambda relation, version, *rest: by_keys(
                relation, version if relation in changed else "new", *rest
            )

    def alias(self, base: str = "t") -> str:
        self._alias += 1
        return f"_{base}{self._alias}"


def known_empty(query: exp.Expr) -> bool:
    """Has the engine found `query` empty? Context.materialize serves an empty intermediate as
    `SELECT * FROM <view> WHERE FALSE` (which Spark's optimizer also sees)."""
    where = query.args.get("where") if isinstance(query, exp.Select) else None
    # Any star select under WHERE FALSE is empty, but not a grouped or global aggregate's.
    return where is not None and where.this == exp.false() and _is_served_relation(query, "where", "joins")


def _is_served_relation(query: exp.Expr, *allowed: str) -> bool:
    """Is `query` the form Context.materialize serves (`SELECT * FROM <view>`, plus the clauses
    `allowed`)? A copy the rules joined, grouped or projected since is not: it may hold other
    rows."""
    if not isinstance(query, exp.Select):
        return False
    from_ = query.args.get("from_") or query.args.get("from")
    clauses = {"where", "joins", "group", "having", "limit", "laterals"} - set(allowed)
    return (
        from_ is not None
        and isinstance(from_.this, exp.Table)
        and [type(e) for e in query.expressions] == [exp.Star]
        and not any(query.args.get(k) for k in clauses)
    )


def col(name: str, table: Optional[str] = None) -> exp.Column:
    return exp.column(name, table=table)


def sub(query: exp.Expr, alias: str) -> exp.Subquery:
    return exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier(alias)))


def alias(expression: exp.Expr, name: str) -> exp.Expr:
    # Not always an exp.Alias: alias_ names a subquery or table through its own alias.
    return exp.alias_(expression, name, quoted=False)


def weight(table: Optional[str] = None) -> exp.Column:
    return col(WEIGHT, table)


def repeat_rows(query: exp.Select, times: exp.Expr, name: str) -> exp.Select:
    """Each row of `query` repeated `times` times (a LATERAL VIEW over explode(sequence(1, n)),
    `name` aliasing it): for consumers that take multiplicity as repeated rows."""
    return explode_into(
        query, exp.Anonymous(this="sequence", expressions=[exp.Literal.number(1), times]), name, "__dvm_n"
    )


def explode_into(query: exp.Select, array: exp.Expr, name: str, column: str) -> exp.Select:
    """Each row of `query` once per element of `array`, the element as `column` (a LATERAL VIEW
    over explode, `name` aliasing it)."""
    return query.lateral(
        exp.Lateral(
            this=exp.Explode(this=array),
            view=True,
            alias=exp.TableAlias(this=exp.to_identifier(name), columns=[exp.to_identifier(column)]),
        ),
        copy=False,
    )


def select_from(columns: list, source: exp.Expr) -> exp.Select:
    return exp.Select(expressions=list(columns)).from_(source, copy=False)


def consolidate(ctx: Context, delta: exp.Expr, columns: list[str], fold: bool = False) -> exp.Select:
    """GROUP BY the columns, SUM the weights, drop rows whose weight cancels to zero. With
    `fold` (a result's root), a consolidation inside `delta` that only projections, filters and
    UNION ALL separate from this one is left out: this one sums the same weights
    (nested_sums.py)."""
    a = ctx.alias("c")
    total = exp.Sum(this=weight())
    rows = without_inner_sums(delta) if fold else delta
    query = select_from([col(c) for c in columns] + [alias(total.copy(), WEIGHT)], sub(rows, a))
    if columns:
        query = query.group_by(*[col(c) for c in columns], copy=False)
    return query.having(exp.NEQ(this=total, expression=exp.Literal.number(0)), copy=False)


def null_safe_match(left: list[str], right: list[str], ltab: str, rtab: str) -> exp.Expr:
    conds = [exp.NullSafeEQ(this=col(a, ltab), expression=col(b, rtab)) for a, b in zip(left, right)]
    return exp.and_(*conds) if conds else exp.true()


def semi_join(query_alias: str, query: exp.Expr, keys: list[str], key_query: exp.Expr, ctx: Context) -> exp.Select:
    """Rows of `query` whose `keys` appear (null-safe) in `key_query` (delta key restriction)."""
    k = ctx.alias("k")
    on = null_safe_match(keys, keys, query_alias, k)
    return (
        exp.Select(expressions=[exp.Star()])
        .from_(sub(query, query_alias), copy=False)
        .join(sub(key_query, k), on=on, join_type="LEFT SEMI", copy=False)
    )


def union_all(queries: Sequence[Optional[exp.Expr]]) -> Optional[exp.Expr]:
    """UNION ALL of the queries that are not None; None when there is none."""
    present = [q for q in queries if q is not None]
    if not present:
        return None
    out = present[0]
    for q in present[1:]:
        out = exp.Union(this=out, expression=q, distinct=False)
    return out


def union_all_of(queries: Sequence[exp.Expr]) -> exp.Expr:
    """UNION ALL of queries the caller always has at least one of."""
    out = union_all(queries)
    if out is None:
        raise ValueError("union_all_of: no query to union")
    return out


def row_id(columns: list[str], table: Optional[str] = None) -> exp.Expr:
    """128-bit identity of a tuple: md5 over its JSON form with positional field names.

    md5 (128 bits) keeps the chance of two different keys colliding negligible at billions of
    rows; to_json keeps NULL apart from any value and types apart by their rendering.
    """
    if not columns:
        return exp.Literal.string("__dvm_single_row")
    return exp.MD5(this=_json_of(columns, table))


# Key column types whose text form is exact, cheap to build and independent of session settings:
# an integer's or a boolean's text, a length-prefixed string, a date as its day number, a
# timestamp as its microseconds since the epoch (an instant: no time zone), a decimal of scale 6
# or less as its digits at that scale (plain_key_id). Spark prints a decimal of a larger scale
# in scientific notation when ANSI mode is off and small values (`0E-18`), plainly when it is
# on: those keep the digest.
_PLAIN_KEY_TYPES = frozenset({"tinyint", "smallint", "int", "bigint", "boolean", "string", "date", "timestamp"})
_DECIMAL_TYPE = re.compile(r"decimal\(\d+,[0-6]\)")


def _plain(spark_type: Optional[str]) -> bool:
    return spark_type is not None and (spark_type in _PLAIN_KEY_TYPES or bool(_DECIMAL_TYPE.fullmatch(spark_type)))


def plain_key_id(columns: list[str], table: Optional[str], types: Optional[list]) -> Optional[exp.Expr]:
    """A group key of the types above (`types`: their Spark types) as its values' text joined by
    `|`, NULL as `n`; none of the texts holds `|` or starts with `n` except a string's, which is
    `<length>:<text>`. It reads back one way only, so two keys never share it. None for a key of
    other types (or none): the md5 of its JSON form identifies those (row_id). Spark's `to_json`
    is not compiled into its generated code and md5 costs as much again: 1.2-1.7 s of the 6 M-row
    fact's build. Which form a stored result has is part of its plan's digest, and so is a
    decimal's declared type (its text depends on the scale): a stored result whose key changes
    form or type is rebuilt once."""
    if not columns or types is None or len(types) != len(columns) or not all(_plain(t) for t in types):
        return None
    parts: list[exp.Expr] = []
    for i, (c, t) in enumerate(zip(columns, types)):
        if i:
            parts.append(exp.Literal.string("|"))
        parts.append(_plain_key_part(col(c, table), t))
    return parts[0] if len(parts) == 1 else exp.Anonymous(this="concat", expressions=parts)


def _plain_key_part(value: exp.Expr, spark_type: str) -> exp.Expr:
    null = exp.Literal.string("n")

    def null_or(text: exp.Expr) -> exp.Expr:
        return exp.If(this=exp.Is(this=value.copy(), expression=exp.Null()), true=null, false=text)

    if spark_type == "string":
        length = exp.Cast(this=exp.Length(this=value.copy()), to=exp.DataType.build("string"))
        return null_or(exp.Anonymous(this="concat", expressions=[length, exp.Literal.string(":"), value.copy()]))
    if spark_type == "date":
        value = exp.Anonymous(this="unix_date", expressions=[value.copy()])
    elif spark_type == "timestamp":
        value = exp.Anonymous(this="unix_micros", expressions=[value.copy()])
    elif spark_type.startswith("decimal"):
        # Cast to the declared type, so the type is in the SQL the plan digest hashes (the text
        # depends on the scale). The value always fits (both sides are analysed alike, and a
        # source's type change rebuilds); were it not to, the id stops the query instead of
        # taking NULL's `n`.
        declared = exp.Cast(this=value.copy(), to=exp.DataType.build(spark_type, dialect="spark"))
        fitted = exp.Coalesce(
            this=exp.Cast(this=declared, to=exp.DataType.build("string")),
            expressions=[
                exp.Anonymous(
                    this="raise_error",
                    expressions=[exp.Literal.string(f"a key value does not fit its declared type {spark_type}")],
                )
            ],
        )
        return null_or(fitted)
    return exp.Coalesce(this=exp.Cast(this=value.copy(), to=exp.DataType.build("string")), expressions=[null])


def _json_of(columns: list[str], table: Optional[str]) -> exp.Expr:
    args = []
    for i, c in enumerate(columns):
        args.extend([exp.Literal.string(f"k{i}"), col(c, table)])
    struct = exp.Anonymous(this="named_struct", expressions=args)
    # Timestamps in UTC with all six fractional digits: an id must not depend on the session's
    # time zone, and two keys a microsecond apart must not share one (the default keeps millis).
    # NULL fields left out whatever spark.sql.jsonGenerator.ignoreNullFields says: the session
    # setting would otherwise decide whether (1, NULL) is {"k0":1} or {"k0":1,"k1":null}.
    options = exp.Anonymous(
        this="map",
        expressions=[
            exp.Literal.string(x)
            for x in (
                "ignoreNullFields",
                "true",
                "timeZone",
                "UTC",
                "timestampFormat",
                "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
                "timestampNTZFormat",
                "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
            )
        ],
    )
    return exp.Anonymous(this="to_json", expressions=[struct, options])


_COMPOUND = (exp.Binary, exp.Not, exp.Neg, exp.Is)


def parenthesize(expression: exp.Expr) -> exp.Expr:
    """Wrap every compound operand of an operator in parentheses.

    Trees built with sqlglot's constructors carry no Paren nodes, and the generator does not
    add them (NOT (a AND b) would print as NOT a AND b), so precedence is made explicit here.
    """

    def wrap(node):
        if isinstance(node, _COMPOUND):
            for key in ("this", "expression"):
                child = node.args.get(key)
                if isinstance(child, _COMPOUND):
                    node.set(key, exp.Paren(this=child))
        return node

    return expression.copy().transform(wrap, copy=False)


def render(expression: exp.Expr) -> str:
    """The Spark SQL text of a generated query."""
    return spark_sql(parenthesize(expression))


KEYED_ROWS = "dvm_keyed_rows"  # in an expression's meta: rows kept by a key list (keyed_snapshot)


def keyed_rows(relation: exp.Expr) -> exp.Expr:
    """Mark a keyed read whose rows are only those holding one of the change's keys."""
    relation.meta[KEYED_ROWS] = True
    return relation


# In an intermediate's meta: rows of the final query itself (the MERGE rows' delta or groups),
# computed once ahead of it only so that Spark does not compute them twice; judged as the final
# query is (read_budget), not as what is computed before it.
PART_OF_FINAL = "dvm_part_of_final"


def part_of_final(query: exp.Expr) -> exp.Expr:
    query.meta[PART_OF_FINAL] = True
    return query


def is_part_of_final(query: exp.Expr) -> bool:
    return bool(query.meta.get(PART_OF_FINAL))


# In an intermediate's meta: a boolean column the engine may count while it computes the
# intermediate (an aggregate's rescan flag); in the served relation's meta: that no row held it
# TRUE. A rescan is then known to be needed by no group without a query of its own asking.
COUNTED_FLAG = "dvm_counted_flag"
FLAG_NEVER_SET = "dvm_flag_never_set"


def counting_flag(query: exp.Expr, column: str) -> exp.Expr:
    query.meta[COUNTED_FLAG] = column
    return query


def counted_flag(query: exp.Expr) -> Optional[str]:
    return query.meta.get(COUNTED_FLAG)


def flag_never_set(served: exp.Expr) -> exp.Expr:
    served.meta[FLAG_NEVER_SET] = True
    return served


def is_flag_never_set(served: exp.Expr) -> bool:
    """Marked by the engine, and still the served relation itself (`SELECT * FROM <view>`): a
    copy the rules joined, filtered or projected since may no longer hold the rows counted."""
    return bool(served.meta.get(FLAG_NEVER_SET)) and _is_served_relation(served)


def reads_keyed_rows(query: exp.Expr) -> bool:
    """Does `query` read a keyed read marked by keyed_rows (the mark survives copies)?"""
    return any(node.meta.get(KEYED_ROWS) for node in query.walk())
