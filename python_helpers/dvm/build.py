"""Turn a qualified query AST into the operator tree (python_helpers.dvm.tree).

Input: the output of sql.parse.qualify_query, so every column is `alias.column` and `*` is
expanded. Each FROM item gets its columns renamed to `<alias>__<column>` (deduplicated), which
makes names unique inside a query block; expressions are rewritten to those names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from sqlglot import exp

from python_helpers.dvm.aggregate_state import algebraic_kind
from python_helpers.dvm.recursion_linearity import NotLinear, reads_itself, working_table_reads
from python_helpers.dvm.tree import (
    RECURSION_PREFIX,
    AggCall,
    Aggregate,
    Distinct,
    Filter,
    Generate,
    Join,
    Node,
    OuterJoin,
    Project,
    Recursive,
    Scan,
    SemiJoin,
    SetOp,
    UnionAll,
    Window,
)
from python_helpers.errors import UnsupportedSql
from python_helpers.sql.aggregates import (
    ORDER_DEPENDENT_AGGREGATES,
    group_aggregates,
    is_aggregate,
    window_function,
)
from python_helpers.sql.parse import relation_name
from python_helpers.sql.predicates import conjuncts
from python_helpers.sql.support import function_name
from python_helpers.sql.windows import inline_named_windows


@dataclass
class _RecursiveCte:
    """A CTE of WITH RECURSIVE that reads itself; `ref` is set while its steps are built, so a
    reference from inside them becomes a Scan of the working table."""

    cte: exp.CTE
    ref: Optional[str] = None


@dataclass
class _Scope:
    """Column names visible in one query block: (alias, column) -> unique name."""

    names: dict

    def rewrite(self, model: str, expression: exp.Expr) -> exp.Expr:
        def swap(node):
            if isinstance(node, exp.Column):
                key = (node.table.lower(), node.name.lower())
                if key not in self.names:
                    raise UnsupportedSql(model, f"could not resolve column {node.sql('spark')}")
                return exp.column(self.names[key])
            return node

        return expression.copy().transform(swap)


class TreeBuilder:
    def __init__(self, model: str):
        self.model = model
        self._counter = 0
        self._aliases = {}

    # -- entry -----------------------------------------------------------------------------
    def build(self, query: exp.Expr, ctes: dict | None = None) -> Node:
        ctes = dict(ctes or {})
        with_ = query.args.get("with_") or query.args.get("with")
        if with_ is not None:
            recursive = bool(with_.args.get("recursive"))
            for cte in with_.expressions:
                name = cte.alias_or_name.lower()
                ctes[name] = _RecursiveCte(cte) if recursive and reads_itself(cte.this, name) else cte.this
        if isinstance(query, exp.Union):
            return self._union(query, ctes)
        if isinstance(query, (exp.Intersect, exp.Except)):
            return self._set_op(query, ctes)
        if isinstance(query, exp.Subquery):
            return self.build(query.this, ctes)
        if isinstance(query, exp.Select):
            return self._select(query, ctes)
        raise UnsupportedSql(self.model, f"{query.key.upper()} query")

    # The names a query block's output is referred to by from outside (its select aliases),
    # kept beside the unique internal column names.
    _aliases: dict

    def aliases(self, node: Node) -> list[str]:
        return self._aliases.get(id(node), node.columns)

    def _set_aliases(self, node: Node, names: list[str]) -> Node:
        self._aliases[id(node)] = names
        return node

    # -- set operations --------------------------------------------------------------------
    def _union(self, union: exp.Union, ctes: dict) -> Node:
        inputs = []
        for side in (union.this, union.expression):
            child = self.build(side, ctes)
            if (
                isinstance(child, UnionAll)
                and not isinstance(side, exp.Subquery)
                and union.args.get("distinct") is False
            ):
                inputs.extend(child.inputs)
            else:
                inputs.append(child)
        widths = {len(c.columns) for c in inputs}
        if len(widths) != 1:
            raise UnsupportedSql(self.model, "UNION branches with different column counts")
        node: Node = UnionAll(columns=list(inputs[0].columns), inputs=inputs)
        if union.args.get("distinct"):
            node = Distinct(columns=list(node.columns), child=node)
        return self._set_aliases(node, self.aliases(inputs[0]))

    def _set_op(self, query: exp.Expr, ctes: dict) -> Node:
        left, right = self.build(query.this, ctes), self.build(query.expression, ctes)
        if len(left.columns) != len(right.columns):
            raise UnsupportedSql(self.model, f"{query.key.upper()} branches with different column counts")
        op = "intersect" if isinstance(query, exp.Intersect) else "except"
        node = SetOp(columns=list(left.columns), left=left, right=right, op=op, all=query.args.get("distinct") is False)
        return self._set_aliases(node, self.aliases(left))

    # -- one SELECT block ------------------------------------------------------------------
    def _select(self, select: exp.Select, ctes: dict) -> Node:
        distinct = select.args.get("distinct")
        if distinct is not None and distinct.args.get("on"):
            raise UnsupportedSql(self.model, "DISTINCT ON")
        from_ = select.args.get("from_") or select.args.get("from")
        if from_ is None:
            raise UnsupportedSql(self.model, "SELECT without FROM")
        inline_named_windows(select)
        referenced = self._referenced_columns(select)
        names: dict = {}
        first = self._from_item(from_.this, ctes, referenced, names)
        joined = [
            (join, self._from_item(join.this, ctes, referenced, names)) for join in select.args.get("joins") or []
        ]
        laterals = [self._lateral_names(lateral, names) for lateral in select.args.get("laterals") or []]
        scope = _Scope(names)
        where = select.args.get("where")
        pending = conjuncts(scope.rewrite(self.model, where.this)) if where is not None else []
        node = first
        for i, (join, right) in enumerate(joined):
            # A later RIGHT / FULL join pads the rows joined so far with NULLs: a WHERE conjunct
            # over them must then stay above it, not be pushed below this join.
            pads_later = any((j.side or "").upper() in ("RIGHT", "FULL") for j, _ in joined[i + 1 :])
            node = self._join(node, right, join, scope, [] if pads_later else pending)
        for lateral, out in laterals:  # after the joins, before WHERE (as Spark applies them)
            node = self._push(node, pending)
            node = Generate(
                columns=node.columns + out,
                child=node,
                generator=scope.rewrite(self.model, lateral.this),
                outer=bool(lateral.args.get("outer")),
                names=out,
            )
        if pending:
            node = Filter(columns=list(node.columns), child=node, predicate=exp.and_(*pending))
        projections = [scope.rewrite(self.model, p.this if isinstance(p, exp.Alias) else p) for p in select.expressions]
        out_names = [p.alias_or_name for p in select.expressions]
        group = select.args.get("group")
        having = select.args.get("having")
        if group is not None or having is not None or any(group_aggregates(p) for p in projections):
            node, projections, having_pred = self._aggregate(node, scope, group, having, projections)
            if having_pred is not None:
                node = Filter(columns=list(node.columns), child=node, predicate=having_pred)
        if any(isinstance(n, exp.Window) for p in projections for n in p.walk()):
            node, projections = self._window(node, projections)
        unique = self._unique_output_names(out_names)
        node = Project(columns=unique, child=node, exprs=projections)
        if distinct is not None:
            node = Distinct(columns=list(node.columns), child=node)
        return self._set_aliases(node, out_names)

    def _join(self, node: Node, right: Node, join: exp.Join, scope: _Scope, pending: list) -> Node:
        """One FROM ... JOIN step (left-deep, in the order written). WHERE conjuncts over the
        columns joined so far are applied below a LEFT / semi / anti join (equivalent there:
        those joins keep or drop each left row whole), so inner joins under them keep their
        predicates and are differentiated as a chain."""
        side = (join.side or "").upper()
        kind = (join.kind or "").upper()
        if join.args.get("using"):
            raise UnsupportedSql(self.model, "JOIN ... USING that could not be resolved")
        on = join.args.get("on")
        on = scope.rewrite(self.model, on) if on is not None else None
        if kind in ("SEMI", "ANTI") and side in ("", "LEFT"):
            node = self._push(node, pending)
            return SemiJoin(columns=list(node.columns), left=node, right=right, condition=on, anti=kind == "ANTI")
        if kind in ("", "OUTER") and side == "LEFT":
            node = self._push(node, pending)
            return OuterJoin(columns=node.columns + right.columns, left=node, right=right, condition=on)
        if kind in ("", "OUTER") and side == "RIGHT":
            return OuterJoin(columns=right.columns + node.columns, left=right, right=node, condition=on)
        if kind in ("", "OUTER") and side == "FULL":
            return OuterJoin(columns=node.columns + right.columns, left=node, right=right, condition=on, kind="full")
        if side or kind not in ("", "INNER", "CROSS"):
            raise UnsupportedSql(self.model, f"{' '.join(p for p in (side, kind) if p)} JOIN")
        return Join(columns=node.columns + right.columns, left=node, right=right, condition=on)

    def _lateral_names(self, lateral: exp.Lateral, names: dict) -> tuple:
        alias = lateral.args.get("alias")
        if not lateral.args.get("view") or alias is None or not alias.columns:
            raise UnsupportedSql(self.model, "LATERAL subquery, or LATERAL VIEW without column names")
        return lateral, [self._name(alias.name.lower(), c.name.lower(), names) for c in alias.columns]

    @staticmethod
    def _push(node: Node, pending: list) -> Node:
        here = set(node.columns)
        below = [c for c in pending if {x.name for x in c.find_all(exp.Column)} <= here]
        if not below:
            return node
        for c in below:
            pending.remove(c)
        return Filter(columns=list(node.columns), child=node, predicate=exp.and_(*below))

    def _window(self, child: Node, projections: list) -> tuple[Node, list]:
        """Window calls become columns of a Window node; the SELECT expressions around them
        (CASE WHEN rank() OVER (...) <= 3, COALESCE(LAG(x) OVER (...), 0)) stay in the Project
        above it: the inner / outer split."""
        calls: dict = {}
        for p in projections:
            for n in p.walk():
                if isinstance(n, exp.Window) and n.sql("spark") not in calls:
                    if any(isinstance(m, exp.Window) for m in n.walk() if m is not n):
                        raise UnsupportedSql(self.model, "window function inside a window function")
                    calls[n.sql("spark")] = (self._fresh(f"__dvm_win_{len(calls)}"), n.copy())
        common = None
        for _, call in calls.values():
            keys = {k.sql("spark"): k for k in call.args.get("partition_by") or []}
            common = keys if common is None else {t: k for t, k in common.items() if t in keys}
        node = Window(
            columns=child.columns + [n for n, _ in calls.values()],
            child=child,
            calls=[c for _, c in calls.values()],
            names=[n for n, _ in calls.values()],
            partition_keys=[k.copy() for k in (common or {}).values()],
        )

        def swap(n):
            if isinstance(n, exp.Window) and n.sql("spark") in calls:
                return exp.column(calls[n.sql("spark")][0])
            return n

        return node, [p.copy().transform(swap) for p in projections]

    def _from_item(self, item: exp.Expr, ctes: dict, referenced: dict, names: dict) -> Node:
        alias = item.alias_or_name.lower()
        wanted = referenced.get(alias, [])
        if isinstance(item, exp.Table) and not item.db and item.name.lower() in ctes:
            target = ctes[item.name.lower()]
            if isinstance(target, _RecursiveCte) and target.ref is not None:  # the working table
                columns = [self._name(alias, c, names) for c in wanted] or [self._fresh(f"{alias}__unit")]
                return Scan(columns=columns, relation=target.ref, source_columns=list(wanted) or [None])
            child = self._recursive(target, ctes) if isinstance(target, _RecursiveCte) else self.build(target, ctes)
            return self._rename(child, alias, wanted, names)
        if isinstance(item, exp.Table):
            if not item.name or item.args.get("version") is not None:
                raise UnsupportedSql(self.model, f"FROM item {item.sql('spark')}")
            columns = [self._name(alias, c, names) for c in wanted] or [self._fresh(f"{alias}__unit")]
            return Scan(columns=columns, relation=relation_name(item), source_columns=list(wanted) or [None])
        if isinstance(item, exp.Subquery):
            child = self.build(item.this, ctes)
            return self._rename(child, alias, wanted, names)
        raise UnsupportedSql(self.model, f"FROM item {item.sql('spark')[:60]}")

    def _recursive(self, target: _RecursiveCte, ctes: dict) -> Node:
        """WITH RECURSIVE r AS (anchors UNION ALL steps): a Recursive node (operators/recursive.py)."""
        cte = target.cte
        name = cte.alias_or_name.lower()
        branches: list = []

        def split(query):
            if (
                isinstance(query, exp.Union)
                and not (query.args.get("with_") or query.args.get("with"))
                and not (query.args.get("distinct") and not reads_itself(query, name))
            ):
                # (a distinct UNION of base branches alone is one base branch)
                if query.args.get("distinct"):
                    raise UnsupportedSql(
                        self.model,
                        f"WITH RECURSIVE {name} with UNION (distinct): Spark runs recursion only with UNION ALL",
                    )
                split(query.this)
                split(query.expression)
            else:
                branches.append(query)

        split(cte.this)
        anchors = [b for b in branches if not reads_itself(b, name)]
        steps = [b for b in branches if reads_itself(b, name)]
        if not anchors or not steps:
            raise UnsupportedSql(
                self.model,
                f"WITH RECURSIVE {name} without both a base branch and a recursive branch joined by UNION ALL",
            )
        bases = [self.build(b, ctes) for b in anchors]
        base = bases[0] if len(bases) == 1 else UnionAll(columns=list(bases[0].columns), inputs=bases)
        alias = cte.args.get("alias")
        labels = (
            [c.name.lower() for c in alias.columns]
            if alias is not None and alias.columns
            else [a.lower() for a in self.aliases(bases[0])]
        )
        ref = self._fresh(f"{RECURSION_PREFIX}{name}")
        target.ref = ref
        try:
            built = [self.build(b, ctes) for b in steps]
        finally:
            target.ref = None
        for b in [*bases, *built]:
            if len(b.columns) != len(labels):
                raise UnsupportedSql(self.model, f"WITH RECURSIVE {name}: branches with different column counts")
        for step in built:
            try:
                count = working_table_reads(step, ref)
            except NotLinear as err:
                raise UnsupportedSql(
                    self.model,
                    f"WITH RECURSIVE {name} reads itself under {err} (only through "
                    "filters, projections, inner joins, generators and the "
                    "preserved side of LEFT / semi / anti joins)",
                ) from None
            if count != 1:
                raise UnsupportedSql(
                    self.model,
                    f"WITH RECURSIVE {name}: a recursive branch reads {name} "
                    f"{count} times (only linear recursion: once per branch)",
                )
        node = Recursive(
            columns=[self._fresh(f"{name}__{c}") for c in labels], base=base, steps=built, ref=ref, names=labels
        )
        return self._set_aliases(node, labels)

    def _rename(self, child: Node, alias: str, wanted: list, names: dict) -> Node:
        """Expose a derived table's columns under this block's unique names."""
        lookup = {a.lower(): c for a, c in zip(self.aliases(child), child.columns)}
        exprs: list[exp.Expr] = []
        cols: list[str] = []
        for col in wanted:
            if col not in lookup:
                raise UnsupportedSql(self.model, f"could not resolve column {alias}.{col}")
            exprs.append(exp.column(lookup[col]))
            cols.append(self._name(alias, col, names))
        if not exprs:  # nothing read from it (e.g. COUNT(*) over a subquery): keep its rows
            exprs, cols = [exp.true()], [self._fresh(f"{alias}__unit")]
        return Project(columns=cols, child=child, exprs=exprs)

    # -- aggregation -----------------------------------------------------------------------
    def _aggregate(self, child: Node, scope: _Scope, group, having, projections):
        keys = [scope.rewrite(self.model, k) for k in (group.expressions if group is not None else [])]
        for k in keys:
            if is_aggregate(k) or any(is_aggregate(n) for n in k.walk()):
                raise UnsupportedSql(self.model, "aggregate inside GROUP BY")
        key_names = [self._fresh(f"__dvm_key_{i}") for i in range(len(keys))]
        having_expr = scope.rewrite(self.model, having.this) if having is not None else None
        calls: dict = {}
        aggs: list[AggCall] = []

        def collect(expression):
            for node in expression.walk():
                target = node
                if isinstance(node, exp.Filter) and is_aggregate(node.this):
                    target = node
                elif not is_aggregate(node) or isinstance(node.parent, exp.Filter) or window_function(node):
                    continue
                key = target.sql("spark")
                if key not in calls:
                    name = self._fresh(f"__dvm_agg_{len(aggs)}")
                    calls[key] = name
                    aggs.append(self._agg_call(name, target))

        for p in projections:
            collect(p)
        if having_expr is not None:
            collect(having_expr)

        def replace(expression):
            key_sql = {k.sql("spark"): n for k, n in zip(keys, key_names)}

            def swap(node):
                text = node.sql("spark") if isinstance(node, exp.Expression) else None
                if text in calls and (is_aggregate(node) or isinstance(node, exp.Filter)) and not window_function(node):
                    return exp.column(calls[text])
                if text in key_sql and not isinstance(node, (exp.Literal, exp.Boolean, exp.Null)):
                    return exp.column(key_sql[text])
                return node

            out = expression.copy().transform(swap)
            allowed = set(key_names) | set(calls.values())
            for col in out.find_all(exp.Column):
                if col.name not in allowed:
                    raise UnsupportedSql(self.model, f"column {col.name} is neither grouped nor aggregated")
            return out

        node = Aggregate(
            columns=key_names + [a.name for a in aggs], child=child, keys=keys, key_names=key_names, aggs=aggs
        )
        new_projections = [replace(p) for p in projections]
        return node, new_projections, (replace(having_expr) if having_expr is not None else None)

    def _agg_call(self, name: str, call: exp.Expr) -> AggCall:
        condition = None
        inner = call
        if isinstance(call, exp.Filter):
            inner, condition = call.this, call.expression.this
        if function_name(inner) in ORDER_DEPENDENT_AGGREGATES or isinstance(inner, (exp.First, exp.Last, exp.AnyValue)):
            raise UnsupportedSql(self.model, f"{function_name(inner)}() without an ordering is not deterministic")
        if any(isinstance(n, exp.Window) for n in inner.walk()):
            raise UnsupportedSql(self.model, "window function inside an aggregate")

        def fold(arg):  # agg(x) FILTER (WHERE c) == agg(CASE WHEN c THEN x END) for NULL-ignoring aggs
            if condition is None:
                return arg
            return exp.Case(ifs=[exp.If(this=condition.copy(), true=arg)])

        if isinstance(inner, exp.Count):
            arg = inner.this
            if isinstance(arg, exp.Distinct):
                return AggCall(name, "other", None, call.copy())
            if isinstance(arg, exp.Star) or arg is None:
                if condition is None:
                    return AggCall(name, "count_star", None, call.copy())
                return AggCall(name, "count", fold(exp.true()), call.copy())
            return AggCall(name, "count", fold(arg.copy()), call.copy())
        kind = algebraic_kind(inner)
        if kind is not None and not isinstance(inner.this, exp.Distinct) and len(inner.expressions or []) == 0:
            return AggCall(name, kind, fold(inner.this.copy()), call.copy())
        return AggCall(name, "other", None, call.copy())

    # -- names -----------------------------------------------------------------------------
    def _referenced_columns(self, select: exp.Select) -> dict:
        """alias -> columns this block reads from it, in first-use order."""
        out: dict = {}
        parts = list(select.expressions)
        for key in ("where", "group", "having", "order"):
            if select.args.get(key) is not None:
                parts.append(select.args[key])
        for join in select.args.get("joins") or []:
            if join.args.get("on") is not None:
                parts.append(join.args["on"])
        parts.extend(lateral.this for lateral in select.args.get("laterals") or [])
        for part in parts:
            for col in part.find_all(exp.Column):
                if col.table:
                    cols = out.setdefault(col.table.lower(), [])
                    if col.name.lower() not in cols:
                        cols.append(col.name.lower())
        return out

    def _name(self, alias: str, column: str, names: dict) -> str:
        key = (alias, column)
        if key not in names:
            names[key] = self._fresh(f"{alias}__{column}")
        return names[key]

    def _fresh(self, base: str) -> str:
        self._counter += 1
        safe = re.sub(r"[^A-Za-z0-9_]", "_", base)[:48]
        return f"{safe}_{self._counter}"

    def _unique_output_names(self, names: list[str]) -> list[str]:
        return [self._fresh(f"c_{n}") for n in names]


def build_tree(model: str, qualified: exp.Expr) -> Node:
    return TreeBuilder(model).build(qualified)
