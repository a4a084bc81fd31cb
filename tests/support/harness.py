"""A test's little world: fresh schemas, Delta sources, stream tables, refresh + oracle checks.

    env = StreamEnv(spark)                      # fresh source schema + stream-table schema
    env.source("t1", rows)                      # Delta table <warehouse>/<src>.db/t1, CDF on
    st = env.stream("agg", "SELECT k, count(*) AS n FROM {src}.t1 GROUP BY k")
    st.refresh(expect="full"); st.check()       # build, then compare with the recompute
    env.apply([Insert("t1", [...]), ...])       # one change batch
    st.refresh(expect="differential"); st.check()

SQL text uses `{src}` for the source schema. Names are unique per StreamEnv (tables persist
across tests and hypothesis examples in the one Spark session).
"""

from __future__ import annotations

import itertools
import os
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from python_helpers.runtime.api import RefreshRequest, refresh_stream_table
from tests.support import sources as S
from tests.support.oracle import SourceReads, assert_matches_recompute
from tests.support.spark_session import warehouse_dir

_counter = itertools.count(1)


def unique_suffix() -> str:
    return f"{os.getpid()}_{next(_counter)}_{uuid.uuid4().hex[:6]}"


class StreamEnv:
    def __init__(self, spark, tag: str = "t"):
        self.spark = spark
        sfx = unique_suffix()
        self.src = f"src_{tag}_{sfx}".lower()
        self.target = f"st_{tag}_{sfx}".lower()
        self.warehouse = warehouse_dir(spark)
        self.paths: dict = {}  # table name -> Delta path
        self.log: list = []  # descriptions of the applied changes, for failure messages
        self.reads = SourceReads(spark)  # the oracle's source reads, shared by this env's checks
        # dbt creates the model's schema before it runs the materialization; do the same.
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {self.target}")

    # sources -------------------------------------------------------------------------------
    def source_path(self, table: str) -> str:
        return os.path.join(self.warehouse, f"{self.src}.db", table)

    def source(self, table: str, rows=(), cdf: bool = True, path: Optional[str] = None, schema=None) -> str:
        path = path or self.source_path(table)
        S.create_source(path, list(rows), cdf=cdf, **({"schema": schema} if schema is not None else {}))
        self.paths[table] = path
        self.log.append(f"create {table} with {len(list(rows))} rows (cdf={cdf})")
        return path

    def source_paths(self) -> dict:
        """`schema.table` -> path of every source, as the oracle wants it."""
        return {f"{self.src}.{t}": p for t, p in self.paths.items()}

    def apply(self, ops, only_existing: bool = False) -> list:
        """Apply a change batch; only_existing drops ops on tables this env did not create."""
        if only_existing:
            ops = [op for op in ops if op.table in self.paths]
        done = S.apply_batch(self.paths, ops)
        self.log.append(f"batch: {done}")
        return done

    def sql(self, text: str) -> str:
        return text.replace("{src}", self.src)

    # stream tables ---------------------------------------------------------------------------
    def stream(self, identifier: str, sql: str, oracle_sql: Optional[str] = None, **request_kw) -> "Stream":
        """oracle_sql: the query the oracle recomputes, when the model reads something the oracle
        cannot read independently (a view: spell it out over the sources)."""
        return Stream(
            self, identifier, self.sql(sql), request_kw, oracle_sql=self.sql(oracle_sql) if oracle_sql else None
        )


@dataclass
class Stream:
    env: StreamEnv
    identifier: str
    sql: str
    request_kw: dict = field(default_factory=dict)
    results: list = field(default_factory=list)
    oracle_sql: Optional[str] = None

    @property
    def view(self) -> str:
        return f"{self.env.target}.{self.identifier}"

    @property
    def model(self) -> str:
        return f"model.test.{self.identifier}"

    def request(self, **overrides) -> RefreshRequest:
        kw: dict[str, Any] = dict(model=self.model, schema=self.env.target, identifier=self.identifier, sql=self.sql)
        # The oracle suites test the differential path: `auto` must not learn from timings that
        # a refresh is faster in full (tests of that rule ask for it: auto_from_history=True).
        kw["auto_from_history"] = False
        kw.update(self.request_kw)
        kw.update(overrides)
        return RefreshRequest(**kw)

    def refresh(self, expect: Optional[str] = None, **overrides):
        """Run one refresh; with expect='full'/'differential' assert the mode it reports."""
        result = refresh_stream_table(self.env.spark, self.request(**overrides))
        self.results.append(result)
        if expect is not None:
            assert result.mode == expect, (
                f"{self.identifier}: expected a {expect} refresh, got {result.mode} "
                f"(reason: {result.reason!r}); history: {self.env.log}"
            )
        return result

    def check(self, check_types: bool = True):
        """Assert the stored result equals the query recomputed on the sources (the oracle)."""
        return assert_matches_recompute(
            self.env.spark,
            self.view,
            self.oracle_sql or self.sql,
            self.env.source_paths(),
            check_types=check_types,
            context=f"{self.identifier}; history: {self.env.log}",
            reads=self.env.reads,
        )


def run_cycles(env: StreamEnv, streams, batches, expect="differential", keep_going=True):
    """Build every stream (full), then for each batch: apply it, refresh all, check all.

    With keep_going, a stream that fails is dropped from later cycles and the others carry on;
    one AssertionError at the end lists every failure (so one run shows all broken shapes).
    """
    failures = {}

    def step(st, expect_mode):
        if st.identifier in failures:
            return
        try:
            st.refresh(expect=expect_mode)
            st.check()
        except Exception as exc:  # noqa: BLE001 - reported below with the shape's name
            if not keep_going:
                raise
            failures[st.identifier] = f"{type(exc).__name__}: {exc}"

    for st in streams:
        step(st, "full")
    for batch in batches:
        env.apply(batch)
        for st in streams:
            step(st, expect)
    if failures:
        raise AssertionError(
            f"{len(failures)} of {len(streams)} stream tables failed:\n\n"
            + "\n\n".join(f"=== {name} ===\n{text}" for name, text in failures.items())
        )
