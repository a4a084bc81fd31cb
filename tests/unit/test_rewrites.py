"""Each rewrite pass, shown as input SQL -> output SQL (python_helpers.sql.rewrites), plus the
Top-K split. The Spark oracle tests (tests/support/shapes.py: families semi, sublink, topk)
prove the rewritten queries equal the originals on data; these pin the shapes."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from python_helpers.errors import UnsupportedSql
from python_helpers.sql import rewrites
from python_helpers.sql.parse import parse_query, qualify_query
from python_helpers.sql.rewrites import (
    blocks,
    distinct_aggregates,
    exists_values,
    grouping_sets,
    having_subqueries,
    lateral_joins,
    scalar_subqueries,
    semi_anti_joins,
    sublinks_in_or,
)
from python_helpers.sql.top_k import split_top_k

SCHEMAS = {
    "s.o": {"ok": "bigint", "ck": "bigint", "amt": "double", "st": "string"},
    "s.l": {"ok": "bigint", "qty": "int", "a": "date", "b": "date"},
    "s.c": {"ck": "bigint", "seg": "string"},
    "s.a": {"id": "bigint", "arr": "array<int>"},
}


def qualified(sql: str) -> exp.Expression:
    return qualify_query("m", parse_query("m", sql), SCHEMAS)


def run(pass_module, sql: str) -> str:
    return pass_module.rewrite("m", qualified(sql), blocks.FreshNames()).sql("spark")


def same(a: str, b: str) -> bool:
    return sqlglot.parse_one(a, read="spark").sql("spark") == sqlglot.parse_one(b, read="spark").sql("spark")


def test_rollup_becomes_one_group_by_over_the_rows_repeated_per_grouping_set():
    out = run(
        grouping_sets,
        "select o.ck, o.st, sum(o.amt) as t, grouping(o.st) as g, grouping_id() as gid "
        "from s.o o group by rollup(o.ck, o.st)",
    )
    st = "CASE WHEN (SHIFTRIGHT(__dvm_gs1.__dvm_gid2, 0)) & 1 = 0 THEN o.st END"
    ck = "CASE WHEN (SHIFTRIGHT(__dvm_gs1.__dvm_gid2, 1)) & 1 = 0 THEN o.ck END"
    assert same(
        out,
        f"SELECT {ck} AS ck, {st} AS st, SUM(o.amt) AS t, "
        "CAST((SHIFTRIGHT(__dvm_gs1.__dvm_gid2, 0)) & 1 AS TINYINT) AS g, CAST(__dvm_gs1.__dvm_gid2 AS BIGINT) AS gid "
        "FROM s.o AS o LATERAL VIEW EXPLODE(ARRAY(0, 1, 3)) __dvm_gs1 AS __dvm_gid2 "
        f"GROUP BY {ck}, {st}, __dvm_gs1.__dvm_gid2",
    ), out
    cube = run(grouping_sets, "select o.ck, count(*) as n from s.o o group by cube(o.ck, o.st)")
    assert "EXPLODE(ARRAY(0, 1, 2, 3))" in cube and "UNION" not in cube
    # A column in every set is never NULLed; GROUPING_ID of some columns picks their bits.
    sets = run(
        grouping_sets,
        "select o.ck, o.st, count(*) as n, grouping_id(o.st) as gs from s.o o group by o.ck, grouping sets ((o.st), ())",
    )
    assert same(
        sets,
        "SELECT o.ck AS ck, CASE WHEN (SHIFTRIGHT(__dvm_gs1.__dvm_gid2, 0)) & 1 = 0 THEN o.st END AS st, "
        "COUNT(*) AS n, CAST(0 + (SHIFTLEFT(((SHIFTRIGHT(__dvm_gs1.__dvm_gid2, 0)) & 1), 0)) AS BIGINT) AS gs "
        "FROM s.o AS o LATERAL VIEW EXPLODE(ARRAY(0, 1)) __dvm_gs1 AS __dvm_gid2 "
        "GROUP BY o.ck, CASE WHEN (SHIFTRIGHT(__dvm_gs1.__dvm_gid2, 0)) & 1 = 0 THEN o.st END, __dvm_gs1.__dvm_gid2",
    ), sets


def test_distinct_aggregates_of_one_value_become_an_aggregate_over_the_distinct_pairs():
    out = run(
        distinct_aggregates,
        "select o.st, count(distinct o.ck) as n, sum(distinct o.ck) as s, max(o.ck) as m "
        "from s.o o where o.amt > 0 group by o.st having count(distinct o.ck) > 1",
    )
    assert same(
        out,
        "SELECT __dvm_dv1.__dvm_k3 AS st, COUNT(__dvm_dv1.__dvm_v2) AS n, SUM(__dvm_dv1.__dvm_v2) AS s, "
        "MAX(__dvm_dv1.__dvm_v2) AS m FROM (SELECT o.st AS __dvm_k3, o.ck AS __dvm_v2 FROM s.o AS o "
        "WHERE o.amt > 0 GROUP BY o.st, o.ck) AS __dvm_dv1 GROUP BY __dvm_dv1.__dvm_k3 "
        "HAVING COUNT(__dvm_dv1.__dvm_v2) > 1",
    ), out


@pytest.mark.parametrize(
    "sql",
    [
        "select o.st, count(distinct o.ck) as n, count(*) as c from s.o o group by o.st",  # COUNT(*) counts rows
        "select o.st, count(distinct o.ck) as n, count(distinct o.ok) as k from s.o o group by o.st",  # two values
        "select o.st, max(o.ck) as m from s.o o group by o.st",  # nothing DISTINCT
        "select o.st, count(distinct o.ck) filter (where o.amt > 0) as n from s.o o group by o.st",
    ],
)
def test_distinct_aggregates_beside_other_aggregates_are_left_as_they_are(sql):
    assert "__dvm_dv" not in run(distinct_aggregates, sql)


def test_grouping_sets_keep_real_values_in_filter_clauses_and_a_branch_per_set_beside_subqueries():
    # FILTER reads the input row, as an aggregate's argument does: never the set's NULL.
    out = run(grouping_sets, "select o.st, count(*) filter (where o.st = 'a') as n from s.o o group by rollup(o.st)")
    assert "FILTER(WHERE o.st = 'a')" in out and "EXPLODE" in out, out
    # A subquery becomes a join, whose ON clause cannot read a LATERAL VIEW's column.
    out = run(
        grouping_sets,
        "select o.st, sum(o.amt) as t, (select max(l.qty) from s.l l where l.ok = 1) as q from s.o o group by rollup(o.st)",
    )
    assert "EXPLODE" not in out and out.count("UNION ALL") == 1, out


def test_a_repeated_grouping_set_keeps_one_branch_per_set():
    # Spark returns a repeated set's rows twice: one aggregate over the expansion would add them.
    out = run(grouping_sets, "select o.ck, count(*) as n from s.o o group by grouping sets ((o.ck), (o.ck), ())")
    assert out.count("UNION ALL") == 2 and "EXPLODE" not in out


def test_exists_inside_or_becomes_disjoint_union_branches():
    out = run(
        sublinks_in_or, "select c.ck from s.c c where c.seg = 'x' or exists (select 1 from s.o o where o.ck = c.ck)"
    )
    assert same(
        out,
        "SELECT c.ck AS ck FROM s.c AS c WHERE c.seg = 'x' UNION ALL SELECT c.ck AS ck FROM s.c AS c "
        "WHERE EXISTS(SELECT 1 AS `1` FROM s.o AS o WHERE o.ck = c.ck) "
        "AND NOT COALESCE((c.seg = 'x'), FALSE)",
    ), out
    # NOT pushed inward (De Morgan); a grouped block is split below its GROUP BY.
    out = run(
        sublinks_in_or,
        "select c.seg, count(*) as n from s.c c where not (c.seg = 'x' and exists "
        "(select 1 from s.o o where o.ck = c.ck)) group by c.seg",
    )
    assert same(
        out,
        "SELECT __dvm_or1.c__seg AS seg, COUNT(*) AS n FROM (SELECT c.seg AS c__seg FROM s.c AS c "
        "WHERE NOT c.seg = 'x' UNION ALL SELECT c.seg AS c__seg FROM s.c AS c WHERE NOT EXISTS("
        "SELECT 1 AS `1` FROM s.o AS o WHERE o.ck = c.ck) AND NOT COALESCE((NOT c.seg = 'x'), FALSE)) "
        "AS __dvm_or1 GROUP BY __dvm_or1.c__seg",
    ), out


def test_correlated_exists_becomes_a_semi_join_on_the_correlated_conjuncts():
    out = run(
        semi_anti_joins,
        "select o.ok from s.o o where o.amt > 0 and exists (select * from s.l l where l.ok = o.ok and l.a < l.b)",
    )
    assert same(
        out,
        "SELECT o.ok AS ok FROM s.o AS o LEFT SEMI JOIN (SELECT l.ok AS __dvm_c0 FROM s.l AS l "
        "WHERE l.a < l.b) AS __dvm_ex1 ON __dvm_ex1.__dvm_c0 = o.ok WHERE o.amt > 0",
    ), out


def test_not_exists_becomes_an_anti_join():
    out = run(semi_anti_joins, "select c.ck from s.c c where not exists (select 1 from s.o o where o.ck = c.ck)")
    assert same(
        out,
        "SELECT c.ck AS ck FROM s.c AS c LEFT ANTI JOIN (SELECT o.ck AS __dvm_c0 FROM s.o AS o) "
        "AS __dvm_ex1 ON __dvm_ex1.__dvm_c0 = c.ck",
    ), out


def test_uncorrelated_exists_becomes_a_one_row_flag():
    out = run(semi_anti_joins, "select c.ck from s.c c where exists (select 1 from s.o o where o.amt > 9)")
    assert same(
        out,
        "SELECT c.ck AS ck FROM s.c AS c CROSS JOIN (SELECT MAX(1) AS __dvm_e FROM "
        "(SELECT 1 AS `1` FROM s.o AS o WHERE o.amt > 9) AS __dvm_x2) AS __dvm_ex1 "
        "WHERE NOT __dvm_ex1.__dvm_e IS NULL",
    ), out


def test_in_becomes_a_semi_join_and_not_in_keeps_sql_null_rules():
    out = run(semi_anti_joins, "select o.ok from s.o o where o.ck in (select c.ck from s.c c where c.seg = 'x')")
    assert same(
        out,
        "SELECT o.ok AS ok FROM s.o AS o LEFT SEMI JOIN (SELECT c.ck AS ck FROM s.c AS c "
        "WHERE c.seg = 'x') AS __dvm_in1 ON o.ck = __dvm_in1.ck",
    ), out
    out = run(semi_anti_joins, "select o.ok from s.o o where o.ck not in (select c.ck from s.c c)")
    assert same(
        out,
        "SELECT o.ok AS ok FROM s.o AS o "
        "LEFT ANTI JOIN (SELECT c.ck AS ck FROM s.c AS c) AS __dvm_in1 ON o.ck = __dvm_in1.ck "
        "CROSS JOIN (SELECT MAX(CASE WHEN __dvm_x3.ck IS NULL THEN 1 ELSE 0 END) AS __dvm_m "
        "FROM (SELECT c.ck AS ck FROM s.c AS c) AS __dvm_x3) AS __dvm_nn2 "
        "WHERE __dvm_nn2.__dvm_m IS NULL OR (__dvm_nn2.__dvm_m = 0 AND NOT o.ck IS NULL)",
    ), out


def test_correlated_scalar_subquery_becomes_a_grouped_join():
    out = run(
        scalar_subqueries,
        "select o.ok from s.o o where o.amt < (select 0.2 * avg(l.qty) from s.l l where l.ok = o.ok and l.qty > 1)",
    )
    assert same(
        out,
        "SELECT o.ok AS ok FROM s.o AS o CROSS JOIN (SELECT l.ok AS __dvm_k0, 0.2 * AVG(l.qty) "
        "AS __dvm_v FROM s.l AS l WHERE l.qty > 1 GROUP BY l.ok) AS __dvm_sq1 "
        "WHERE o.ok = __dvm_sq1.__dvm_k0 AND o.amt < __dvm_sq1.__dvm_v",
    ), out


def test_correlated_count_or_a_subquery_outside_a_comparison_becomes_a_left_join():
    out = run(scalar_subqueries, "select o.ok from s.o o where o.amt > (select count(*) from s.l l where l.ok = o.ok)")
    assert same(
        out,
        "SELECT o.ok AS ok FROM s.o AS o LEFT JOIN (SELECT l.ok AS __dvm_k0, COUNT(*) AS __dvm_v, "
        "1 AS __dvm_m FROM s.l AS l GROUP BY l.ok) AS __dvm_sq1 ON o.ok = __dvm_sq1.__dvm_k0 "
        "WHERE o.amt > CASE WHEN __dvm_sq1.__dvm_m IS NULL THEN 0 ELSE __dvm_sq1.__dvm_v END",
    ), out
    out = run(scalar_subqueries, "select o.ok, (select max(l.qty) from s.l l where l.ok = o.ok) as top from s.o o")
    assert same(
        out,
        "SELECT o.ok AS ok, __dvm_sq1.__dvm_v AS top FROM s.o AS o LEFT JOIN (SELECT l.ok AS "
        "__dvm_k0, MAX(l.qty) AS __dvm_v, 1 AS __dvm_m FROM s.l AS l GROUP BY l.ok) AS __dvm_sq1 "
        "ON o.ok = __dvm_sq1.__dvm_k0",
    ), out


def test_uncorrelated_scalar_subquery_becomes_a_cross_join():
    out = run(scalar_subqueries, "select o.ok from s.o o where o.amt > (select avg(o2.amt) from s.o o2)")
    assert same(
        out,
        "SELECT o.ok AS ok FROM s.o AS o CROSS JOIN (SELECT AVG(o2.amt) AS __dvm_v FROM s.o AS o2) "
        "AS __dvm_sq1 WHERE o.amt > __dvm_sq1.__dvm_v",
    ), out


def test_exists_used_as_a_value_becomes_a_count_flag_subquery():
    out = run(
        exists_values,
        "select o.ok, case when exists (select 1 from s.c c where c.ck = o.ck and "
        "c.seg = 'x') then 1 else 0 end as e from s.o o where not (exists (select 1 from s.l l "
        "where l.ok = o.ok) = false)",
    )
    assert same(
        out,
        "SELECT o.ok AS ok, CASE WHEN (SELECT COUNT(*) > 0 AS __dvm_n FROM s.c AS c WHERE c.ck = o.ck AND "
        "c.seg = 'x') THEN 1 ELSE 0 END AS e FROM s.o AS o WHERE NOT ((SELECT COUNT(*) > 0 AS __dvm_n "
        "FROM s.l AS l WHERE l.ok = o.ok) = FALSE)",
    ), out
    # Under AND / OR / NOT only, EXISTS is left to the semi / anti join passes.
    kept = run(exists_values, "select o.ok from s.o o where not exists (select 1 from s.c c where c.ck = o.ck)")
    assert "EXISTS" in kept


def test_in_used_as_a_value_is_a_count_of_matches_as_spark_computes_it():
    out = run(
        exists_values,
        "select o.ok, o.ck in (select c.ck from s.c c where c.seg = 'x') as f, "
        "o.ok not in (select c.ck from s.c c) as nf from s.o o",
    )
    assert same(
        out,
        "SELECT o.ok AS ok, (SELECT COUNT(*) > 0 AS __dvm_n FROM s.c AS c WHERE c.seg = 'x' AND "
        "c.ck = o.ck) AS f, NOT o.ok IN (SELECT c.ck AS ck FROM s.c AS c) AS nf FROM s.o AS o",
    ), out


def test_scalar_subquery_in_a_grouped_select_list_is_joined_and_grouped_by():
    out = run(
        scalar_subqueries,
        "select o.ck, count(*) / (select count(*) from s.o o2) as share, "
        "sum((select count(*) from s.l l2 where l2.ok = o.ok)) as lines "
        "from s.o o group by o.ck",
    )
    # Spark itself refuses a correlated subquery outside the aggregates of a grouped block, so
    # the one grouped by is uncorrelated; inside an aggregate it is a per-row value.
    assert same(
        out,
        "SELECT o.ck AS ck, COUNT(*) / __dvm_sq1.__dvm_v AS share, "
        "SUM(CASE WHEN __dvm_sq2.__dvm_m IS NULL THEN 0 ELSE __dvm_sq2.__dvm_v END) AS lines "
        "FROM s.o AS o CROSS JOIN (SELECT COUNT(*) AS __dvm_v FROM s.o AS o2) AS __dvm_sq1 "
        "LEFT JOIN (SELECT l2.ok AS __dvm_k0, COUNT(*) AS __dvm_v, 1 AS __dvm_m FROM s.l AS l2 "
        "GROUP BY l2.ok) AS __dvm_sq2 ON o.ok = __dvm_sq2.__dvm_k0 "
        "GROUP BY o.ck, __dvm_sq1.__dvm_v",
    ), out


def test_having_with_a_subquery_moves_to_an_outer_where():
    out = run(
        having_subqueries,
        "select o.ck, sum(o.amt) as t from s.o o group by o.ck having sum(o.amt) > (select avg(o2.amt) from s.o o2)",
    )
    assert same(
        out,
        "SELECT __dvm_h1.__dvm_o0 AS ck, __dvm_h1.__dvm_o1 AS t FROM (SELECT o.ck AS __dvm_o0, "
        "SUM(o.amt) AS __dvm_o1, SUM(o.amt) AS __dvm_h0 FROM s.o AS o GROUP BY o.ck) AS __dvm_h1 "
        "WHERE __dvm_h1.__dvm_h0 > (SELECT AVG(o2.amt) AS _col_0 FROM s.o AS o2)",
    ), out


def test_the_pipeline_runs_the_passes_in_order_and_leaves_no_subquery_expression():
    out = rewrites.rewrite(
        "m",
        qualified(
            "select c.ck from s.c c where c.ck in (select o.ck from s.o o where o.amt > "
            "(select avg(o3.amt) from s.o o3)) and not exists (select 1 from s.o o2 where o2.ck = c.ck and o2.st = 'x')"
        ),
    )
    assert not any(isinstance(n, (exp.Exists, exp.In)) for n in out.walk())
    kinds = [f"{j.side} {j.kind}".strip() for j in out.args["joins"]]
    assert kinds == ["LEFT SEMI", "LEFT ANTI"]
    inner = out.args["joins"][0].this.this
    assert [j.kind for j in inner.args["joins"]] == ["CROSS"]  # the nested scalar subquery, hoisted


def test_semi_and_anti_joins_come_before_the_scalar_subquery_joins_they_do_not_read():
    # TPC-H q20's shape: the IN narrows the rows before the scalar subquery's aggregate is joined.
    out = rewrites.rewrite(
        "m",
        qualified(
            "select o.ok from s.o o where o.ck in (select c.ck from s.c c where c.seg = 'x') "
            "and o.amt > (select 0.5 * sum(l.qty) from s.l l where l.ok = o.ok) "
            "and not exists (select 1 from s.c c2 where c2.ck = o.ck and c2.seg = 'y')"
        ),
    )
    names = [j.this.alias for j in out.args["joins"]]
    kinds = [f"{j.side} {j.kind}".strip() for j in out.args["joins"]]
    assert kinds == ["LEFT SEMI", "LEFT ANTI", "CROSS"], out.sql("spark")
    assert names[2].startswith("__dvm_sq"), names
    # An IN whose value is the scalar subquery's reads that join: it stays after it.
    out = rewrites.rewrite(
        "m", qualified("select o.ok from s.o o where (select max(l.ok) from s.l l) in (select c.ck from s.c c)")
    )
    assert [f"{j.side} {j.kind}".strip() for j in out.args["joins"]] == ["CROSS", "LEFT SEMI"], out.sql("spark")


@pytest.mark.parametrize(
    "sql, reason",
    [
        (
            "select o.ok, case when o.ck in (select c.ck from s.c c where c.seg = o.st) then 1 end as e from s.o o",
            "outside a top-level AND",
        ),
        (
            "select o.ok, exists (select c.seg from s.c c where c.ck = o.ck group by c.seg) as e from s.o o",
            "outside a top-level AND",
        ),
        (
            "select o.ok from s.o o where size((select collect_list(l.qty) from s.l l where l.ok = o.ok)) = 0",
            "known value on no rows",
        ),
        ("select (select max(l.qty) from s.l l) as m, count(*) as n from s.o o", "aggregate without GROUP BY"),
        ("select o.ok from s.o o where o.amt > (select l.qty from s.l l)", "not one aggregate"),
        (
            "select o.ck, sum(o.amt) from s.o o group by o.ck having sum(o.amt) > "
            "(select max(l.qty) from s.l l where l.ok = o.ck)",
            "correlated scalar subquery in HAVING",
        ),
    ],
)
def test_forms_that_cannot_be_rewritten_are_named(sql, reason):
    with pytest.raises(UnsupportedSql) as err:
        rewrites.rewrite("m", qualified(sql))
    assert reason.lower() in err.value.construct.lower(), err.value.construct


def test_top_k_is_split_off_and_mapped_to_output_columns():
    body, top = split_top_k(
        "m", parse_query("m", "select ck, sum(amt) as t from s.o group by ck order by t desc, 1 limit 5 offset 2")
    )
    assert body.args.get("limit") is None and body.args.get("order") is None
    assert [pos for pos, _ in top.order] == [1, 0] and top.limit == 5 and top.offset == 2
    view = top.apply(exp.select("*").from_("base"), ["ck", "t"], [True, True]).sql("spark")
    assert view == "SELECT * FROM (SELECT * FROM base) AS __dvm_top ORDER BY `t` DESC, `ck` LIMIT 5 OFFSET 2"
    assert split_top_k("m", parse_query("m", "select ck from s.o order by ck"))[1] is None  # no LIMIT: no Top-K


# -- found in review: forms that must not be rewritten into something else ----------------------
@pytest.mark.parametrize(
    "sql, reason",
    [
        (
            "select o.ck, o.st, count(*) as n from s.o o group by o.ck, o.st grouping sets ((o.ck), (o.st))",
            "GROUP BY a, b GROUPING SETS",
        ),
        (
            "select o.ck, sum(o.amt) as t, rank() over (order by sum(o.amt)) as r from s.o o group by rollup(o.ck)",
            "window functions over GROUPING SETS",
        ),
        (
            "select o.ck, sum(o.amt) as t, rank() over (order by sum(o.amt)) as r from s.o o group by o.ck "
            "having sum(o.amt) > (select avg(o2.amt) from s.o o2)",
            "windows apply after HAVING",
        ),
        ("select c.ck from s.c c where not exists (select count(*) from s.o o where o.ck = c.ck)", "aggregated"),
    ],
)
def test_forms_whose_rewrite_would_change_the_result_are_refused(sql, reason):
    with pytest.raises(UnsupportedSql) as err:
        rewrites.rewrite("m", rewrites_input(sql))
    assert reason.lower() in err.value.construct.lower(), err.value.construct


def rewrites_input(sql: str) -> exp.Expression:
    from python_helpers.sql.top_k import split_top_k as _split

    return qualified(_split("m", parse_query("m", sql))[0].sql("spark"))


# -- LATERAL in FROM -------------------------------------------------------------------------
def test_lateral_generator_becomes_a_lateral_view_and_subqueries_become_expressions_or_joins():
    gen = run(lateral_joins, "select a.id, e.x from s.a a left join lateral explode(a.arr) as e(x) on true")
    assert same(gen, "SELECT a.id AS id, e.x AS x FROM s.a AS a LATERAL VIEW OUTER EXPLODE(a.arr) e AS x"), gen
    # A column list on the alias renames by position; chained LATERALs read the earlier one.
    chained = run(
        lateral_joins,
        "select s2.c, s1.y from s.o o, lateral (select o.amt as x, o.ok as y) s1(y, x), "
        "lateral (select s1.x * 2 as c) s2",
    )
    assert same(chained, "SELECT (o.ok * 2) AS c, o.amt AS y FROM s.o AS o"), chained
    joined = run(
        lateral_joins,
        "select o.ok, s.q from s.o o left join lateral "
        "(select l.qty as q from s.l l where l.ok = o.ok and l.qty > 1) s on true",
    )
    assert same(
        joined,
        "SELECT o.ok AS ok, (CASE WHEN __dvm_lat1.__dvm_m IS NULL THEN NULL ELSE "
        "__dvm_lat1.l__qty END) AS q FROM s.o AS o LEFT JOIN (SELECT l.ok AS l__ok, l.qty AS l__qty, "
        "1 AS __dvm_m FROM s.l AS l WHERE l.qty > 1) AS __dvm_lat1 ON __dvm_lat1.l__ok = o.ok",
    ), joined


@pytest.mark.parametrize(
    "sql, reason",
    [
        ("select s.n from s.o o, lateral (select count(*) as n) s", "without FROM"),
        (
            "select c.ck, s.one from s.o o, lateral (select 1 as one) s right join s.c c on c.ck = o.ck",
            "followed by a RIGHT or FULL join",
        ),
        (
            "select a.id, s.q from s.a a, lateral explode(a.arr) e(x), lateral (select l.qty as q from s.l l "
            "where l.ok = e.x) s",
            "later LATERAL reads the generated columns",
        ),
        (
            "select o.ok, s.q from s.o o, lateral (select l.qty as q from s.l l where exists "
            "(select 1 from s.c c where c.ck = o.ck)) s",
            "nested subquery that reads the outer row",
        ),
        (
            "select o.ok, s.q from s.o o, lateral (select l.qty as q from s.l l where l.ok = o.ok order by l.qty "
            "limit 1) s",
            "LATERAL subquery with",
        ),
    ],
)
def test_lateral_forms_that_would_change_the_result_are_refused(sql, reason):
    with pytest.raises(UnsupportedSql) as err:
        rewrites.rewrite("m", qualified(sql))
    assert reason.lower() in err.value.construct.lower(), err.value.construct


def test_in_as_a_value_is_left_alone_where_moving_x_inside_would_change_it():
    # `o.ck` would be captured by the subquery's own alias `o`.
    captured = run(exists_values, "select o.ok, o.ck in (select o.ok from s.l o) as f from s.o o")
    assert "IN (SELECT" in captured, captured
    windowed = run(
        exists_values, "select o.ok, o.ck in (select row_number() over (order by l.qty) from s.l l) as f from s.o o"
    )
    assert "IN (SELECT" in windowed, windowed


def test_an_in_narrows_the_groups_of_a_scalar_subquery_joined_on_the_same_value():
    out = rewrites.rewrite(
        "m",
        qualified(
            "select o.ok from s.o o where o.ck in (select c.ck from s.c c where c.seg = 'x') "
            "and o.amt > (select 0.5 * sum(l.qty) from s.l l where l.ok = o.ck) "
            "and o.amt < (select max(l2.qty) from s.l l2 where l2.ok = o.ok)"
        ),
    )
    scalar = {j.this.alias: j.this.this for j in out.args["joins"] if j.this.alias.startswith("__dvm_sq")}
    assert len(scalar) == 2, out.sql("spark")
    narrowed = [a for a, d in scalar.items() if d.args.get("joins")]
    assert len(narrowed) == 1, out.sql("spark")  # only the one keyed by the IN's value, o.ck
    join = scalar[narrowed[0]].args["joins"][0]
    assert (join.side, join.kind) == ("LEFT", "SEMI") and join.args["on"].this.sql("spark") == "l.ok", out.sql("spark")
    # NOT IN keeps rows whose value is absent: nothing to narrow.
    out = rewrites.rewrite(
        "m",
        qualified(
            "select o.ok from s.o o where o.ck not in (select c.ck from s.c c) "
            "and o.amt > (select sum(l.qty) from s.l l where l.ok = o.ck)"
        ),
    )
    assert not any(j.this.this.args.get("joins") for j in out.args["joins"] if j.this.alias.startswith("__dvm_sq"))


def test_an_in_does_not_narrow_a_scalar_subquery_keyed_by_a_value_of_another_type():
    # l.qty is an INT, o.ck and c.ck BIGINT: across types x = k and x = y need not give k = y.
    out = rewrites.rewrite(
        "m",
        qualified(
            "select o.ok from s.o o where o.ck in (select c.ck from s.c c) "
            "and o.amt > (select sum(l.qty) from s.l l where l.qty = o.ck)"
        ),
    )
    scalar = [j.this.this for j in out.args["joins"] if j.this.alias.startswith("__dvm_sq")]
    assert len(scalar) == 1 and not scalar[0].args.get("joins"), out.sql("spark")
