"""Unit tests (no Spark) of the refresh-cost levers: change consolidation in Arrow, the
published link directory of a stream table, and the delta-first join order."""

import os

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from python_helpers.dvm.differentiate import delta
from python_helpers.dvm.sqlgen import Context, keyed_rows, render
from python_helpers.runtime.delta.embedded import generations as published_files
from python_helpers.runtime.delta.embedded.tables import consolidate_arrow
from tests.unit.test_dvm_tree_and_sql import tree_of


# -- consolidation of change rows ------------------------------------------------------------
def test_consolidate_arrow_cancels_update_pairs_and_sums_duplicates():
    data = pa.table(
        {
            "k": [1, 1, 2, 2, 3, None, None],
            "v": ["a", "a", "b", "b", "c", None, None],
            "__dvm_w": [-1, 1, 1, 1, -1, 1, 1],
        }
    )
    out = consolidate_arrow(data)
    rows = sorted(out.to_pylist(), key=repr)
    assert rows == sorted(
        [{"k": 2, "v": "b", "__dvm_w": 2}, {"k": 3, "v": "c", "__dvm_w": -1}, {"k": None, "v": None, "__dvm_w": 2}],
        key=repr,
    )
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


def test_generation_links_exactly_the_live_files_and_never_changes(tmp_path):
    root = str(tmp_path / "pub")
    a, b, c = _files(tmp_path, ["a.parquet", "b.parquet", "c.parquet"])
    g3 = published_files.link_generation(root, "t", 3, [a, b])
    assert sorted(n.split("-", 1)[1] for n in os.listdir(g3)) == ["a.parquet", "b.parquet"]
    g4 = published_files.link_generation(root, "t", 4, [b, c])
    assert g4 != g3 and sorted(n.split("-", 1)[1] for n in os.listdir(g4)) == ["b.parquet", "c.parquet"]
    # A reader that listed g3 keeps finding its files: the directory is never altered.
    assert sorted(n.split("-", 1)[1] for n in os.listdir(g3)) == ["a.parquet", "b.parquet"]
    assert published_files.link_generation(root, "t", 3, [a, b]) == g3  # made once
    linked = [n for n in os.listdir(g4) if n.endswith("c.parquet")][0]
    assert os.path.samefile(os.path.join(g4, linked), c)  # a hard link, no copy


def test_a_generation_is_reused_only_for_the_same_table_and_files(tmp_path):
    """A table recreated at its path (another id) or a version holding other files reaches the
    same version number: it gets a directory of its own, never the old table's files."""
    root = str(tmp_path / "pub")
    a, b = _files(tmp_path, ["a.parquet", "b.parquet"])
    old = published_files.link_generation(root, "old-table", 2, [a])
    recreated = published_files.link_generation(root, "new-table", 2, [b])
    assert recreated != old
    assert [n.split("-", 1)[1] for n in os.listdir(recreated)] == ["b.parquet"]
    assert published_files.link_generation(root, "old-table", 2, [b]) not in (old, recreated)
    assert os.path.basename(old).startswith("g2-") and published_files._generation(os.path.basename(old)) == 2
    assert published_files._generation("g17") == 17  # as earlier releases named them


def test_link_names_never_collide_or_hide(tmp_path):
    root = str(tmp_path / "pub")
    one = tmp_path / "table" / "p=1" / "part-0.parquet"
    two = tmp_path / "table" / "p=2" / "part-0.parquet"
    hidden = tmp_path / "table" / "_odd.parquet"
    for f in (one, two, hidden):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(str(f))
    gen = published_files.link_generation(root, "t", 1, [str(one), str(two), str(hidden)])
    names = os.listdir(gen)
    assert len(names) == 3 and not any(n.startswith(("_", ".")) for n in names)


def test_prune_keeps_recent_and_marked_generations_and_removes_leftovers(tmp_path):
    root = str(tmp_path / "pub")
    (a,) = _files(tmp_path, ["a.parquet"])
    gens = {v: os.path.basename(published_files.link_generation(root, "t", v, [a])) for v in range(1, 8)}
    published_files.write_marker(root, {"table_id": "t", "version": 2, "generation": gens[2]})
    os.makedirs(os.path.join(root, ".staging-dead"))
    # Within the retention nothing goes, however many generations there are.
    assert published_files.prune(root, retention_seconds=3600) == []
    later = __import__("time").time() + 7200
    removed = published_files.prune(root, retention_seconds=3600, now=later)
    left = sorted(n for n in os.listdir(root) if n.startswith("g"))
    assert left == sorted(gens[v] for v in (2, 5, 6, 7))  # the newest three, and the one the marker names
    assert ".staging-dead" in removed and not os.path.exists(os.path.join(root, ".staging-dead"))


def test_marker_is_replaced_whole(tmp_path):
    root = str(tmp_path / "pub")
    assert published_files.read_marker(root) is None
    published_files.write_marker(root, {"version": 1})
    published_files.write_marker(root, {"version": 2})
    assert published_files.read_marker(root) == {"version": 2}
    assert [n for n in os.listdir(root) if n.startswith(".tmp-")] == []


def test_generations_decline_remote_storage(tmp_path):
    assert published_files.link_generation("s3://bucket/pub", "t", 1, ["s3://bucket/t/a.parquet"]) is None


# -- delta-first join order ----------------------------------------------------------------------
def test_join_delta_starts_from_the_changed_input_and_joins_outward():
    tree = tree_of(
        "SELECT c.region, o.amount FROM shop.customers c, shop.orders o WHERE c.id = o.customer_id "
        "AND o.status = 'open'"
    )
    ctx = Context(
        changes=lambda r: exp.to_table(f"chg_{r.replace('.', '_')}"),
        snapshot=lambda r, v: exp.to_table(f"{v}_{r.replace('.', '_')}"),
        changed={"shop.orders"},
        small_delta=True,
    )
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


@pytest.mark.parametrize(("small", "large_right"), [(True, True), (False, True), (True, False)])
def test_a_semi_join_delta_reads_a_large_right_side_for_a_small_change_s_keys_only(small, large_right):
    # Spark hashes only a semi join's right side: without the narrowing it shuffles all of
    # items to meet a few changed orders.
    tree = tree_of("SELECT o.id FROM shop.orders o WHERE EXISTS (SELECT 1 FROM shop.items i WHERE i.order_id = o.id)")
    ctx = Context(
        changes=lambda r: exp.to_table(f"chg_{r.replace('.', '_')}"),
        snapshot=lambda r, v: exp.to_table(f"{v}_{r.replace('.', '_')}"),
        changed={"shop.orders"},
        small_delta=small,
        large_source=lambda relation: large_right,
    )
    narrowed = small and large_right
    parsed = sqlglot.parse_one(render(delta(tree, ctx)), read="spark")
    semis = [j for j in parsed.find_all(exp.Join) if j.args.get("kind") == "SEMI"]
    # The operator's own semi join, and with a small change one more: items by the changed keys.
    narrowing = [j for j in semis if "__dvm_rk0" in j.args["on"].sql()]
    assert len(semis) == (2 if narrowed else 1)
    assert len(narrowing) == (1 if narrowed else 0)
    for j in narrowing:
        assert "chg_shop_orders" in j.this.sql()
        assert "new_shop_items" in j.find_ancestor(exp.Select).sql()


def _keyed_context(changed: set, rows: bool = True, large: bool = True) -> Context:
    # The engine's keyed read, as a table naming what it narrows: `keyed_<relation>_by_<changed>`;
    # `rows`: it keeps only the rows holding a key (a key list), not only the files that can.
    def keyed(r, v, c, cr, cc):
        read = exp.to_table(f"keyed_{r.split('.')[1]}_{c}_by_{cr.split('.')[1]}_{cc}")
        return keyed_rows(read) if rows else read

    return Context(
        changes=lambda r: exp.to_table(f"chg_{r.replace('.', '_')}"),
        snapshot=lambda r, v: exp.to_table(f"{v}_{r.replace('.', '_')}"),
        changed=changed,
        small_delta=True,
        keyed_snapshot=keyed,
        large_source=lambda relation: large,
    )


def test_a_semi_join_delta_reads_the_right_side_by_the_change_s_keys_without_a_job():
    tree = tree_of("SELECT o.id FROM shop.orders o WHERE EXISTS (SELECT 1 FROM shop.items i WHERE i.order_id = o.id)")
    parsed = sqlglot.parse_one(render(delta(tree, _keyed_context({"shop.orders"}))), read="spark")
    tables = {t.name for t in parsed.find_all(exp.Table)}
    # items read only where it can hold the changed orders' ids; no broadcast semi join of keys.
    assert "keyed_items_order_id_by_orders_id" in tables
    assert "new_shop_items" not in tables
    assert [j for j in parsed.find_all(exp.Join) if j.args.get("kind") == "SEMI"] == [parsed.find(exp.Join)]


@pytest.mark.parametrize("large", [True, False])
def test_a_keyed_read_of_files_only_is_narrowed_by_the_keys_too_where_spark_would_not_broadcast_it(large):
    # A change of scattered keys leaves most of a large source's files to read: the broadcast
    # semi join with the keys then keeps Spark from shuffling them all.
    tree = tree_of("SELECT o.id FROM shop.orders o WHERE EXISTS (SELECT 1 FROM shop.items i WHERE i.order_id = o.id)")
    ctx = _keyed_context({"shop.orders"}, rows=False, large=large)
    parsed = sqlglot.parse_one(render(delta(tree, ctx)), read="spark")
    assert "keyed_items_order_id_by_orders_id" in {t.name for t in parsed.find_all(exp.Table)}
    narrowing = [
        j for j in parsed.find_all(exp.Join) if j.args.get("kind") == "SEMI" and "__dvm_rk0" in j.args["on"].sql()
    ]
    assert len(narrowing) == (1 if large else 0)
    for j in narrowing:
        assert "keyed_items_order_id_by_orders_id" in j.find_ancestor(exp.Select).sql()
        assert "chg_shop_orders" in j.this.sql()


@pytest.mark.parametrize("op", ["=", "<=>"])
def test_a_left_join_delta_reads_the_right_side_keyed_only_on_an_equality_that_drops_nulls(op):
    # A keyed read drops rows with a NULL key: `=` never matches them, `<=>` does.
    tree = tree_of(f"SELECT c.id, o.amount FROM shop.customers c LEFT JOIN shop.orders o ON o.customer_id {op} c.id")
    sql = render(delta(tree, _keyed_context({"shop.customers"})))
    tables = {t.name for t in sqlglot.parse_one(sql, read="spark").find_all(exp.Table)}
    if op == "=":
        assert "keyed_orders_customer_id_by_customers_id" in tables and "new_shop_orders" not in tables
    else:
        assert "new_shop_orders" in tables and not any(t.startswith("keyed_") for t in tables)


def test_a_source_is_large_by_the_session_s_broadcast_threshold_read_once():
    from python_helpers.runtime.delta.embedded import bindings as binding

    assert [binding.byte_size(v) for v in ("10485760b", "20MB", "1g", "-1", "512", "lots")] == [
        10 << 20,
        20 << 20,
        1 << 30,
        -1,
        512,
        None,
    ]

    class Session:  # the one call broadcast_bytes makes of the connection
        def __init__(self, value):
            self.value, self.asked = value, 0

        def setting(self, key):
            assert key == "spark.sql.autoBroadcastJoinThreshold"
            self.asked += 1
            return self.value

    for value, expected in (("20MB", 20 << 20), ("-1", -1), (None, binding.BROADCAST_BYTES), ("?", 10 << 20)):
        conn = Session(value)
        bound = binding.Bindings(conn, {}, {}, {})
        assert (bound.broadcast_bytes(), bound.broadcast_bytes(), conn.asked) == (expected, expected, 1)


# -- the key list of a key-restricted read ---------------------------------------------------
def test_key_filter_lists_distinct_non_null_integer_and_date_keys():
    import datetime

    from python_helpers.runtime.delta.embedded.change_keys import key_filter

    schema = pa.schema([("k", pa.int64()), ("d", pa.date32()), ("x", pa.float64()), ("s", pa.string())])
    assert render(key_filter("k", pa.array([3, -5, None, 3], pa.int32()), schema)) == "`k` IN (-5, 3)"
    dates = pa.array([datetime.date(2024, 2, 29), None])
    assert render(key_filter("d", dates, schema)) == "`d` IN (CAST('2024-02-29' AS DATE))"
    # Every key NULL: an equality matches no row.
    assert render(key_filter("k", pa.array([None], pa.int64()), schema)) == "FALSE"


def test_key_filter_declines_types_whose_equality_is_not_exact_and_long_lists(monkeypatch):
    from python_helpers.runtime.delta import bound_views
    from python_helpers.runtime.delta.embedded import change_keys

    schema = pa.schema([("k", pa.int64()), ("d", pa.date32()), ("x", pa.float64()), ("s", pa.string())])
    assert change_keys.key_filter("x", pa.array([1.0]), schema) is None  # -0.0 and NaN compare apart
    assert change_keys.key_filter("s", pa.array(["a"]), schema) is None  # collations
    assert change_keys.key_filter("k", pa.array(["1"]), schema) is None  # a string key against an integer
    assert change_keys.key_filter("missing", pa.array([1]), schema) is None
    monkeypatch.setattr(bound_views, "PAGE_FILTER_KEYS", 2)
    assert change_keys.key_filter("k", pa.array([1, 2, None, 2]), schema) is not None
    assert change_keys.key_filter("k", pa.array([1, 2, 3]), schema) is None


def test_a_keyed_read_goes_to_arrow_only_for_a_few_keys_over_most_files():
    from python_helpers.runtime.delta.embedded.change_keys import ARROW_KEYED_MAX_KEYS, read_with_arrow

    assert read_with_arrow(1, 3, 3) and read_with_arrow(ARROW_KEYED_MAX_KEYS, 6, 10)
    assert not read_with_arrow(ARROW_KEYED_MAX_KEYS + 1, 10, 10)  # many keys meet every row group
    assert not read_with_arrow(5, 5, 10)  # statistics ruled out half the files: Spark reads the rest
    assert not read_with_arrow(0, 10, 10)  # every key NULL: the join meets nothing


def test_a_publishing_lock_held_too_long_fails_with_the_lock_file_named(tmp_path):
    """A hung process holding a view's publishing lock: the waiter gives up with a message naming
    the file, instead of waiting forever (a dead holder's lock the OS releases at once)."""
    import fcntl

    from python_helpers.errors import PublishLockHeld
    from python_helpers.runtime.delta.embedded import publishing

    root = str(tmp_path / "pub")
    with publishing._process_lock(root, "m"):
        pass  # free: taken and released at once
    holder = open(os.path.join(root, publishing.LOCK_FILE), "a+")  # another open file: another holder
    fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
    try:
        with pytest.raises(PublishLockHeld, match=r"stream table 'm': another process has held .*\.publish\.lock"):
            with publishing._process_lock(root, "m", wait_seconds=0.3):
                raise AssertionError("the lock was taken while another holder had it")
    finally:
        holder.close()  # closing releases it
    with publishing._process_lock(root, "m", wait_seconds=0.3):
        pass


def test_the_stored_size_is_summed_from_the_commits_since_the_last_full_write():
    from python_helpers.runtime.delta.spark.sizes import size_from_history

    def commit(version, operation, mode=None, predicate=None, **metrics):
        return {
            "version": version,
            "operation": operation,
            "operationParameters": {
                **({"mode": mode} if mode else {}),
                **({"predicate": predicate} if predicate else {}),
            },
            "operationMetrics": {k: str(v) for k, v in metrics.items()},
        }

    full = commit(3, "CREATE OR REPLACE TABLE AS SELECT", numOutputBytes=10_000, numFiles=2)
    merge = commit(4, "MERGE", numTargetBytesAdded=700, numTargetBytesRemoved=200)
    vacuum = commit(5, "VACUUM END")
    append = commit(6, "WRITE", mode="Append", numOutputBytes=0)
    optimize = commit(7, "OPTIMIZE", numAddedBytes=9_000, numRemovedBytes=10_500)
    assert size_from_history([append, full, merge, vacuum, optimize]) == 10_000 + 500 - 1_500
    # A differential commit that replaced some rows by their row ids (replaceWhere).
    replaced = commit(8, "WRITE", mode="Overwrite", predicate="(__dvm_row_id IN ('a'))", numOutputBytes=300)
    assert size_from_history([full, replaced]) == 10_300
    replaced["operationMetrics"]["numRemovedBytes"] = "1000"
    assert size_from_history([full, replaced]) == 9_300
    # Nothing that says the whole size, an overwrite, an unknown operation, a missing metric: ask Spark.
    assert size_from_history([merge, vacuum]) is None
    assert size_from_history([full, commit(4, "WRITE", mode="Overwrite", numOutputBytes=5)]) is None
    assert size_from_history([full, commit(4, "RESTORE")]) is None
    assert size_from_history([full, commit(4, "MERGE", numTargetBytesAdded=1)]) is None
    assert size_from_history([]) is None


@pytest.mark.parametrize("op", ["=", "<=>"])
def test_an_anti_join_whose_inputs_both_changed_reads_each_new_input_by_both_changes_keys(op):
    # Both inputs' new rows of the changed keys are read once (old = new − Δ); the keys come
    # from both changes, so each input is read keyed by both. Not on `<=>`: a keyed read drops
    # NULL keys, which `<=>` matches.
    def keyed(r, v, c, cr, cc, more=()):
        names = "_and_".join(f"{rel.split('.')[1]}_{col}" for rel, col in ((cr, cc), *more))
        return keyed_rows(exp.to_table(f"keyed_{r.split('.')[1]}_{c}_by_{names}"))

    tree = tree_of(
        f"SELECT c.id FROM shop.customers c WHERE NOT EXISTS (SELECT 1 FROM shop.orders o WHERE o.customer_id {op} c.id)"
    )
    ctx = Context(
        changes=lambda r: exp.to_table(f"chg_{r.replace('.', '_')}"),
        snapshot=lambda r, v: exp.to_table(f"{v}_{r.replace('.', '_')}"),
        changed={"shop.customers", "shop.orders"},
        small_delta=True,
        materialize=lambda q: q,
        keyed_snapshot=keyed,
    )
    parsed = sqlglot.parse_one(render(delta(tree, ctx)), read="spark")
    # (The output of the change's NULL-key rows reads an empty right side: `WHERE FALSE`.)
    where_false = [
        s for s in parsed.find_all(exp.Select) if s.args.get("where") and s.args["where"].this == exp.false()
    ]
    empty = {id(t) for s in where_false for t in s.find_all(exp.Table)}
    tables = {t.name for t in parsed.find_all(exp.Table) if id(t) not in empty}
    both = {
        "keyed_customers_id_by_customers_id_and_orders_customer_id",
        "keyed_orders_customer_id_by_orders_customer_id_and_customers_id",
    }
    if op == "=":
        assert both <= tables and not {"new_shop_customers", "new_shop_orders"} & tables, tables
    else:
        assert not any(t.startswith("keyed_") for t in tables), tables
