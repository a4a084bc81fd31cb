"""TPC-H data as Delta sources, and the refresh functions the cycles apply (deltalake writes,
so every change reaches the stream tables through the change data feed).

RF1  insert new orders with their lineitems (copies of existing orders under new keys; one new
     order gets quantities that put it over Q18's threshold);
RF2  delete orders with their lineitems, including every order of one customer (Q13's count
     falls to 0, Q22's NOT EXISTS turns true);
RF3  updates across the tables, join keys included: lineitem supplier and dates, order
     customer / status / priority, customer nation / segment / phone / balance, part brand /
     container / size / name, partsupp cost, supplier comment / nation, a nation's region.
"""

from __future__ import annotations

import decimal
import math
import os
import random

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from python_helpers.testing.tpch_data import CDF_ON, TABLES, generate


def load_sources(scale: float, source_path) -> dict:
    """dbgen at `scale`, each table written as a Delta table at source_path(table)."""
    paths = {}
    for name, table in generate(scale).items():
        path = source_path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_deltalake(path, table, mode="overwrite", configuration=CDF_ON)
        paths[name] = path
    return paths


def _in(column: str, values) -> str:
    values = sorted(set(values))
    return f"{column} IN ({', '.join(str(v) for v in values)})" if values else "FALSE"


class RefreshFunctions:
    def __init__(self, paths: dict, seed: int = 11, orders_per_batch: int = 12):
        self.paths = paths
        self.rng = random.Random(seed)
        self.n = orders_per_batch

    def _table(self, name: str) -> DeltaTable:
        return DeltaTable(self.paths[name])

    def _keys(self, name: str, column: str) -> list:
        return self._table(name).to_pyarrow_table(columns=[column]).column(column).to_pylist()

    def _sample(self, values: list, k: int) -> list:
        return self.rng.sample(values, min(k, len(values)))

    def rf1(self) -> str:
        orders = self._table("orders").to_pyarrow_table()
        keys = orders.column("o_orderkey").to_pylist()
        templates = self._sample(keys, self.n)
        next_key = max(keys) + 1
        mapping = {t: next_key + i for i, t in enumerate(templates)}
        new_orders = orders.filter(pc.is_in(orders.column("o_orderkey"), pa.array(templates, pa.int64())))
        new_orders = new_orders.set_column(
            new_orders.schema.get_field_index("o_orderkey"),
            "o_orderkey",
            pa.array([mapping[k] for k in new_orders.column("o_orderkey").to_pylist()], pa.int64()),
        )
        lines = self._table("lineitem").to_pyarrow_table(filters=[("l_orderkey", "in", templates)])
        new_keys = [mapping[k] for k in lines.column("l_orderkey").to_pylist()]
        big = mapping[templates[0]]
        per_line = math.ceil(301 / max(1, new_keys.count(big)))
        qty = [
            decimal.Decimal(per_line) if k == big else q
            for k, q in zip(new_keys, lines.column("l_quantity").to_pylist())
        ]
        lines = lines.set_column(
            lines.schema.get_field_index("l_orderkey"), "l_orderkey", pa.array(new_keys, pa.int64())
        )
        lines = lines.set_column(
            lines.schema.get_field_index("l_quantity"),
            "l_quantity",
            pa.array(qty, lines.schema.field("l_quantity").type),
        )
        write_deltalake(self.paths["orders"], new_orders, mode="append")
        write_deltalake(self.paths["lineitem"], lines, mode="append")
        return f"RF1: +{new_orders.num_rows} orders, +{lines.num_rows} lineitems"

    def rf2(self) -> str:
        orders = self._table("orders").to_pyarrow_table(columns=["o_orderkey", "o_custkey"])
        keys = orders.column("o_orderkey").to_pylist()
        gone = set(self._sample(keys, self.n))
        customer = self.rng.choice(orders.column("o_custkey").to_pylist())
        gone |= {k for k, c in zip(keys, orders.column("o_custkey").to_pylist()) if c == customer}
        self._table("lineitem").delete(_in("l_orderkey", gone))
        self._table("orders").delete(_in("o_orderkey", gone))
        return f"RF2: -{len(gone)} orders with their lineitems (all of customer {customer})"

    def rf3(self) -> str:
        rng, n = self.rng, self.n
        n_supp = len(self._keys("supplier", "s_suppkey"))
        n_cust = len(self._keys("customer", "c_custkey"))
        some_orders = self._sample(self._keys("orders", "o_orderkey"), n)
        self._table("lineitem").update(
            predicate=_in("l_orderkey", some_orders[: n // 2]),
            updates={
                "l_quantity": "l_quantity + 1",
                "l_suppkey": f"((l_suppkey + 7) % {n_supp}) + 1",
                "l_receiptdate": "l_commitdate + INTERVAL '3 days'",
            },
        )
        self._table("lineitem").update(
            predicate=_in("l_orderkey", some_orders[n // 2 :]),
            updates={
                "l_commitdate": "l_receiptdate + INTERVAL '2 days'",
                "l_discount": "CASE WHEN l_discount >= 0.05 THEN l_discount - 0.01 ELSE l_discount + 0.01 END",
                "l_returnflag": "'R'",
            },
        )
        self._table("orders").update(
            predicate=_in("o_orderkey", self._sample(some_orders, max(1, n // 3))),
            updates={
                "o_custkey": f"((o_custkey + {rng.randint(1, 50)}) % {n_cust}) + 1",
                "o_orderstatus": "CASE WHEN o_orderstatus = 'F' THEN 'O' ELSE 'F' END",
                "o_orderpriority": "'1-URGENT'",
            },
        )
        customers = self._sample(self._keys("customer", "c_custkey"), n)
        self._table("customer").update(
            predicate=_in("c_custkey", customers),
            updates={
                "c_acctbal": "c_acctbal + 1000",
                "c_nationkey": f"(c_nationkey + {rng.randint(1, 24)}) % 25",
                "c_mktsegment": "'BUILDING'",
                "c_phone": "concat('13', substring(c_phone, 3))",
            },
        )
        parts = self._sample(self._keys("part", "p_partkey"), n)
        self._table("part").update(
            predicate=_in("p_partkey", parts),
            updates={
                "p_brand": "'Brand#23'",
                "p_container": "'MED BOX'",
                "p_size": "15",
                "p_name": "concat('forest ', p_name)",
                "p_type": "'ECONOMY ANODIZED STEEL'",
            },
        )
        self._table("partsupp").update(
            predicate=_in("ps_partkey", parts[: n // 2]),
            updates={
                "ps_supplycost": "ps_supplycost * 0.5",
                "ps_availqty": "ps_availqty + 100",
            },
        )
        suppliers = self._sample(self._keys("supplier", "s_suppkey"), max(2, n // 4))
        self._table("supplier").update(
            predicate=_in("s_suppkey", suppliers),
            updates={
                "s_comment": "'Customer Complaints here'",
                "s_nationkey": f"(s_nationkey + {rng.randint(1, 24)}) % 25",
                "s_acctbal": "s_acctbal + 10",
            },
        )
        nation = rng.randrange(25)
        self._table("nation").update(
            predicate=f"n_nationkey = {nation}", updates={"n_regionkey": "(n_regionkey + 1) % 5"}
        )
        return (
            f"RF3: updated lineitems of {len(some_orders)} orders, orders, {len(customers)} customers, "
            f"{len(parts)} parts, partsupp, {len(suppliers)} suppliers, nation {nation}"
        )

    def functions(self):
        return [("RF1", self.rf1), ("RF2", self.rf2), ("RF3", self.rf3)]


__all__ = ["TABLES", "RefreshFunctions", "load_sources"]
