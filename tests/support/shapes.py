"""The query shapes the oracle tests run, by operator family, plus deterministic data for smoke runs.

Every shape reads sources t1, t2, t3 (columns: tests/support/sources.py) in the schema `{src}`.
Shapes avoid order-dependent results (max_by/min_by break ties on `id`, collected arrays are
sorted), so the recompute is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.support import sources as S
from tests.support.sources import row


@dataclass(frozen=True)
class Shape:
    name: str
    family: str
    sql: str

    def __str__(self):
        return self.name

    @property
    def tables(self) -> tuple:
        sql = self.sql.lower()
        return tuple(t for t in ("t1", "t2", "t3") if "{src}." + t in sql)


SHAPES = [
    # --- filter + project -----------------------------------------------------------------------
    Shape(
        "filter_project",
        "project",
        """
        SELECT id, k, v * 2 + 1 AS v2,
               CASE WHEN v > 0 THEN 'pos' WHEN v < 0 THEN 'neg' ELSE 'zero' END AS sign,
               COALESCE(g, 'none') AS g2, CAST(d AS DOUBLE) AS dd, x / 2 AS half,
               date_add(dt, 7) AS next_week, year(dt) AS yr, month(dt) AS mo
        FROM {src}.t1
        WHERE k IS NOT NULL AND (v >= -2 OR g = 'a')""",
    ),
    Shape("project_bag", "project", "SELECT k, g FROM {src}.t1"),
    Shape("filter_range", "project", "SELECT id, v, d FROM {src}.t1 WHERE v BETWEEN 0 AND 3 AND d IS NOT NULL"),
    Shape(
        "scalar_functions",
        "project",
        """
        SELECT upper(g) AS ug, concat_ws('-', g, CAST(k AS STRING)) AS gk, CAST(v AS STRING) AS vs,
               round(x, 1) AS rx, d * 2 AS d2, abs(v) AS av, datediff(dt, DATE'2024-01-01') AS days,
               date_format(dt, 'yyyy-MM') AS ym, nvl(v, 0) + nvl(k, 0) AS vk, greatest(v, k) AS gr
        FROM {src}.t1
        WHERE dt IS NULL OR dt >= DATE'2024-01-01'""",
    ),
    # --- joins ----------------------------------------------------------------------------------
    Shape(
        "join2",
        "join",
        """
        SELECT a.id AS aid, b.id AS bid, a.k, a.v, b.v AS bv, b.g AS bg
        FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k""",
    ),
    Shape(
        "join2_residual",
        "join",
        """
        SELECT a.id AS aid, b.id AS bid, a.g, a.v + b.v AS vv
        FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k AND a.g = b.g
        WHERE a.v > b.v - 3""",
    ),
    Shape(
        "join2_comma",
        "join",
        """
        SELECT a.k, b.x FROM {src}.t1 a, {src}.t2 b WHERE a.g = b.g AND b.x IS NOT NULL""",
    ),
    Shape(
        "join3",
        "join",
        """
        SELECT a.id AS aid, b.id AS bid, c.id AS cid, a.k, c.g, c.d
        FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k JOIN {src}.t3 c ON b.g = c.g""",
    ),
    Shape(
        "join_self",
        "join",
        """
        SELECT a.id AS aid, b.id AS bid FROM {src}.t1 a JOIN {src}.t1 b ON a.k = b.k AND a.v < b.v""",
    ),
    Shape(
        "join_agg",
        "join",
        """
        SELECT a.k, b.g, COUNT(*) AS n, SUM(a.v * b.v) AS s, MIN(b.x) AS mn, MAX(a.dt) AS mx
        FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k
        GROUP BY a.k, b.g""",
    ),
    # --- aggregates -----------------------------------------------------------------------------
    Shape(
        "agg_algebraic",
        "aggregate",
        """
        SELECT k, COUNT(*) AS n, COUNT(v) AS nv, SUM(v) AS sv, SUM(d) AS sd, AVG(x) AS ax,
               AVG(d) AS ad, AVG(v) AS av
        FROM {src}.t1 GROUP BY k""",
    ),
    Shape(
        "agg_variance",
        "aggregate",
        """
        SELECT g, STDDEV_SAMP(x) AS ssx, STDDEV_POP(x) AS spx, VAR_SAMP(v) AS vsv,
               VAR_POP(v) AS vpv, STDDEV(d) AS sdd, VARIANCE(x) AS vx
        FROM {src}.t1 GROUP BY g""",
    ),
    Shape(
        "agg_minmax",
        "aggregate",
        """
        SELECT k, MIN(v) AS mnv, MAX(v) AS mxv, MIN(x) AS mnx, MAX(d) AS mxd, MIN(dt) AS mndt,
               MAX(g) AS mxg
        FROM {src}.t1 GROUP BY k""",
    ),
    Shape(
        "agg_count_distinct",
        "aggregate",
        """
        SELECT g, COUNT(DISTINCT v) AS dv, COUNT(DISTINCT k) AS dk, SUM(DISTINCT v) AS sdv
        FROM {src}.t1 GROUP BY g""",
    ),
    # DISTINCT aggregates of one value: an aggregate over the distinct (group, value) pairs.
    Shape(
        "agg_distinct_one_value",
        "aggregate",
        """
        SELECT g, COUNT(DISTINCT v) AS dv, SUM(DISTINCT v) AS sdv, AVG(DISTINCT v) AS adv, MIN(v) AS mn
        FROM {src}.t1 GROUP BY g HAVING COUNT(DISTINCT v) > 0""",
    ),
    Shape(
        "agg_distinct_global_join",
        "aggregate",
        """
        SELECT COUNT(DISTINCT b.g) AS ng, MAX(b.g) AS mg FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k WHERE a.v > 0""",
    ),
    Shape(
        "agg_group_expr",
        "aggregate",
        """
        SELECT year(dt) AS yr, COALESCE(k, -1) % 2 AS parity, COUNT(*) AS n, SUM(v) AS sv
        FROM {src}.t1 GROUP BY year(dt), COALESCE(k, -1) % 2""",
    ),
    Shape(
        "agg_having",
        "aggregate",
        """
        SELECT k, g, COUNT(*) AS n, SUM(v) AS sv
        FROM {src}.t1 GROUP BY k, g HAVING COUNT(*) > 1 AND SUM(v) IS NOT NULL""",
    ),
    Shape(
        "agg_reaggregate",
        "aggregate",
        """
        SELECT k, sort_array(collect_set(g)) AS gs, sort_array(collect_list(v)) AS vs,
               max_by(v, id) AS last_v, min_by(g, id) AS first_g, percentile(v, 0.5) AS med
        FROM {src}.t1 GROUP BY k""",
    ),
    Shape(
        "agg_rescan_catalogue",
        "aggregate",
        """
        SELECT g, bool_and(v > 0) AS all_pos, bool_or(v > 3) AS any_big, bit_and(v) AS ba, bit_or(v) AS bo,
               bit_xor(k) AS bx, covar_pop(x, v) AS cp, regr_count(x, v) AS rc,
               median(v) AS md, approx_count_distinct(k) AS acd, count_if(v IS NULL) AS nnull
        FROM {src}.t1 GROUP BY g""",
    ),
    Shape(
        "agg_filter_clause",
        "aggregate",
        """
        SELECT k, COUNT(*) FILTER (WHERE v > 0) AS npos, SUM(v) FILTER (WHERE g = 'a') AS sa,
               count_if(x > 0) AS nx
        FROM {src}.t1 GROUP BY k""",
    ),
    Shape(
        "grouping_rollup",
        "aggregate",
        """
        SELECT k, g, COUNT(*) AS n, SUM(v) AS sv, GROUPING(g) AS gg, GROUPING_ID() AS gid
        FROM {src}.t1 GROUP BY ROLLUP(k, g) HAVING COUNT(*) > 0""",
    ),
    Shape(
        "grouping_sets_cube",
        "aggregate",
        """
        SELECT k, g, MAX(v) AS mv, COUNT(x) AS nx FROM {src}.t1 GROUP BY GROUPING SETS ((k), (g), ())""",
    ),
    Shape("grouping_cube", "aggregate", "SELECT k, g, SUM(d) AS sd FROM {src}.t1 GROUP BY CUBE(k, g)"),
    Shape(
        "grouping_rollup_join_expr",
        "aggregate",
        """
        SELECT b.g, a.k + 1 AS k1, COUNT(*) AS n, AVG(a.x) AS ax, MIN(a.v) AS mn, GROUPING(a.k + 1) AS gk,
               COUNT(*) FILTER (WHERE b.g = 'a') AS na
        FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k GROUP BY ROLLUP(b.g, a.k + 1)""",
    ),
    # A repeated grouping set: Spark returns its rows twice (the UNION ALL form of the rewrite).
    Shape(
        "grouping_sets_repeated",
        "aggregate",
        "SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM {src}.t1 GROUP BY GROUPING SETS ((k), (k), ())",
    ),
    Shape(
        "agg_global",
        "aggregate",
        """
        SELECT COUNT(*) AS n, COUNT(v) AS nv, SUM(v) AS sv, SUM(d) AS sd, AVG(x) AS ax,
               MIN(v) AS mn, MAX(d) AS mx, STDDEV_SAMP(x) AS sx
        FROM {src}.t1""",
    ),
    Shape(
        "agg_global_filtered",
        "aggregate",
        """
        SELECT COUNT(*) AS n, SUM(v) AS sv, MAX(dt) AS mx FROM {src}.t1 WHERE k = 1""",
    ),
    # --- distinct and set operations ------------------------------------------------------------
    Shape("distinct", "setop", "SELECT DISTINCT k, g FROM {src}.t1"),
    Shape("distinct_expr", "setop", "SELECT DISTINCT COALESCE(k, 0) + 1 AS k1, v > 0 AS pos FROM {src}.t1"),
    Shape(
        "union_all",
        "setop",
        """
        SELECT k, g FROM {src}.t1
        UNION ALL SELECT k, g FROM {src}.t2
        UNION ALL SELECT k, 'lit' AS g FROM {src}.t1 WHERE v > 0""",
    ),
    Shape("union_all_same_source", "setop", "SELECT k FROM {src}.t1 UNION ALL SELECT v AS k FROM {src}.t1"),
    Shape("union_distinct", "setop", "SELECT k, g FROM {src}.t1 UNION SELECT k, g FROM {src}.t2"),
    Shape("intersect", "setop", "SELECT k, g FROM {src}.t1 INTERSECT SELECT k, g FROM {src}.t2"),
    Shape("intersect_all", "setop", "SELECT k FROM {src}.t1 INTERSECT ALL SELECT k FROM {src}.t2"),
    Shape("except", "setop", "SELECT k, g FROM {src}.t1 EXCEPT SELECT k, g FROM {src}.t3"),
    Shape("except_all", "setop", "SELECT g FROM {src}.t1 EXCEPT ALL SELECT g FROM {src}.t2"),
    # --- subqueries and CTEs --------------------------------------------------------------------
    Shape(
        "subquery_from",
        "subquery",
        """
        SELECT s.k, s.total * 2 AS dbl
        FROM (SELECT k, SUM(v) AS total FROM {src}.t1 WHERE v IS NOT NULL GROUP BY k) s
        WHERE s.total > 0""",
    ),
    Shape(
        "cte_single",
        "subquery",
        """
        WITH f AS (SELECT id, k, v FROM {src}.t1 WHERE g IS NOT NULL)
        SELECT k, COUNT(*) AS n, MAX(v) AS mv FROM f GROUP BY k""",
    ),
    Shape(
        "agg_over_join_subquery",
        "subquery",
        """
        SELECT j.g, COUNT(*) AS n, SUM(j.v) AS sv
        FROM (SELECT a.k, b.g, a.v FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k) j
        GROUP BY j.g""",
    ),
    Shape(
        "agg_then_join",
        "subquery",
        """
        SELECT a.k, a.n, b.id AS bid, b.v
        FROM (SELECT k, COUNT(*) AS n FROM {src}.t1 GROUP BY k) a JOIN {src}.t2 b ON a.k = b.k""",
    ),
    # --- outer joins (NULL-padded rows come and go with first / last matches) --------------------
    Shape(
        "left_join",
        "outer",
        """
        SELECT a.id AS aid, a.k, b.id AS bid, b.v AS bv FROM {src}.t1 a LEFT JOIN {src}.t2 b ON a.k = b.k""",
    ),
    Shape(
        "left_join_extra_on_where",
        "outer",
        """
        SELECT a.id AS aid, b.id AS bid, b.g AS bg
        FROM {src}.t1 a LEFT OUTER JOIN {src}.t2 b ON a.k = b.k AND b.v > 0
        WHERE a.v IS NOT NULL OR b.g = 'a'""",
    ),
    Shape(
        "right_join",
        "outer",
        """
        SELECT a.id AS aid, b.id AS bid, b.g FROM {src}.t1 a RIGHT JOIN {src}.t2 b ON a.g = b.g AND a.k = b.k""",
    ),
    Shape(
        "full_join",
        "outer",
        """
        SELECT a.id AS aid, b.id AS bid, COALESCE(a.k, b.k) AS k
        FROM {src}.t1 a FULL OUTER JOIN {src}.t3 b ON a.k = b.k""",
    ),
    Shape(
        # A full join to a count per key: its changed keys come from t2's change, and a group of
        # NULL key is padded into a row of its own, which changes with it.
        "full_join_grouped",
        "outer",
        """
        SELECT a.id AS aid, s.k AS sk, s.n FROM {src}.t1 a
        FULL OUTER JOIN (SELECT k, COUNT(*) AS n FROM {src}.t2 GROUP BY k) s ON a.k = s.k""",
    ),
    Shape(
        "left_join_count",
        "outer",
        """
        SELECT a.k, COUNT(b.id) AS n, SUM(b.v) AS s
        FROM {src}.t1 a LEFT JOIN {src}.t2 b ON a.k = b.k AND a.g = b.g GROUP BY a.k""",
    ),
    Shape(
        "left_join_theta",
        "outer",
        """
        SELECT a.id AS aid, b.id AS bid FROM {src}.t1 a LEFT JOIN {src}.t3 b ON a.v < b.v""",
    ),
    Shape(
        "left_join_using_self",
        "outer",
        """
        SELECT k, a.id AS aid, b.id AS bid FROM {src}.t1 a LEFT JOIN {src}.t1 b USING (k)""",
    ),
    Shape(
        "natural_left_join",
        "outer",
        """
        SELECT k, a.v, b.g FROM (SELECT k, v FROM {src}.t1) a NATURAL LEFT JOIN (SELECT k, g FROM {src}.t2) b""",
    ),
    Shape(
        "left_then_inner",
        "outer",
        """
        SELECT a.id AS aid, b.id AS bid, c.id AS cid
        FROM {src}.t1 a JOIN {src}.t3 c ON a.g = c.g LEFT JOIN {src}.t2 b ON a.k = b.k""",
    ),
    # --- semi and anti joins ------------------------------------------------------------------------
    Shape(
        "exists_correlated",
        "semi",
        """
        SELECT id, k, v FROM {src}.t1 a
        WHERE EXISTS (SELECT 1 FROM {src}.t2 b WHERE b.k = a.k AND b.v > a.v)""",
    ),
    Shape(
        "not_exists",
        "semi",
        """
        SELECT id, k, g FROM {src}.t1 a
        WHERE NOT EXISTS (SELECT * FROM {src}.t2 b WHERE b.k = a.k AND b.g = a.g) AND a.id > 0""",
    ),
    Shape("in_subquery", "semi", "SELECT id, g FROM {src}.t1 WHERE k IN (SELECT k FROM {src}.t2 WHERE v > 0)"),
    Shape(
        "not_in_with_nulls",
        "semi",
        """
        SELECT id, k FROM {src}.t1 WHERE k NOT IN (SELECT k FROM {src}.t2 WHERE g = 'a' OR g IS NULL)""",
    ),
    Shape(
        "exists_uncorrelated",
        "semi",
        """
        SELECT id, v FROM {src}.t1 WHERE EXISTS (SELECT 1 FROM {src}.t2 WHERE v > 3) AND k IS NOT NULL""",
    ),
    Shape(
        "anti_then_aggregate",
        "semi",
        """
        SELECT g, COUNT(*) AS n FROM {src}.t1 a
        WHERE NOT EXISTS (SELECT 1 FROM {src}.t3 c WHERE c.k = a.k) GROUP BY g""",
    ),
    Shape(
        "or_exists",
        "semi",
        """
        SELECT id, k FROM {src}.t1 a
        WHERE a.v > 3 OR EXISTS (SELECT 1 FROM {src}.t2 b WHERE b.k = a.k AND b.g = a.g)""",
    ),
    Shape(
        "not_and_in_grouped",
        "semi",
        """
        SELECT g, COUNT(*) AS n, SUM(v) AS s FROM {src}.t1 a
        WHERE NOT (a.v > 0 AND a.k IN (SELECT k FROM {src}.t2)) GROUP BY g""",
    ),
    Shape(
        "or_not_in_nulls",
        "semi",
        """
        SELECT id, k FROM {src}.t1 a
        WHERE a.k NOT IN (SELECT k FROM {src}.t2 WHERE v > 0)
           OR (a.g = 'a' AND EXISTS (SELECT 1 FROM {src}.t3 c WHERE c.k = a.k))""",
    ),
    Shape(
        "in_tuple_and_join",
        "semi",
        """
        SELECT a.id AS aid, c.id AS cid FROM {src}.t1 a JOIN {src}.t3 c ON a.k = c.k
        WHERE (a.k, a.g) IN (SELECT k, g FROM {src}.t2)""",
    ),
    # --- scalar subqueries ------------------------------------------------------------------------
    Shape("scalar_uncorrelated", "sublink", "SELECT id, v FROM {src}.t1 WHERE v > (SELECT AVG(v) FROM {src}.t2)"),
    Shape(
        "scalar_correlated",
        "sublink",
        """
        SELECT id, k, v FROM {src}.t1 a WHERE a.v >= (SELECT MAX(b.v) FROM {src}.t2 b WHERE b.k = a.k)""",
    ),
    Shape(
        "scalar_correlated_two_keys",
        "sublink",
        """
        SELECT id, x FROM {src}.t1 a
        WHERE a.x < (SELECT 2 * AVG(b.x) FROM {src}.t2 b WHERE b.k = a.k AND b.g = a.g AND b.v IS NOT NULL)""",
    ),
    Shape(
        # TPC-H q20's shape: the IN also narrows the scalar subquery's groups (sql/rewrites).
        "in_beside_correlated_scalar",
        "sublink",
        """
        SELECT id, k, v, (SELECT MIN(d.v) FROM {src}.t2 d WHERE d.k = a.k) AS low FROM {src}.t1 a
        WHERE a.k IN (SELECT b.k FROM {src}.t2 b WHERE b.v > 0)
          AND a.v > (SELECT 0.5 * SUM(c.v) FROM {src}.t3 c WHERE c.k = a.k AND c.g = a.g)""",
    ),
    Shape(
        "scalar_in_select",
        "sublink",
        """
        SELECT id, k, (SELECT MAX(b.v) FROM {src}.t2 b WHERE b.k = a.k) AS mb,
               v - (SELECT AVG(c.v) FROM {src}.t3 c) AS dv
        FROM {src}.t1 a""",
    ),
    Shape(
        "scalar_count_and_coalesce",
        "sublink",
        """
        SELECT id, g FROM {src}.t1 a
        WHERE (SELECT COUNT(*) FROM {src}.t2 b WHERE b.k = a.k AND b.g = a.g) = 0
           OR COALESCE((SELECT SUM(b.v) FROM {src}.t2 b WHERE b.k = a.k), 0) > 1""",
    ),
    Shape(
        "having_scalar",
        "sublink",
        """
        SELECT k, SUM(v) AS s FROM {src}.t1 GROUP BY k HAVING SUM(v) > (SELECT AVG(v) FROM {src}.t2)""",
    ),
    Shape(
        "exists_as_value",
        "sublink",
        """
        SELECT a.id, CASE WHEN EXISTS (SELECT 1 FROM {src}.t2 b WHERE b.k = a.k AND b.v > 0) THEN 'y' ELSE 'n' END AS f,
               NOT EXISTS (SELECT 1 FROM {src}.t3 c WHERE c.g = a.g) AS lonely
        FROM {src}.t1 a""",
    ),
    Shape(
        "in_as_value",
        "sublink",
        """
        SELECT a.id, a.k IN (SELECT b.v FROM {src}.t2 b WHERE b.g <> 'c') AS f,
               CASE WHEN a.v IN (SELECT c.k FROM {src}.t3 c) THEN 'in' ELSE 'out' END AS nf
        FROM {src}.t1 a
        WHERE COALESCE(a.g IN (SELECT c.g FROM {src}.t3 c WHERE c.v > -5), TRUE)""",
    ),
    Shape(
        "scalar_in_grouped_select",
        "sublink",
        """
        SELECT a.k, SUM(a.v) AS s, COUNT(*) / (SELECT COUNT(*) FROM {src}.t1) AS share,
               EXISTS (SELECT 1 FROM {src}.t3 c WHERE c.v < 0) AS any_neg,
               SUM(CASE WHEN EXISTS (SELECT 1 FROM {src}.t3 c WHERE c.k = a.k AND c.v < 0) THEN 1 ELSE 0 END) AS with_neg
        FROM {src}.t1 a GROUP BY a.k""",
    ),
    Shape(
        "scalar_inside_aggregate",
        "sublink",
        """
        SELECT a.g, SUM((SELECT MAX(b.v) FROM {src}.t2 b WHERE b.k = a.k)) AS s, COUNT(*) AS n
        FROM {src}.t1 a GROUP BY a.g""",
    ),
    Shape(
        "cte_twice_max",
        "sublink",
        """
        WITH c AS (SELECT k, SUM(v) AS s FROM {src}.t1 GROUP BY k)
        SELECT c.k, c.s FROM c WHERE c.s = (SELECT MAX(s) FROM c)""",
    ),
    # --- Top-K (orders total up to identical rows, so every answer is the same multiset) ---------
    Shape(
        "topk_groups",
        "topk",
        """
        SELECT k, SUM(v) AS s, COUNT(*) AS n FROM {src}.t1 GROUP BY k ORDER BY s DESC, k LIMIT 2""",
    ),
    Shape(
        "topk_rows_offset",
        "topk",
        """
        SELECT id, k, g, v FROM {src}.t1 ORDER BY v DESC, id, k, g LIMIT 3 OFFSET 1""",
    ),
    Shape(
        "topk_join",
        "topk",
        """
        SELECT a.id AS aid, b.id AS bid, a.v + b.v AS vv FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k
        ORDER BY vv, aid, bid LIMIT 4""",
    ),
    # --- window functions (orders total up to rows the output cannot tell apart) ---------------
    Shape(
        "window_partitioned",
        "window",
        """
        SELECT id, k, v, RANK() OVER (PARTITION BY k ORDER BY v) AS r, SUM(v) OVER (PARTITION BY k) AS sk,
               ROW_NUMBER() OVER (PARTITION BY k ORDER BY v, id) AS rn
        FROM {src}.t1""",
    ),
    Shape(
        "window_common_key_frames",
        "window",
        """
        SELECT id, g, k, v, DENSE_RANK() OVER (PARTITION BY g ORDER BY v DESC) AS dr,
               COUNT(*) OVER (PARTITION BY g, k) AS n,
               SUM(v) OVER (PARTITION BY g ORDER BY v RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS near
        FROM {src}.t1""",
    ),
    Shape(
        "window_whole_input",
        "window",
        """
        SELECT id, v, SUM(v) OVER () AS tot, RANK() OVER (ORDER BY v) AS r, CUME_DIST() OVER (ORDER BY v) AS cd
        FROM {src}.t1""",
    ),
    Shape(
        "window_over_aggregate",
        "window",
        """
        SELECT k, SUM(v) AS s, RANK() OVER (ORDER BY SUM(v) DESC) AS r FROM {src}.t1 GROUP BY k""",
    ),
    Shape(
        "window_top_n_per_group",
        "window",
        """
        SELECT x.k, x.v, x.r FROM (SELECT id, k, v, RANK() OVER (PARTITION BY k ORDER BY v DESC) AS r FROM {src}.t1) x
        WHERE x.r <= 2""",
    ),
    Shape(
        "window_in_expressions_named",
        "window",
        """
        SELECT id, CASE WHEN RANK() OVER w <= 1 THEN 'top' ELSE 'rest' END AS band,
               COALESCE(LAG(v) OVER w, 0) AS prev, LEAD(v, 1) OVER w AS nxt
        FROM {src}.t1 WINDOW w AS (PARTITION BY g ORDER BY v, id)""",
    ),
    # --- generators -------------------------------------------------------------------------------
    Shape(
        "lateral_explode",
        "generator",
        """
        SELECT t.id, t.g, e FROM {src}.t1 t LATERAL VIEW explode(array(t.k, t.v)) x AS e WHERE e IS NOT NULL""",
    ),
    Shape(
        "lateral_outer_posexplode",
        "generator",
        """
        SELECT id, p, e FROM {src}.t1 LATERAL VIEW OUTER posexplode(sequence(0, k)) x AS p, e""",
    ),
    Shape(
        "lateral_after_join_then_aggregate",
        "generator",
        """
        SELECT e, COUNT(*) AS n, SUM(b.v) AS s
        FROM {src}.t1 a JOIN {src}.t2 b ON a.k = b.k LATERAL VIEW explode(array(a.g, b.g)) x AS e
        GROUP BY e""",
    ),
    Shape(
        "lateral_inline_structs",
        "generator",
        """
        SELECT id, f1, f2 FROM {src}.t2
        LATERAL VIEW inline(array(named_struct('f1', k, 'f2', g), named_struct('f1', v, 'f2', 'z'))) s AS f1, f2""",
    ),
    Shape(
        "lateral_generator_in_from",
        "generator",
        """
        SELECT t.id, e.x FROM {src}.t1 t JOIN {src}.t2 b ON b.k = t.k, LATERAL explode(array(t.v, b.v)) AS e(x)
        WHERE e.x IS NOT NULL""",
    ),
    Shape(
        "lateral_left_generator",
        "generator",
        """
        SELECT t.id, e.p, e.x FROM {src}.t1 t LEFT JOIN LATERAL posexplode(sequence(0, t.k)) AS e(p, x) ON TRUE""",
    ),
    # --- correlated LATERAL subqueries -----------------------------------------------------------
    Shape(
        "lateral_subquery_expressions",
        "lateral",
        """
        SELECT t.id, s.b, s.c FROM {src}.t1 t, LATERAL (SELECT t.v + 1 AS b, t.k * 2 AS c) s WHERE s.b > 0""",
    ),
    Shape(
        "lateral_subquery_join",
        "lateral",
        """
        SELECT t.id, s.bv, s.tot FROM {src}.t1 t
        LEFT JOIN LATERAL (SELECT b.v AS bv, b.v + t.v AS tot FROM {src}.t2 b WHERE b.k = t.k AND b.g IS NOT NULL) s
        ON TRUE""",
    ),
    Shape(
        "lateral_subquery_aggregate",
        "lateral",
        """
        SELECT t.id, s.mx, s.n FROM {src}.t1 t,
        LATERAL (SELECT MAX(b.v) AS mx, COUNT(*) AS n FROM {src}.t2 b WHERE b.k = t.k) s""",
    ),
    # --- recursive CTEs (depth-bounded: random edges form cycles) ------------------------------
    Shape(
        "recursive_paths",
        "recursive",
        """
        WITH RECURSIVE r(src, node, depth) AS (
          SELECT id, k, 0 FROM {src}.t1 WHERE k IS NOT NULL
          UNION ALL
          SELECT r.src, (b.v + 5) % 4, r.depth + 1 FROM r JOIN {src}.t2 b ON r.node = b.k WHERE r.depth < 3)
        SELECT src, node, depth FROM r""",
    ),
    Shape(
        "recursive_reach_counts",
        "recursive",
        """
        WITH RECURSIVE r AS (
          SELECT a.g AS root, a.k AS node, 1 AS hops FROM {src}.t1 a WHERE a.v > 0
          UNION ALL
          SELECT r.root, b.v % 4 AS node, r.hops + 1 AS hops FROM r, {src}.t2 b
          WHERE b.k = r.node AND r.hops < 3 AND b.v IS NOT NULL)
        SELECT root, COUNT(*) AS paths, COUNT(DISTINCT node) AS reached, MAX(hops) AS deepest
        FROM r GROUP BY root""",
    ),
    Shape(
        "recursive_self_only",
        "recursive",
        """
        WITH RECURSIVE r(id, k, n, lim) AS (
          SELECT id, k, 1, v FROM {src}.t1 WHERE v > 0
          UNION ALL
          SELECT id, k, n + 1, lim FROM r WHERE n < lim)
        SELECT k, SUM(n) AS s, COUNT(*) AS c FROM r GROUP BY k""",
    ),
    Shape(
        "recursive_two_anchors_semi_distinct",
        "recursive",
        """
        WITH RECURSIVE r(root, node, depth) AS (
          SELECT 'one', k, 0 FROM {src}.t1 WHERE g = 'a'
          UNION ALL
          SELECT 'three', k, 0 FROM {src}.t3 WHERE v < 0
          UNION ALL
          SELECT r.root, b.v % 4, r.depth + 1 FROM r JOIN {src}.t2 b ON r.node = b.k
          WHERE r.depth < 2 AND EXISTS (SELECT 1 FROM {src}.t3 c WHERE c.k = b.k AND c.g IS NOT NULL))
        SELECT DISTINCT root, node FROM r""",
    ),
    # --- SQL spellings the front end must resolve ---------------------------------------------
    Shape("syntax_group_ordinal", "syntax", "SELECT k, COUNT(*) AS n, MAX(g) AS mg FROM {src}.t1 GROUP BY 1"),
    Shape("syntax_group_alias", "syntax", "SELECT year(dt) AS yr, SUM(v) AS sv FROM {src}.t1 GROUP BY yr"),
    Shape("syntax_select_star", "syntax", "SELECT * FROM {src}.t1 WHERE v > 0"),
    Shape(
        "syntax_star_subquery",
        "syntax",
        """
        SELECT s.* FROM (SELECT k, g, v FROM {src}.t1) s WHERE s.k IS NOT NULL""",
    ),
    Shape(
        "syntax_case_and_quotes",
        "syntax",
        """
        SELECT `K` AS `Key Col`, G AS `g-value`, v AS `select` FROM {src}.T1 WHERE V <> 0""",
    ),
    Shape("syntax_unaliased_outputs", "syntax", "SELECT k, COUNT(*), SUM(v) + 1, max(g) FROM {src}.t1 GROUP BY k"),
    Shape(
        "syntax_hidden_having",
        "syntax",
        """
        SELECT g, COUNT(*) AS n FROM {src}.t1 GROUP BY g HAVING MIN(x) < 1 AND MAX(v) >= 0""",
    ),
    Shape(
        "syntax_count_distinct_multi",
        "syntax",
        """
        SELECT k, COUNT(DISTINCT g, v) AS n, COUNT(DISTINCT v) AS dv, SUM(v) AS sv FROM {src}.t1 GROUP BY k""",
    ),
    Shape(
        "syntax_nested_subqueries",
        "syntax",
        """
        SELECT a.k, a.v FROM (SELECT k, v FROM (SELECT k, v FROM {src}.t1 WHERE v > -3) x WHERE k > 0) a""",
    ),
    Shape(
        "syntax_agg_over_union_all",
        "syntax",
        """
        SELECT k, SUM(v) AS s, COUNT(*) AS n
        FROM (SELECT k, v FROM {src}.t1 UNION ALL SELECT k, v FROM {src}.t2) u GROUP BY k""",
    ),
    Shape("syntax_join_using", "syntax", "SELECT k, a.v, b.v AS bv FROM {src}.t1 a JOIN {src}.t2 b USING (k)"),
    Shape(
        "syntax_in_like_between",
        "syntax",
        """
        SELECT id, g, v FROM {src}.t1
        WHERE (g IN ('a', 'b') AND k NOT IN (0)) OR g LIKE 'c%' OR v BETWEEN -1 AND 1""",
    ),
]

SHAPES_BY_NAME = {s.name: s for s in SHAPES}
FAMILIES = sorted({s.family for s in SHAPES})


def shapes(family: str) -> list:
    return [s for s in SHAPES if s.family == family]


# ---------------------------------------------------------------------------------------------
# Deterministic data for smoke tests: colliding keys, NULLs, exact duplicates.

INITIAL = {
    "t1": [
        row(1, 0, "a", 3, 1.5, "10.25", "2023-12-30"),
        row(2, 0, "b", -2, 2.0, "-3.10", "2024-01-02"),
        row(3, 1, "a", 5, 0.1, "7.00", "2024-01-15"),
        row(4, 1, "a", 5, 0.1, "7.00", "2024-01-15"),
        row(4, 1, "a", 5, 0.1, "7.00", "2024-01-15"),  # exact duplicate (same id)
        row(5, 1, None, None, None, None, None),
        row(6, 2, "c", 0, -7.25, "0.00", "2024-02-29"),
        row(7, 2, "b", 1, 1e3, "99999.99", "2023-12-31"),
        row(8, None, "a", 2, 2.5, "1.50", "2024-01-01"),
        row(9, None, None, -5, None, "-0.01", "2024-03-01"),
        row(10, 3, "c", 4, 0.0, "2.00", None),
    ],
    "t2": [
        row(1, 0, "a", 1, 0.5, "1.00", "2024-01-01"),
        row(2, 0, "a", 2, None, "2.00", "2024-01-02"),
        row(3, 1, "b", -1, 3.0, None, "2024-01-03"),
        row(4, 2, "c", 4, 1.0, "4.00", "2023-12-24"),
        row(5, None, "a", 0, 2.0, "5.00", None),
        row(6, 3, None, 3, -1.0, "6.00", "2024-02-01"),
    ],
    "t3": [
        row(1, 0, "a", 1, 1.0, "1.00", "2024-01-01"),
        row(2, 1, "b", 2, 2.0, "2.00", "2024-01-05"),
        row(3, 2, "b", 3, 3.0, "3.00", "2024-01-09"),
        row(4, None, None, None, None, None, None),
    ],
}


def _r(k=None, g=None, v=None, x=None, d=None, dt=None):
    return row(None, k, g, v, x, d, dt)


SMOKE_BATCHES = [
    # 1: inserts (new group, duplicates), group-key move, value -> NULL, join-key change on t2
    [
        S.Insert("t1", [_r(3, "b", -1, 4.0, "1.10", "2024-01-20"), _r(0, "a", 3, 1.5, "10.25", "2023-12-30")]),
        S.InsertDuplicates("t1", [0, 2]),
        S.UpdateRows("t1", [1], {"k": 2}),
        S.UpdateRows("t1", [2], {"v": None, "x": None}),
        S.Insert("t2", [_r(1, "a", 9, 0.25, "3.30", "2024-01-10"), _r(None, None, None, None, None, None)]),
        S.UpdateRows("t2", [0], {"k": 1}),
        S.UpdateRows("t3", [1], {"g": "a"}),
    ],
    # 2: delete the MIN/MAX holders, shrink a MAX by update, move a whole group, changes on both sides
    [
        S.DeleteExtreme("t1", "v", "max", "k", 1),
        S.DeleteExtreme("t1", "x", "min", "k", 2),
        S.UpdateExtreme("t1", "v", "max", "k", 0, -5),
        S.DeleteExtreme("t1", "d", "max", None, None),
        S.UpdateWhere("t1", "g", "a", {"g": "b"}),
        S.DeleteRows("t2", [1]),
        S.UpdateRows("t2", [2], {"g": "c", "v": 5}),
        S.Insert("t3", [_r(3, "c", 1, 9.0, "9.00", "2024-02-02")]),
        # delete a whole group, update values incl. dates/decimals, NULL join keys, insert + delete
        S.DeleteWhere("t1", "k", 1),
        S.UpdateRows("t1", [0, 3], {"dt": None, "d": "12.34"}),
        S.Insert("t1", [_r(1, "c", 2, 0.5, "0.50", "2024-01-31")]),
        S.DeleteWhere("t1", "g", "c"),
        S.DeleteWhere("t2", "k", None),
        S.Insert("t2", [_r(None, "b", 1, 1.0, "1.00", "2024-01-01")]),
        S.DeleteWhere("t3", "g", "b"),
    ],
    # 3: empty a table (aggregates over empty input: count 0, sum NULL)
    [S.DeleteAll("t1"), S.UpdateRows("t2", [0], {"v": None})],
    # 4: refill it
    [
        S.Insert(
            "t1",
            [
                _r(0, "a", 1, 1.0, "1.00", "2024-01-01"),
                _r(0, "a", 1, 1.0, "1.00", "2024-01-01"),
                _r(2, None, None, None, None, None),
            ],
        ),
        S.Insert("t3", [_r(2, "a", 0, 0.0, "0.00", "2024-01-01")]),
    ],
]


def _fix_decimals(batches):
    # UpdateRows above gives "12.34" for d as text; make it a Decimal like every other d value.
    import decimal

    for batch in batches:
        for op in batch:
            updates = getattr(op, "updates", None)
            if updates and isinstance(updates.get("d"), str):
                updates["d"] = decimal.Decimal(updates["d"])
    return batches


SMOKE_BATCHES = _fix_decimals(SMOKE_BATCHES)
