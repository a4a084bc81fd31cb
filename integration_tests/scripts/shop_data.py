"""Source data of the integration tests: Delta tables shop.orders and shop.customers.

    python shop_data.py create [--force] [--customers N] [--orders N]
                                           deterministic tables (60 customers, 300 orders unless
                                           told), change data feed on
    python shop_data.py mutate --seed N    a batch of inserts, updates and deletes

Tables live at <work dir>/warehouse/shop.db/<table>, the managed-table path Spark uses for
`shop.<table>` with the warehouse the integration profile pins; the work dir is
$DBT_SPARK_STREAM_WORK_DIR (default /tmp/dbt-spark-stream), as in profiles.yml.

Only the deltalake package is used (no Spark): sources are written the way an outside
producer would, and each operation is its own Delta commit, so a refresh reads several
versions of change data at once.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import sys
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

DEFAULT_WORK_DIR = "/tmp/dbt-spark-stream"

REGIONS = ["north", "south", "east", "west"]
TIERS = ["gold", "silver", "bronze"]
STATUSES = ["placed", "shipped", "delivered", "cancelled", "returned"]
START = dt.date(2024, 1, 1)
# Files of about this size, as a table written over time has several: Spark reads them in
# parallel, and an update rewrites the files it touches rather than the whole table (deltalake
# rewrites whole files). The table property keeps deltalake's updates and deletes at that size
# too (without it they write the rows of every file they touch into one file). The tests'
# tables (a few hundred rows) stay one file.
FILE_BYTES = 4 * 1024 * 1024
TABLE_PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.targetFileSize": str(FILE_BYTES)}

CUSTOMERS_SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.int32(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("region", pa.string()),
        pa.field("tier", pa.string()),
        pa.field("signup_date", pa.date32()),
    ]
)
ORDERS_SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("customer_id", pa.int32()),
        pa.field("order_date", pa.date32()),
        pa.field("status", pa.string()),
        pa.field("amount", pa.decimal128(10, 2)),
        pa.field("quantity", pa.int32()),
        pa.field("discount", pa.float64()),
    ]
)


def work_dir() -> Path:
    return Path(os.environ.get("DBT_SPARK_STREAM_WORK_DIR") or DEFAULT_WORK_DIR).resolve()


def table_path(name: str) -> str:
    return str(work_dir() / "warehouse" / "shop.db" / name)


def _maybe(rng: random.Random, value, null_share: float):
    return None if rng.random() < null_share else value


def _customer(rng: random.Random, customer_id: int) -> dict:
    return {
        "customer_id": customer_id,
        "name": f"customer {customer_id:03d}",
        "region": _maybe(rng, rng.choice(REGIONS), 0.1),
        "tier": _maybe(rng, rng.choice(TIERS), 0.2),
        "signup_date": START + dt.timedelta(days=rng.randrange(0, 365)),
    }


def _order(rng: random.Random, order_id: int, max_customer: int) -> dict:
    # Some orders point at no customer (NULL) or at a customer that does not exist (yet):
    # inner joins must drop them, and they come alive when such a customer is inserted.
    customer = rng.randint(1, max_customer + 3)
    return {
        "order_id": order_id,
        "customer_id": _maybe(rng, customer, 0.05),
        "order_date": START + dt.timedelta(days=rng.randrange(0, 500)),
        "status": rng.choice(STATUSES),
        "amount": _maybe(rng, Decimal(rng.randrange(100, 25000)) / 100, 0.08),
        "quantity": rng.randint(1, 6),
        "discount": _maybe(rng, rng.choice([0.05, 0.1, 0.15, 0.25]), 0.6),
    }


def create(force: bool, customers: int = 60, orders: int = 300) -> None:
    rng = random.Random(20240101)
    for name in ("customers", "orders"):
        path = Path(table_path(name))
        if path.exists():
            if not force:
                sys.exit(f"{path} exists; use `create --force` to replace it")
            shutil.rmtree(path)
    customer_rows = [_customer(rng, i) for i in range(1, customers + 1)]
    order_rows = [_order(rng, i, customers) for i in range(1, orders + 1)]
    for name, rows, schema in (("customers", customer_rows, CUSTOMERS_SCHEMA), ("orders", order_rows, ORDERS_SCHEMA)):
        table = pa.Table.from_pylist(rows, schema)
        write_deltalake(table_path(name), table, configuration=TABLE_PROPERTIES, target_file_size=FILE_BYTES)
    print(f"created shop.customers ({customers:,} rows) and shop.orders ({orders:,} rows) under {work_dir()}")


def _ids(table: DeltaTable, column: str) -> list:
    return sorted(v for v in table.to_pyarrow_table(columns=[column]).column(column).to_pylist() if v is not None)


def _values(table: DeltaTable, key: str, keys: list, column: str) -> set:
    """The values `column` holds in the rows whose `key` is in `keys`. An update sets a value none
    of its rows holds: an update that changes nothing is committed by deltalake without change
    data, and the change data feed then names every row of the files it rewrote."""
    rows = table.to_pyarrow_table(columns=[key, column], filters=[(key, "in", list(keys))])
    return set(rows.column(column).to_pylist())


def _with_value(table: DeltaTable, key: str, column: str) -> list:
    """Keys of the rows whose `column` is not NULL (an update to NULL must change something)."""
    rows = table.to_pyarrow_table(columns=[key, column])
    return sorted(k for k, v in zip(rows.column(key).to_pylist(), rows.column(column).to_pylist()) if v is not None)


def _in_list(values) -> str:
    return "(" + ", ".join(str(v) for v in values) + ")"


def mutate(seed: int) -> None:
    """One batch of changes; the same seed on the same tables gives the same changes."""
    rng = random.Random(seed)
    customers = DeltaTable(table_path("customers"))
    orders = DeltaTable(table_path("orders"))
    customer_ids = _ids(customers, "customer_id")
    order_ids = _ids(orders, "order_id")
    max_customer = customer_ids[-1]
    steps = []

    # New customers, one of them with the id some orders already point at.
    new_customers = [_customer(rng, max_customer + i) for i in (1, 2)]
    write_deltalake(customers, pa.Table.from_pylist(new_customers, CUSTOMERS_SCHEMA), mode="append")
    steps.append(f"inserted customers {[c['customer_id'] for c in new_customers]}")

    # New orders.
    first = order_ids[-1] + 1
    new_orders = [_order(rng, first + i, max_customer + 2) for i in range(rng.randint(10, 25))]
    write_deltalake(orders, pa.Table.from_pylist(new_orders, ORDERS_SCHEMA), mode="append")
    steps.append(f"inserted {len(new_orders)} orders")

    # Updates of measures, of a filter column, of the group/join key, and to NULL.
    picked = rng.sample(order_ids, 12)
    orders.update(
        updates={"amount": "amount + CAST(7.25 AS DECIMAL(10,2))"}, predicate=f"order_id IN {_in_list(picked[:4])}"
    )
    held = _values(orders, "order_id", picked[4:7], "status")
    status = rng.choice([s for s in STATUSES if s not in held])
    orders.update(updates={"status": f"'{status}'"}, predicate=f"order_id IN {_in_list(picked[4:7])}")
    orders.update(
        updates={"customer_id": f"CAST({rng.choice(customer_ids)} AS INT)"},
        predicate=f"order_id IN {_in_list(picked[7:10])}",
    )
    orders.update(updates={"amount": "NULL", "discount": "0.5"}, predicate=f"order_id = {picked[10]}")
    orders.update(updates={"quantity": "quantity + 1"}, predicate=f"order_id = {picked[11]}")  # unread by most models
    steps.append(f"updated orders {picked}")
    moved = rng.sample(customer_ids, 2)
    moved.append(rng.choice([c for c in _with_value(customers, "customer_id", "region") if c not in moved]))
    region = rng.choice([r for r in REGIONS if r not in _values(customers, "customer_id", moved[:2], "region")])
    customers.update(updates={"region": f"'{region}'"}, predicate=f"customer_id IN {_in_list(moved[:2])}")
    customers.update(updates={"region": "NULL"}, predicate=f"customer_id = {moved[2]}")
    steps.append(f"updated customers {moved}")

    # Deletes, including a customer that still has orders.
    gone = rng.sample([i for i in order_ids if i not in picked], 8)
    orders.delete(predicate=f"order_id IN {_in_list(gone)}")
    gone_customer = rng.choice([c for c in customer_ids if c not in moved])
    customers.delete(predicate=f"customer_id = {gone_customer}")
    steps.append(f"deleted orders {gone} and customer {gone_customer}")

    print(f"mutate --seed {seed}: " + "; ".join(steps))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    create_cmd = sub.add_parser("create", help="create the source tables")
    create_cmd.add_argument("--force", action="store_true", help="replace tables that exist")
    create_cmd.add_argument("--customers", type=int, default=60, help="customers (default 60)")
    create_cmd.add_argument("--orders", type=int, default=300, help="orders (default 300)")
    mutate_cmd = sub.add_parser("mutate", help="apply one batch of changes")
    mutate_cmd.add_argument("--seed", type=int, required=True)
    args = parser.parse_args(argv)
    if args.command == "create":
        create(args.force, args.customers, args.orders)
    else:
        mutate(args.seed)


if __name__ == "__main__":
    main()
