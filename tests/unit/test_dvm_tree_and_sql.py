"""Unit tests (no Spark): parsing, the operator tree and the SQL the delta rules generate."""

import re

import pytest
import sqlglot
from sqlglot import exp

from python_helpers.dvm.bag_result import BagResult
from python_helpers.dvm.differentiate import delta, plain
from python_helpers.dvm.plan_query import query_tree
from python_helpers.dvm.sqlgen import Context, parenthesize, render
from python_helpers.dvm.stored_result import AggregateResult, plan_stored_result, storage_names
from python_helpers.dvm.tree import Aggregate, Distinct, Filter, Join, Project, Recursive, Scan, UnionAll, describe
from python_helpers.errors import SqlParseError, UnsupportedSql
from python_helpers.sql.parse import fingerprint, parse_query, source_relations

SCHEMAS = {
    "shop.orders": {
        "id": "bigint",
        "customer_id": "bigint",
        "amount": "double",
        "status": "string",
        "ordered_at": "date",
    },
    "shop.customers": {"id": "bigint", "region": "string"},
}


def tree_of(sql):
    return query_tree("m", parse_query("m", sql), SCHEMAS)[0]


def ctx(changed=("shop.orders", "shop.customers")):
    return Context(
        changes=lambda r: exp.to_table(f"chg_{r.replace('.', '_')}"),
        snapshot=lambda r, v: exp.to_table(f"{v}_{r.replace('.', '_')}"),
        changed=set(changed),
    )


def materializing_ctx(changed, small_delta=False) -> tuple[Context, list]:
    """ctx() with a materialize that records each intermediate's SQL (rendered) and names it
    `mat_<n>`."""
    materialized: list = []

    def materialize(query):
        materialized.append(render(query))
        return exp.select("*").from_(f"mat_{len(materialized)}")

    context = ctx(changed)
    context.materialize, context.small_delta = materialize, small_delta
    return context, materialized


def tables_in(sql_text):
    return {t.name for t in sqlglot.parse_one(sql_text, read="spark").find_all(exp.Table)}


# -- parsing -------------------------------------------------------------------------------
def test_parse_rejects_bad_sql_naming_the_model():
    with pytest.raises(SqlParseError, match="stream table 'm'.*does not parse"):
        parse_query("m", "select from where")


def test_parse_rejects_non_select_and_multiple_statements():
    with pytest.raises(SqlParseError, match="not a SELECT"):
        parse_query("m", "insert into t values (1)")
    with pytest.raises(SqlParseError, match="exactly one"):
        parse_query("m", "select 1 from a; select 2 from b")


def test_source_relations_skip_ctes():
    q = parse_query("m", "with t as (select * from shop.orders) select * from t join shop.customers c on t.id = c.id")
    assert sorted(source_relations(q)) == ["shop.customers", "shop.orders"]


def test_fingerprint_ignores_formatting_but_not_meaning():
    a = fingerprint("select a from t")
    assert a == fingerprint("SELECT   a\nFROM t")
    assert a != fingerprint("select b from t")
    assert a != fingerprint("select a from t", {"partition_by": "x"})


# -- unsupported constructs are named --------------------------------------------------------
@pytest.mark.parametrize(
    "sql, construct",
    [
        ("select id, sum(rank() over (order by id)) from shop.orders group by id", "window function inside"),
        ("select id from (select id from shop.orders order by id limit 3) t", "LIMIT"),
        ("select id from shop.orders order by amount limit 3", "ORDER BY amount"),
        ("select rand() as r, id from shop.orders", "non-deterministic"),
        ("select id, current_timestamp() from shop.orders", "non-deterministic"),
        (
            "select id, case when customer_id in (select c.id from shop.customers c where c.region = o.status) "
            "then 1 end e "
            "from shop.orders o",
            "outside a top-level AND",
        ),
        (
            "select (select max(amount) from shop.orders) m, count(*) n from shop.customers",
            "aggregate without GROUP BY",
        ),
        (
            "with recursive r(a, n) as (select id, 0 from shop.orders union all select r.a, count(*) from r "
            "group by r.a) select a from r",
            "reads itself under Aggregate",
        ),
        (
            "with recursive r(a) as (select id from shop.orders union all select r.a from r join r r2 on r.a = r2.a) "
            "select a from r",
            "reads r 2 times",
        ),
        (
            "with recursive r(a) as (select id from shop.orders union all select c.id from shop.customers c "
            "left join r on r.a = c.id) select a from r",
            "reads itself under OuterJoin",
        ),
        (
            "with recursive r(a) as (select id from shop.orders union select r.a + 1 from r where r.a < 3) "
            "select a from r",
            "UNION (distinct)",
        ),
        (
            "select id from shop.customers c where 0 < (select percentile(o.amount, 0.5) from shop.orders o "
            "where o.customer_id = c.id)",
            "no rows",
        ),
        (
            "select id from shop.customers c where 1 < (select max(o.amount) from shop.orders o "
            "where o.customer_id > c.id)",
            "only equalities",
        ),
        ("select id from shop.orders where (id, amount) not in (select id, id from shop.customers)", "several columns"),
        (
            "select id from shop.customers c where c.id in (select o.id from shop.orders o where o.status = c.region)",
            "correlated IN",
        ),
        (
            "select count(*) from shop.orders group by cube(id, customer_id, amount, status, ordered_at, id + 1)",
            "more than 32 grouping sets",
        ),
        (
            "select customer_id, collect_list(status) from shop.orders group by customer_id",
            "order of the collected values is not deterministic",
        ),
        (
            "select customer_id, string_agg(status, ',') from shop.orders group by customer_id",
            "order of the collected values is not deterministic",
        ),
        (
            "select id, collect_list(status) over (partition by customer_id) from shop.orders",
            "order of the collected values is not deterministic",
        ),
    ],
)
def test_unsupported_constructs_are_named(sql, construct):
    with pytest.raises(UnsupportedSql) as err:
        tree_of(sql)
    assert construct.lower() in err.value.construct.lower()
    assert "stream table 'm'" in str(err.value)


# -- the tree --------------------------------------------------------------------------------
RECURSIVE = (
    "with recursive r(cid, depth) as (select customer_id, 0 from shop.orders where amount > 10 "
    "union all select c.id, r.depth + 1 from r join shop.customers c on c.id = r.cid + 1 "
    "where r.depth < 3) select cid, count(*) as n from r group by cid"
)


def test_recursive_cte_with_a_distinct_union_of_base_branches():
    tree = tree_of(
        "with recursive r(a, n) as (select id, 0 from shop.orders union select id, 0 from "
        "shop.customers union all select r.a, r.n + 1 from r where r.n < 2) select a, n from r"
    )
    node = tree
    while not isinstance(node, Recursive):
        node = node.children()[0]
    assert isinstance(node.base, Distinct) and len(node.steps) == 1


def test_recursive_cte_tree_and_delta_sql():
    tree = tree_of(RECURSIVE)
    text = describe(tree)
    assert "Recursive" in text and "1 step(s)" in text
    assert tree.relations() == {"shop.orders", "shop.customers"}  # not the working table
    node = tree
    while not isinstance(node, Recursive):
        node = node.children()[0]
    # Only the base changed: the delta recursion is seeded from the base's change rows alone.
    only_base = render(delta(node, ctx(["shop.orders"])))
    assert "WITH RECURSIVE" in only_base and "chg_shop_orders" in only_base
    assert "chg_shop_customers" not in only_base and "old_shop_customers" not in only_base
    # The step's source changed too: the step's change over the old result joins the seed.
    both = render(delta(node, ctx()))
    assert "chg_shop_customers" in both and "old_shop_orders" in both
    # Every rendering of the recursion keeps its own scoped WITH (no duplicate CTE names).
    assert sqlglot.parse_one(both, read="spark") is not None


def test_aggregate_tree_shape_and_strategies():
    tree = tree_of(
        "select customer_id, count(*) n, sum(amount) s, min(amount) lo, count(distinct status) k "
        "from shop.orders where amount > 0 group by customer_id having count(*) > 1"
    )
    assert isinstance(tree, Project)
    assert isinstance(tree.child, Filter) and isinstance(tree.child.child, Aggregate)
    agg = tree.child.child
    assert [a.kind for a in agg.aggs] == ["count_star", "sum", "min", "other"]
    assert [a.strategy for a in agg.aggs] == ["algebraic", "algebraic", "semi-algebraic", "group-rescan"]
    assert isinstance(agg.child, Filter) and isinstance(agg.child.child, Scan)
    scan = agg.child.child
    assert scan.relation == "shop.orders"
    assert sorted(scan.source_columns) == ["amount", "customer_id", "status"]  # only what is read


def test_filter_clause_folds_into_the_argument():
    tree = tree_of("select sum(amount) filter (where status = 'paid') s from shop.orders")
    agg = tree.child
    assert agg.aggs[0].kind == "sum"
    assert isinstance(agg.aggs[0].arg, exp.Case)


def test_join_subquery_cte_union_distinct_trees():
    join = tree_of("select o.id, c.region from shop.orders o join shop.customers c on o.customer_id = c.id")
    assert isinstance(join.child, Join) and join.child.condition is not None
    cte = tree_of(
        "with t as (select customer_id, amount * 2 a from shop.orders) "
        "select customer_id, sum(a) from t group by customer_id"
    )
    assert isinstance(cte.child, Aggregate) and isinstance(cte.child.child, Project)
    union = tree_of("select id from shop.orders union all select id from shop.customers")
    assert isinstance(union, UnionAll) and len(union.inputs) == 2
    distinct_union = tree_of("select id from shop.orders union select id from shop.customers")
    assert isinstance(distinct_union, Distinct) and isinstance(distinct_union.child, UnionAll)
    assert isinstance(tree_of("select distinct status from shop.orders"), Distinct)
    assert "Scan shop.orders" in describe(join)


def test_group_by_expression_is_matched_in_select():
    tree = tree_of("select upper(status) s, count(*) from shop.orders group by upper(status)")
    agg = tree.child
    assert len(agg.keys) == 1
    assert tree.exprs[0].name == agg.key_names[0]  # the select item refers to the key column


def test_ungrouped_column_is_rejected():
    with pytest.raises(UnsupportedSql, match="neither grouped nor aggregated"):
        tree_of("select status, amount, count(*) from shop.orders group by status")


# -- generated SQL ---------------------------------------------------------------------------
def test_scan_delta_consolidates_on_read_columns():
    tree = tree_of("select id, amount from shop.orders")
    text = render(delta(tree, ctx()))
    assert "chg_shop_orders" in text
    assert "SUM(__dvm_w)" in text and "HAVING SUM(__dvm_w) <> 0" in text
    assert "status" not in text  # unreferenced columns never enter the delta


def test_join_delta_has_one_term_per_changed_side():
    tree = tree_of("select o.id, c.region from shop.orders o join shop.customers c on o.customer_id = c.id")
    both = render(delta(tree, ctx()))
    assert tables_in(both) == {"chg_shop_orders", "old_shop_customers", "new_shop_orders", "chg_shop_customers"}
    only_orders = render(delta(tree, ctx(changed=("shop.orders",))))
    # pruned branch; the unchanged side is read at its new version (its old rows are the same)
    assert tables_in(only_orders) == {"chg_shop_orders", "new_shop_customers"}
    assert delta(tree, ctx(changed=())) is None


# The change of a count per key, as a grouping's delta renders it (consolidated by key and value).
_COUNT_CHANGE = re.compile(r"GROUP BY __dvm_key_\d+_\d+, __dvm_agg_\d+_\d+ HAVING")


def test_a_flag_over_a_subquery_takes_its_keys_from_the_subquerys_source_change():
    """EXISTS as a value is a left join with `COUNT(*) > 0` per key: the keys the join is
    recomputed for are read from the change of the subquery's source (a count changes only
    for the keys its rows changed), so the count's own change is never computed, nor kept
    apart. With both sides changed as well as nested (the outer join over
    the inner one, a ΔL computed by joins), each level reads its keys from the orders' change."""
    tree = tree_of(
        "select c.id, exists (select 1 from shop.orders o where o.customer_id = c.id) as f,"
        " exists (select 1 from shop.orders o2 where o2.customer_id = c.id and o2.amount > 10) as g"
        " from shop.customers c"
    )
    context, materialized = materializing_ctx(("shop.orders", "shop.customers"), small_delta=True)
    text = render(delta(tree, context))
    assert re.search(r"__dvm_agg_\d+_\d+ > 0 AS", text), text  # the flag, computed over the count
    assert not _COUNT_CHANGE.search(text), text
    assert not any(_COUNT_CHANGE.search(m) for m in materialized), materialized
    # The second flag's keys: the orders' change under its filter.
    every = " ".join([text, *materialized])
    assert re.search(r"FROM chg_shop_orders\) AS _c\d+ GROUP BY .{0,200} WHERE o2__amount_\d+ > 10\) AS _dk", every)
    assert "FROM chg_shop_orders" in every and "FROM chg_shop_customers" in every


def test_keys_from_a_count_per_key_are_read_from_its_sources_change():
    """IN used as a value is a left join to a count per key: with only the subquery's source
    changed, the join's changed keys are the change's keys under the subquery's filter, read
    inline where they restrict both inputs at both versions (a cheap read of the change,
    which the engine lists from the rows it holds); nothing is computed apart."""
    tree = tree_of(
        "select c.id, c.id in (select o.customer_id from shop.orders o where o.amount > 10) as f from shop.customers c"
    )
    context, materialized = materializing_ctx(("shop.orders",), small_delta=True)
    text = render(delta(tree, context))
    assert not materialized, materialized
    assert not _COUNT_CHANGE.search(text), text
    keys = re.findall(
        r"SELECT o__customer_id_\d+ AS __dvm_rk0 FROM \(SELECT \* FROM \(SELECT .*? WHERE o__amount_\d+ > 10", text
    )
    assert keys and all("FROM chg_shop_orders" in k for k in keys), text
    assert "WHERE NOT (__dvm_rk0 IS NULL)" in text  # a NULL key meets no customer
    only_customers, materialized = materializing_ctx(("shop.customers",), small_delta=True)
    assert "chg_shop_customers" in render(delta(tree, only_customers))
    assert not materialized, materialized


def test_a_count_per_key_over_a_join_still_computes_its_change_for_the_keys():
    """The count's source is a join, not a source's rows: its change is computed (consolidated
    by key and value), as before; `_COUNT_CHANGE` finds it (the tests above look for its absence)."""
    tree = tree_of(
        "select c.id, exists (select 1 from shop.orders o join shop.customers c2 on o.customer_id = c2.id"
        " where o.customer_id = c.id) as f from shop.customers c"
    )
    context, materialized = materializing_ctx(("shop.orders",), small_delta=True)
    assert _COUNT_CHANGE.search(" ".join([render(delta(tree, context)), *materialized]))


@pytest.mark.parametrize("kind, drops_null_keys", [("left", True), ("full outer", False)])
def test_keys_below_a_grouping_keep_a_null_key_only_where_it_makes_rows(kind, drops_null_keys):
    """A right input grouped by the join key takes its keys from its source's change. A NULL
    key meets no left row: a left join drops it (its group's row goes nowhere), a full join
    keeps it (the group's row is padded into a row of its own, which must change with it)."""
    tree = tree_of(
        f"select c.id, s.n from shop.customers c {kind} join"
        " (select customer_id, count(*) n from shop.orders group by customer_id) s on c.id = s.customer_id"
    )
    text = render(delta(tree, materializing_ctx(("shop.orders",), small_delta=True)[0]))
    assert "AS __dvm_rk0 FROM" in text and "FROM chg_shop_orders" in text, text
    assert not _COUNT_CHANGE.search(text), text
    assert ("NOT (__dvm_rk0 IS NULL)" in text) == drops_null_keys, text


def test_nested_aggregate_delta_rescans_only_delta_keys():
    tree = tree_of(
        "select x.customer_id, x.total from (select customer_id, sum(amount) total from shop.orders "
        "group by customer_id) x join shop.customers c on x.customer_id = c.id"
    )
    text = render(delta(tree, ctx(changed=("shop.orders",))))
    assert "LEFT SEMI JOIN" in text and "IS NOT DISTINCT FROM" in text  # null-safe key match
    assert {"new_shop_orders", "old_shop_orders", "chg_shop_orders"} <= tables_in(text)


def test_plain_renders_the_query_on_snapshots():
    tree = tree_of("select status, count(*) from shop.orders group by status")
    text = render(plain(tree, ctx(), "old"))
    assert tables_in(text) == {"old_shop_orders"}


def test_parenthesize_keeps_precedence():
    e = exp.Not(this=exp.and_(exp.column("a"), exp.column("b")))
    assert parenthesize(e).sql() == "NOT (a AND b)"
    d = exp.Div(
        this=exp.Sub(this=exp.column("q"), expression=exp.column("s")),
        expression=exp.Sub(this=exp.column("n"), expression=exp.Literal.number(1)),
    )
    assert parenthesize(d).sql() == "(q - s) / (n - 1)"


def test_stored_result_layouts():
    agg = plan_stored_result(
        "m", tree_of("select status, sum(amount) from shop.orders group by status"), ["status", "sum(amount)"]
    )
    assert isinstance(agg, AggregateResult)
    assert agg.user_columns == ["status", "__dvm_col_1"]  # Delta rejects '(' in column names
    assert "__dvm_agg_0_nn" in agg.storage_columns()
    view = agg.view_sql(exp.to_table("store")).sql("spark")
    assert "__dvm_col_1 AS `sum(amount)`" in view
    bag = plan_stored_result("m", tree_of("select id from shop.orders"), ["id"])
    assert isinstance(bag, BagResult) and not bag.distinct
    assert "explode" in bag.view_sql(exp.to_table("store")).sql("spark").lower()
    distinct = plan_stored_result("m", tree_of("select distinct status from shop.orders"), ["status"])
    assert distinct.distinct and "explode" not in distinct.view_sql(exp.to_table("store")).sql("spark").lower()


def test_a_unique_key_stores_one_row_per_key_without_grouping_or_repeating():
    from python_helpers.dvm.keyed_result import KeyedBagResult
    from python_helpers.errors import InvalidConfig

    sql = "select o.id, o.amount, c.region from shop.orders o join shop.customers c on o.customer_id = c.id"
    keyed = plan_stored_result("m", tree_of(sql), ["id", "amount", "region"], unique_key=["ID"])
    assert isinstance(keyed, KeyedBagResult)
    full = render(keyed.full_sql(ctx(())))
    assert "GROUP BY" not in full.upper()  # a projection: nothing grouped by every column
    assert "explode" not in keyed.view_sql(exp.to_table("store")).sql("spark").lower()
    merge = render(keyed.merge_sql(ctx(), exp.to_table("store"), {}))
    assert "raise_error" in merge.lower() and "unique_key (id)" in merge
    assert "store" in tables_in(merge)  # for its row ids: a new row under a stored key breaks the key
    # An aggregate is stored by its group key already; a name the query lacks is refused.
    agg = plan_stored_result(
        "m",
        tree_of("select status, count(*) n from shop.orders group by status"),
        ["status", "n"],
        unique_key=["status"],
    )
    assert isinstance(agg, AggregateResult)
    with pytest.raises(InvalidConfig, match="nope"):
        plan_stored_result("m", tree_of(sql), ["id", "amount", "region"], unique_key=["nope"])


def test_a_keyed_result_stores_the_query_columns_alone_and_meets_stored_rows_by_its_key():
    from python_helpers.dvm.stored_reads import ROW_ID
    from python_helpers.runtime.refresh.attempt import plan_digest

    sql = "select o.id, o.amount, o.status from shop.orders o"
    keyed = plan_stored_result("m", tree_of(sql), ["id", "amount", "status"], unique_key=["status", "ID"])
    bag = plan_stored_result("m", tree_of(sql), ["id", "amount", "status"])
    # What a table model of the query writes, nothing more: no row id, no count, no key types.
    assert keyed.storage_columns() == ["id", "amount", "status"] and keyed.typed_args() == []
    assert keyed.match_columns() == ["status", "id"] and bag.match_columns() == [ROW_ID]
    full, merge = render(keyed.full_sql(ctx(()))), render(keyed.merge_sql(ctx(), exp.to_table("s"), {}))
    assert ROW_ID not in full + merge and "MD5" not in full + merge and "TO_JSON" not in full + merge
    # The stored rows are met by the key's columns, NULL meeting NULL (a GROUP BY keeps NULL keys).
    assert "_st5.status IS NOT DISTINCT FROM _k4.__dvm_key0" in merge
    # The spark engine keeps the text of a key of more columns as a row id (its REPLACE WHERE
    # lists one column), not of one integer or string column; a layout of another digest, as an
    # earlier release's, is rebuilt once, never merged.
    one = plan_stored_result("m", tree_of(sql), ["id", "amount", "status"], None, ["ID"], True)
    one.arg_types = {"__dvm_key_type_0": "bigint"}
    assert one.storage_columns() == ["id", "amount", "status"] and one.match_columns() == ["id"]
    one.arg_types = {"__dvm_key_type_0": "smallint"}
    assert one.match_columns() == [ROW_ID]
    with_id = plan_stored_result("m", tree_of(sql), ["id", "amount", "status"], None, ["status", "ID"], True)
    with_id.arg_types = {"__dvm_key_type_0": "string", "__dvm_key_type_1": "bigint"}
    assert with_id.storage_columns() == [ROW_ID, "id", "amount", "status"] and with_id.match_columns() == [ROW_ID]
    assert "CONCAT(" in render(with_id.full_sql(ctx(())))
    assert f"_st5.{ROW_ID} = _k4.{ROW_ID}" in render(with_id.merge_sql(ctx(), exp.to_table("s"), {}))
    assert len({plan_digest(keyed), plan_digest(bag), plan_digest(with_id)}) == 3


def test_a_group_row_id_is_its_key_text_for_integer_and_string_keys_else_a_digest():
    from python_helpers.runtime.refresh.attempt import plan_digest

    sql = "select status, customer_id, count(*) n from shop.orders group by status, customer_id"
    old = plan_stored_result("m", tree_of(sql), ["status", "customer_id", "n"])
    assert [n for n, _ in old.typed_args()] == ["__dvm_key_type_0", "__dvm_key_type_1"]
    new = plan_stored_result("m", tree_of(sql), ["status", "customer_id", "n"])
    new.arg_types = {"__dvm_key_type_0": "string", "__dvm_key_type_1": "bigint"}
    other = plan_stored_result("m", tree_of(sql), ["status", "customer_id", "n"])
    other.arg_types = {"__dvm_key_type_0": "string", "__dvm_key_type_1": "double"}
    merge_of = lambda r: render(r.merge_sql(ctx(), exp.to_table("s"), {}))  # noqa: E731
    # Without the key types (an earlier release's analysis) and for other key types: md5.
    for result in (old, other):
        assert "MD5(TO_JSON(NAMED_STRUCT('k0', __dvm_key_0" in render(result.full_sql(ctx(())))
    new_full, new_merge = render(new.full_sql(ctx(()))), merge_of(new)
    assert "MD5(TO_JSON(NAMED_STRUCT('k0', __dvm_key_0" not in new_full + new_merge
    assert "CONCAT(IF(__dvm_key_0 IS NULL, 'n'" in new_full
    assert plan_digest(old) == plan_digest(other) != plan_digest(new)


def test_duplicate_output_names_are_rejected():
    with pytest.raises(UnsupportedSql, match="(?i)two columns named .id."):
        storage_names("m", ["id", "ID"])


def test_merge_sql_reads_stored_state_and_marks_deletes():
    result = plan_stored_result(
        "m",
        tree_of("select status, count(*) n, max(amount) hi from shop.orders group by status"),
        ["status", "n", "hi"],
    )
    text = render(result.merge_sql(ctx(), exp.to_table("store"), {}))
    assert "store" in tables_in(text)
    assert "'D'" in text and "'U'" in text
    assert "GREATEST" in text  # MAX merges inserted values without a rescan
    assert "new_shop_orders" in tables_in(text)  # ... and rescans groups whose max was deleted


def test_where_stays_above_a_later_right_join_that_pads_with_nulls():
    from python_helpers.dvm.tree import OuterJoin

    tree = tree_of(
        "select o.id from shop.orders o left join shop.customers c on o.customer_id = c.id "
        "right join shop.customers c2 on c.region = c2.region where o.amount > 1"
    )
    below = tree.child
    assert isinstance(below, Filter) and isinstance(below.child, OuterJoin), describe(tree)
    assert not any(isinstance(n, Filter) for n in _walk(below.child)), describe(tree)


def test_a_named_window_of_a_subquery_is_its_own():
    tree = tree_of(
        "select t.id, t.rk from (select o.id, rank() over w as rk from shop.orders o "
        "window w as (partition by o.status order by o.amount)) t window w as (partition by t.id)"
    )
    window = next(n for n in _walk(tree) if type(n).__name__ == "Window")
    assert [k.sql("spark") for k in window.partition_keys] == [window.child.columns[1]], describe(tree)
    assert "ORDER BY" in window.calls[0].sql("spark"), describe(tree)


def _walk(node):
    yield node
    for c in node.children():
        yield from _walk(c)


def test_a_bag_of_comparable_columns_is_met_by_them_without_a_row_id():
    from python_helpers.dvm.stored_reads import COUNT, ROW_ID
    from python_helpers.runtime.refresh.attempt import plan_digest

    sql = "select o.id, o.amount, o.status from shop.orders o"
    names = ["id", "amount", "status"]
    types = {"__dvm_key_type_0": "bigint", "__dvm_key_type_1": "decimal(12, 2)", "__dvm_key_type_2": "string"}
    bag = plan_stored_result("m", tree_of(sql), names)
    # The columns' types are asked of Spark; without them (an earlier release's analysis) a row id.
    assert [n for n, _ in bag.typed_args()] == list(types)
    assert bag.match_columns() == [ROW_ID]
    untyped = plan_digest(bag)
    bag.arg_types = dict(types)
    assert bag.storage_columns() == [*names, COUNT] and bag.match_columns() == names
    full, merge = render(bag.full_sql(ctx(()))), render(bag.merge_sql(ctx(), exp.to_table("s"), {}))
    assert ROW_ID not in full + merge and "MD5" not in full + merge and "TO_JSON" not in full + merge
    # Stored as the rows come (a count of 1 each, as a table model writes them); a refresh
    # rewrites a tuple stored as several rows as one: its rows deleted, one inserted.
    assert "GROUP BY" not in full and "CAST(1 AS BIGINT) AS __dvm_count" in full, full
    assert "ARRAY('D', 'I')" in merge and "SUM(__dvm_count)" in merge, merge
    # Met NULL-safe, as GROUP BY puts NULLs together.
    assert all(f"_s4.{c} IS NOT DISTINCT FROM _d3.c_{c}_" in merge for c in names), merge
    # Floating point compares otherwise in delta-rs' MERGE (NaN, -0.0): a row id, as before.
    floats = plan_stored_result("m", tree_of(sql), names)
    floats.arg_types = {**types, "__dvm_key_type_1": "double"}
    assert floats.storage_columns() == [ROW_ID, *names, COUNT] and "MD5(TO_JSON(" in render(floats.full_sql(ctx(())))
    assert "GROUP BY" in render(floats.full_sql(ctx(()))) and "'I'" not in render(
        floats.merge_sql(ctx(), exp.to_table("s"), {})
    )
    # The spark engine lists changed rows by one column: a row id, and no types asked.
    listed = plan_stored_result("m", tree_of(sql), names, None, None, True)
    assert listed.typed_args() == [] and listed.match_columns() == [ROW_ID]
    # Another layout is another plan: a bag an earlier release stored with a row id is rebuilt
    # once, never merged; one that keeps its row id keeps its plan.
    assert plan_digest(floats) == untyped != plan_digest(bag)
