"""Stream tables over Spark views (view inlining) and over other stream tables, against the oracle."""

from __future__ import annotations

import pytest

from python_helpers.errors import UnsupportedSql
from tests.support import sources as S
from tests.support.harness import run_cycles
from tests.support.shapes import INITIAL, SMOKE_BATCHES

pytestmark = pytest.mark.spark


def _sources_with_views(env):
    for t in ("t1", "t2", "t3"):  # the smoke batches change t3 too
        env.source(t, INITIAL[t])
    # dbt creates a view model only when what it reads resolves: publish the source views first.
    warm = env.stream("warm", "SELECT k FROM {src}.t1 UNION ALL SELECT k FROM {src}.t2")
    warm.refresh(expect="full")
    spark = env.spark
    spark.sql(f"CREATE VIEW {env.target}.v_pos AS SELECT k, v, g FROM {env.src}.t1 WHERE v > 0")
    spark.sql(f"USE {env.target}")
    try:  # unqualified names in a view resolve in the namespace it was created in
        spark.sql(f"CREATE VIEW {env.target}.v_sum (key, total) AS SELECT k, SUM(v) AS s FROM v_pos GROUP BY k")
    finally:
        spark.sql("USE default")


def test_a_stream_table_over_views_is_maintained_over_their_base_tables(env):
    _sources_with_views(env)
    stream = env.stream(
        "over_views",
        """
        SELECT a.key, a.total, b.g, b.id AS bid FROM {target}.v_sum a JOIN {src}.t2 b ON a.key = b.k""".replace(
            "{target}", env.target
        ),
        oracle_sql="""
        SELECT a.key, a.total, b.g, b.id AS bid
        FROM (SELECT k AS key, s AS total
              FROM (SELECT k, SUM(v) AS s FROM (SELECT k, v, g FROM {src}.t1 WHERE v > 0) p GROUP BY k) x) a
        JOIN {src}.t2 b ON a.key = b.k""",
    )
    run_cycles(env, [stream], SMOKE_BATCHES, keep_going=False)
    assert [r.mode for r in stream.results] == ["full"] + ["differential"] * len(SMOKE_BATCHES)
    assert set(stream.results[-1].source_versions) == {f"{env.src}.t1", f"{env.src}.t2"}  # the base tables


def test_redefining_a_view_rebuilds_the_stream_table(env):
    _sources_with_views(env)
    stream = env.stream(
        "over_view",
        f"SELECT k, COUNT(*) AS n FROM {env.target}.v_pos GROUP BY k",
        oracle_sql="SELECT k, COUNT(*) AS n FROM {src}.t1 WHERE v > 0 GROUP BY k",
    )
    stream.refresh(expect="full")
    stream.check()
    env.spark.sql(f"CREATE OR REPLACE VIEW {env.target}.v_pos AS SELECT k, v, g FROM {env.src}.t1 WHERE v >= 0")
    stream.oracle_sql = env.sql("SELECT k, COUNT(*) AS n FROM {src}.t1 WHERE v >= 0 GROUP BY k")
    result = stream.refresh(expect="full")
    assert "changed" in result.reason
    stream.check()
    env.apply([S.Insert("t1", [S.row(None, 9, "z", 0, None, None, None)])])
    stream.refresh(expect="differential")
    stream.check()


UPSTREAMS = {
    # name: (upstream SQL, downstream SQL over it, the downstream spelled out over the sources)
    "up_agg": (
        "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM {src}.t1 GROUP BY k HAVING COUNT(*) > 1",
        "SELECT a.k, a.n, a.s, b.id AS bid FROM {up} a JOIN {src}.t2 b ON a.k = b.k",
        "SELECT a.k, a.n, a.s, b.id AS bid FROM (SELECT k, COUNT(*) AS n, SUM(v) AS s FROM {src}.t1 "
        "GROUP BY k HAVING COUNT(*) > 1) a JOIN {src}.t2 b ON a.k = b.k",
    ),
    "up_bag": (
        "SELECT k, g FROM {src}.t1 WHERE v IS NOT NULL",
        "SELECT g, COUNT(*) AS n, COUNT(k) AS nk FROM {up} GROUP BY g",
        "SELECT g, COUNT(*) AS n, COUNT(k) AS nk FROM (SELECT k, g FROM {src}.t1 WHERE v IS NOT NULL) u GROUP BY g",
    ),
    "up_distinct": (
        "SELECT DISTINCT k, g FROM {src}.t1",
        "SELECT u.k, u.g, t.v FROM {up} u JOIN {src}.t1 t ON u.k = t.k AND u.g = t.g",
        "SELECT u.k, u.g, t.v FROM (SELECT DISTINCT k, g FROM {src}.t1) u JOIN {src}.t1 t ON u.k = t.k AND u.g = t.g",
    ),
}


@pytest.mark.parametrize("name", sorted(UPSTREAMS))
def test_a_stream_table_over_a_stream_table_is_differential(env, name):
    up_sql, down_sql, oracle = UPSTREAMS[name]
    for t in ("t1", "t2", "t3"):
        env.source(t, INITIAL[t])
    upstream = env.stream(name, up_sql)
    down = env.stream("down", down_sql.replace("{up}", f"{env.target}.{name}"), oracle_sql=oracle)
    upstream.refresh(expect="full")
    down.refresh(expect="full")
    down.check()
    for batch in SMOKE_BATCHES:  # dbt's DAG order: the upstream first
        env.apply(batch)
        upstream.refresh(expect="differential")
        upstream.check()
        down.refresh(expect="differential")
        down.check()
        # The sources both read are pinned where the upstream read them.
        shared = set(down.results[-1].source_versions) & set(upstream.results[-1].source_versions)
        assert all(down.results[-1].source_versions[r] == upstream.results[-1].source_versions[r] for r in shared)


def test_a_source_read_beside_an_upstream_is_pinned_at_the_upstream_version(env):
    env.source("t1", INITIAL["t1"])
    upstream = env.stream("up", "SELECT k, COUNT(*) AS n FROM {src}.t1 GROUP BY k")
    upstream.refresh(expect="full")
    down = env.stream("down", f"SELECT u.k, u.n, t.id FROM {env.target}.up u JOIN {{src}}.t1 t ON u.k = t.k")
    down.refresh(expect="full")
    env.apply([S.InsertDuplicates("t1", [0, 1])])  # the upstream has not seen this yet
    result = down.refresh()
    assert result.source_versions[f"{env.src}.t1"] == upstream.results[-1].source_versions[f"{env.src}.t1"]


def test_a_stream_table_over_a_top_k_stream_table_refreshes_in_full_and_says_why(env):
    env.source("t1", INITIAL["t1"])
    upstream = env.stream("up", "SELECT k, COUNT(*) AS n FROM {src}.t1 GROUP BY k ORDER BY n DESC, k LIMIT 2")
    upstream.refresh(expect="full")
    down = env.stream(
        "down",
        f"SELECT k, n FROM {env.target}.up WHERE n > 1",
        oracle_sql="""
        SELECT k, n FROM (SELECT k, COUNT(*) AS n FROM {src}.t1 GROUP BY k ORDER BY n DESC, k LIMIT 2) up
        WHERE n > 1""",
    )
    result = down.refresh(expect="full")
    assert "Top-K" in result.reason
    down.check()
    env.apply([S.InsertDuplicates("t1", [0, 1, 2])])
    upstream.refresh(expect="differential")
    down.refresh(expect="full")
    down.check()
    with pytest.raises(UnsupportedSql) as err:
        down.refresh(refresh_mode="differential")
    assert f"{env.target}.up" in str(err.value) and "down" in str(err.value)


def test_a_bag_upstream_is_joined_by_its_counts_not_its_repeated_rows(env):
    """An upstream bag stores each distinct row once with its count. A change joined to it
    multiplies by the count: the refresh reads 2 upstream rows here, not 300,000."""
    import time

    from python_helpers.dvm.operators import scan
    from python_helpers.dvm.sqlgen import render
    from python_helpers.runtime.refresh.attempt import DIGEST_PREFIX

    env.source("t1", [S.row(i, k=i % 2, v=1) for i in range(300_000)])
    env.source("t2", [S.row(i, k=i % 2, g="ab"[i % 2]) for i in range(4)])
    upstream = env.stream("many_k", "SELECT k FROM {src}.t1")
    upstream.refresh(expect="full")
    down_sql = f"SELECT b.g, COUNT(*) AS n FROM {env.target}.many_k u JOIN {{src}}.t2 b ON u.k = b.k GROUP BY b.g"
    oracle = "SELECT b.g, COUNT(*) AS n FROM (SELECT k FROM {src}.t1) u JOIN {src}.t2 b ON u.k = b.k GROUP BY b.g"
    down = env.stream("by_g", down_sql, oracle_sql=oracle)
    down.refresh(expect="full")
    rendered = []
    real = scan.plain

    def no_expansion(node, ctx, version):
        # The plan's digest renders the full build over abstract relations, only to hash it.
        if not render(ctx.snapshot(node.relation, version)).startswith(DIGEST_PREFIX):
            rendered.append(node.relation)
        return real(node, ctx, version)

    import python_helpers.dvm.operators.scan as scan_module

    scan_module.plain = no_expansion
    try:
        env.apply([S.Insert("t2", [S.row(10, k=1, g="c")]), S.DeleteRows("t2", [0])])
        started = time.perf_counter()
        down.refresh(expect="differential")
        elapsed = time.perf_counter() - started
    finally:
        scan_module.plain = real
    assert not [r for r in rendered if "many_k" in r], rendered  # the upstream was never expanded
    down.check()
    print(f"differential refresh joining a 300,000-row bag upstream: {elapsed:.2f}s")
