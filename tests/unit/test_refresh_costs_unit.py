"""Unit tests (no Spark) of the refresh-cost levers: change consolidation in Arrow, the
published link directory of a stream table, and the delta-first join order."""
import os

import pyarrow as pa
import sqlglot
from sqlglot import exp

from python_helpers.dvm.differentiate import delta
from python_helpers.dvm.sqlgen import Context, render
from python_helpers.runtime import published_files
from python_helpers.runtime.delta_tables import consolidate_arrow
from tests.unit.test_dvm_tree_and_sql import tree_of


# -- consolidation of change rows ------------------------------------------------------------
def test_consolidate_arrow_cancels_update_pairs_and_sums_duplicates():
    data = pa.table({"k": [1, 1, 2, 2, 3, None, None], "v": ["a", "a", "b", "b", "c", None, None],
                     "__dvm_w": [-1, 1, 1, 1, -1, 1, 1]})
    out = consolidate_arrow(data)
    rows = sorted(out.to_pylist(), key=repr)
    assert rows == sorted([{"k": 2, "v": "b", "__dvm_w": 2}, {"k": 3, "v": "c", "__dvm_w": -1},
                           {"k": None, "v": None, "__dvm_w": 2}], key=repr)
    assert out.schema == data.schema


def test_consolidate_arrow_keeps_distinct_values_apart():
    # Under-consolidation is allowed, merging two different values never is.
    data = pa.table({"x": [0.1, 0.10000000000000002, 0.30000000000000004, 0.3], "__dvm_w": [1, -1, 1, -1]})
    out = consolidate_arrow(data)
    assert sorted(out.to_pylist(), key=repr) == sorted(data.to_pylist(), key=repr)


def test_consolidate_arrow_gives_up_on_nested_keys():
    data = pa.table({"a": pa.array([[1], [1]], pa.list_(pa.int64())), "__dvm_w": [1, -1]})
    assert consolidate_arrow(data) is None


# -- the published link directory --------------------------------------------------------------
def _files(tmp_path, names):
    out = []
    for n in names:
        p = tmp_path / "table" / n
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(n)
        out.append(str(p))
    return out


def test_publish_links_exactly_the_live_files_and_swaps_current(tmp_path):
    target = str(tmp_path / "table")
    a, b, c = _files(tmp_path, ["a.parquet", "b.parquet", "c.parquet"])
    current = published_files.publish(target, "id1", 3, [a, b])
    assert sorted(os.listdir(current)) == ["a.parquet", "b.parquet"]
    assert published_files.publish(target, "id1", 4, [b, c]) == current
    assert sorted(os.listdir(current)) == ["b.parquet", "c.parquet"]
    assert os.path.samefile(os.path.join(current, "c.parquet"), c)  # a hard link, no copy


def test_publish_never_moves_back_to_an_older_version(tmp_path):
    target = str(tmp_path / "table")
    a, b = _files(tmp_path, ["a.parquet", "b.parquet"])
    current = published_files.publish(target, "id1", 5, [a, b])
    assert published_files.publish(target, "id1", 4, [a]) is None  # a slower, older refresh
    assert sorted(os.listdir(current)) == ["a.parquet", "b.parquet"]


def test_publish_starts_over_for_a_recreated_table_and_prunes_generations(tmp_path):
    target = str(tmp_path / "table")
    (a,) = _files(tmp_path, ["a.parquet"])
    for v in range(1, 7):
        published_files.publish(target, "old", v, [a])
    root = published_files.published_root(target)
    assert len([n for n in os.listdir(root) if n.startswith("g")]) == published_files.KEEP_GENERATIONS
    current = published_files.publish(target, "new", 0, [a])  # versions restart with a new table
    assert current is not None and os.readlink(current) == "g0"


def test_publish_declines_remote_or_empty_file_lists(tmp_path):
    assert published_files.publish(str(tmp_path / "t"), "id", 1, []) is None
    assert published_files.publish("s3://bucket/t", "id", 1, ["s3://bucket/t/a.parquet"]) is None


# -- delta-first join order ----------------------------------------------------------------------
def test_join_delta_starts_from_the_changed_input_and_joins_outward():
    tree = tree_of("SELECT c.region, o.amount FROM shop.customers c, shop.orders o WHERE c.id = o.customer_id "
                   "AND o.status = 'open'")
    ctx = Context(changes=lambda r: exp.to_table(f"chg_{r.replace('.', '_')}"),
                  snapshot=lambda r, v: exp.to_table(f"{v}_{r.replace('.', '_')}"),
                  changed={"shop.orders"}, small_delta=True)
    sql = render(delta(tree, ctx))
    parsed = sqlglot.parse_one(sql, read="spark")
    joins = list(parsed.find_all(exp.Join))
    assert len(joins) == 1
    # The delta of orders is the FROM side; customers (before orders: new version) is joined to it,
    # on the equi condition, with the delta side broadcast.
    assert joins[0].find(exp.Table).name == "new_shop_customers"
    assert "c__id" in joins[0].args["on"].sql() or "customers__id" in joins[0].args["on"].sql()
    assert "BROADCAST" in sql
    assert "old_shop_orders" not in sql and "new_shop_orders" not in sql
    # The single-input conjunct filters the delta before any join.
    first_from = parsed.find(exp.From)
    assert "open" in first_from.sql()
