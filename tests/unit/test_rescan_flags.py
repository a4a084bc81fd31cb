"""An aggregate's rescan flags counted while its groups are computed (BoundViews.materialize,
sqlgen.flag_never_set): the flagged groups are asked for only when the count did not say none,
and the mark holds only on the served relation itself. Without Spark: a connection that answers
what a computation would have told, and the MERGE rows rendered over abstract relations."""

from __future__ import annotations

import pytest
from sqlglot import exp

from python_helpers.dvm import sqlgen
from python_helpers.dvm.plan_query import query_tree
from python_helpers.dvm.sqlgen import Context, render
from python_helpers.dvm.stored_result import plan_stored_result
from python_helpers.runtime.connections.base import NOT_TOLD, Computed
from python_helpers.runtime.delta.bound_views import BoundViews
from python_helpers.sql.parse import parse_query


class _Told:
    """A connection whose materializations answer `computed`, recording what they were asked."""

    def __init__(self, computed: Computed):
        self.computed = computed
        self.flags: list = []
        self.asked: list = []

    def view_of_query(self, name, sql, one_partition=False, materialize=False, flag=None):
        self.flags.append(flag)
        return self.computed

    def rows(self, sql):
        self.asked.append(sql)
        return [(1,)]

    def drop_view(self, name):
        pass


def _served(computed: Computed, flag: str | None = "__dvm_rescan"):
    conn = _Told(computed)
    views = BoundViews(conn, {}, {}, {})
    query = exp.select("a", "__dvm_rescan").from_("t")
    if flag is not None:
        sqlgen.counting_flag(query, flag)
    return views.materialize(query), conn


@pytest.mark.parametrize(
    ("computed", "marked"),
    [
        (Computed(holds_rows=True, flagged=False), True),
        (Computed(holds_rows=True, flagged=True), False),
        (Computed(holds_rows=True, flagged=None), False),  # the count came too late: ask
        (NOT_TOLD, False),
        (Computed(holds_rows=False, flagged=False), False),  # empty: WHERE FALSE says more
    ],
)
def test_only_a_count_of_no_flag_in_rows_held_marks_the_served_relation(computed, marked):
    served, conn = _served(computed)
    assert conn.flags == ["__dvm_rescan"]
    assert sqlgen.is_flag_never_set(served) is marked
    assert sqlgen.known_empty(served) is (computed.holds_rows is False)


def test_a_query_without_a_counted_flag_asks_for_none():
    served, conn = _served(Computed(holds_rows=True, flagged=False), flag=None)
    assert conn.flags == [None] and not sqlgen.is_flag_never_set(served)


def test_the_mark_holds_on_the_served_relation_and_its_copies_alone():
    served = sqlgen.flag_never_set(exp.select("*").from_("m3"))
    assert sqlgen.is_flag_never_set(served) and sqlgen.is_flag_never_set(served.copy())
    derived = [
        served.where("a > 1"),
        served.join("t", on="TRUE"),
        served.select("a", append=False),
        served.group_by("a"),
        served.limit(1),
        exp.select("*").from_(served.subquery("q")),
    ]
    assert not [render(d) for d in derived if sqlgen.is_flag_never_set(d)]


SCHEMAS = {"src.t1": {"id": "bigint", "k": "int", "v": "int"}}


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT MIN(v) AS lo, MAX(v) AS hi, COUNT(*) AS n FROM src.t1",
        "SELECT k, MIN(v) AS lo, MAX(v) AS hi, COUNT(*) AS n FROM src.t1 GROUP BY k",
    ],
    ids=["global", "grouped"],
)
@pytest.mark.parametrize("never_set", [True, False], ids=["none_flagged", "not_known"])
def test_the_rescan_is_left_out_only_when_no_group_was_flagged(sql, never_set):
    tree, top_k = query_tree("flags", parse_query("flags", sql), SCHEMAS)
    result = plan_stored_result("flags", tree, [f"c{i}" for i in range(len(tree.columns))], top_k)
    result.arg_types = {name: "int" for name, _ in result.typed_args()}
    computed: list = []

    def materialize(query):
        computed.append(query)
        served = exp.select("*").from_(f"mat_{len(computed)}")
        if never_set and sqlgen.counted_flag(query):
            sqlgen.flag_never_set(served)
        return served

    ctx = Context(
        changes=lambda r: exp.to_table("chg_t1"),
        snapshot=lambda r, v: exp.to_table(f"{v}_t1"),
        changed={"src.t1"},
        materialize=materialize,
        small_delta=True,
    )
    merge = result.merge_sql(ctx, exp.to_table("stored"), {c: "string" for c in result.storage_columns()})
    assert merge is not None
    # The groups' state is computed first and counts its flag.
    assert sqlgen.counted_flag(computed[0]) == "__dvm_rescan"
    text = render(merge)
    if never_set:
        # Neither the flagged groups asked for nor the input's new rows read.
        assert len(computed) == 1 and "new_t1" not in text, (text, [render(q) for q in computed])
    else:
        # Asked for (served here as holding rows): the rescan reads the new rows.
        assert len(computed) == 2 and "WHERE __dvm_rescan" in render(computed[1]) and "new_t1" in text
