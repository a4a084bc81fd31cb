"""The connection binding for a SparkSession: in-process (pyspark classic) or Spark Connect.

Both speak the DataFrame API; the in-process session also has a JVM, which classifies
user-defined functions exactly (an aggregate, a pandas UDAF, a deterministic one) where SQL alone
cannot tell. This is the only module of the runtime that touches a SparkSession.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any, Optional

import pyarrow as pa

from python_helpers.runtime.connections import function_code, held_settings
from python_helpers.runtime.connections.base import (
    NO_DICTIONARY_FILTER,
    NOT_TOLD,
    STATIC_SETTINGS,
    Computed,
    FunctionKind,
    OutputColumn,
)

# (session, cache key, columns) -> DataFrame. A version of a Delta table never changes, so its
# scan (file listing included) is built once per process: the old snapshot of one refresh is
# the new snapshot of the previous one, and models share their sources.
_SCANS: "OrderedDict" = OrderedDict()
_SCANS_KEPT = 64
_SCANS_LOCK = threading.Lock()  # dbt runs models on several threads in one process

# The names a refresh gives its views (bound_views.BoundViews.view_name, history.py,
# executor_merge.py): the statements that may name a held view.
_VIEW_NAME = re.compile(r"__dvm_\w+", re.IGNORECASE | re.ASCII)

# Base classes of aggregate functions, for functions the registry cannot build untyped (Hive).
_AGGREGATE_CLASSES = (
    "org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction",
    "org.apache.hadoop.hive.ql.udf.generic.GenericUDAFResolver",
    "org.apache.hadoop.hive.ql.exec.UDAF",
    "org.apache.spark.sql.expressions.UserDefinedAggregateFunction",
)


class _Observed:
    """A frame whose rows are counted while it is computed (an observation: no job of its own),
    so a materialized intermediate need not be asked whether it is empty (a job per
    intermediate, 0.06-0.2 s each), nor whether a row holds its flag (an aggregate's rescan
    flag: 0.13-0.19 s for the demo's one-row summary). Local sessions only; the counts arrive
    through a listener, so they are waited for briefly and otherwise left unknown."""

    WAIT_SECONDS = 0.2

    def __init__(self, frame: Any, flag: Optional[str] = None):
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        counts = [F.count(F.lit(1)).alias("rows")]
        if flag is not None:
            counts.append(F.count_if(F.col(f"`{flag}`")).alias("flagged"))
        self._flag = flag
        self._observation = Observation()
        try:
            self.frame = frame.observe(self._observation, *counts)
        except Exception:  # noqa: BLE001 - a flag the query lacks or that is not boolean: rows alone
            self._flag = None
            self._observation = Observation()
            self.frame = frame.observe(self._observation, counts[0])

    def told(self) -> Computed:
        import time

        try:
            observation = self._observation._jo
            if observation is None:
                return NOT_TOLD
            future = observation.future()
            deadline = time.monotonic() + self.WAIT_SECONDS
            while not future.isCompleted():
                if time.monotonic() > deadline:
                    return NOT_TOLD
                time.sleep(0.001)
            # (A retried task can count its rows twice; the counts are used for emptiness alone.)
            counts = self._observation.get
            flagged = bool(counts["flagged"]) if self._flag is not None else None
            return Computed(holds_rows=bool(counts["rows"]), flagged=flagged)
        except Exception:  # noqa: BLE001 - an internal API of pyspark's: then ask instead
            return NOT_TOLD


def _with_views(sql: str, views: dict):
    """Spark Connect's plan of statement `sql` carrying the relations it names ({name: frame}):
    the server resolves those names for this statement alone, as for pyspark's own
    `spark.sql("... {df} ...", df=df)`, whose public route would rewrite the text into a format
    string."""
    from pyspark.sql.connect.plan import SQL, SubqueryAlias

    return SQL(sql, [], {}, [SubqueryAlias(frame._plan, name) for name, frame in sorted(views.items())])


class SparkConnection:
    def __init__(self, spark: Any, cloned: bool = False):
        self.spark = spark
        self._jvm = getattr(spark, "_jvm", None)  # None for Spark Connect: no JVM on this side
        self.kind = "session" if self._jvm is not None else "connect"
        self._cloned = cloned
        self._version: Optional[str] = None
        self._static: dict = {}  # STATIC_SETTINGS read so far: key -> value (None: unset)
        # Spark Connect: views of rows this process sent (an Arrow table) or Spark already holds
        # (a checkpoint), kept here as frames and sent with each statement that names them
        # (_with_views). Creating and dropping a temporary view is a round trip each, 0.03-0.14 s
        # apiece; the plans ride along with a statement for free.
        self._inline: dict = {}  # view name (lower case) -> frame

    def private(self) -> "SparkConnection":
        if self._jvm is None:
            return SparkConnection(self.spark.cloneSession(), cloned=True)  # Spark Connect 4.1
        from pyspark.sql import SparkSession

        # The JVM session's clone (settings, temporary views and functions copied); wrapping it
        # leaves the process's default and active sessions as they are.
        clone = SparkSession(self.spark.sparkContext, jsparkSession=self.spark._jsparkSession.cloneSession())
        return SparkConnection(clone, cloned=True)

    def release(self) -> None:
        if self._cloned and self._jvm is None:
            try:
                self.spark.client.release_session()
                self.spark.client.close()
            except Exception:  # noqa: BLE001 - the server ends idle sessions itself
                pass
            # Closed here, on this stack; left with no client, the session's __del__ closes
            # nothing. That close shuts down the release thread pool all Connect sessions of the
            # process share and waits for it, and the garbage collector may run __del__ inside
            # another session's gRPC call, whose lock the pool's threads then wait for: a
            # test run hung there for good.
            self.spark._client = None

    @property
    def key(self) -> int:
        return id(self.spark)

    @property
    def settings_key(self) -> int:
        return id(self.spark)

    # Statements and results.
    def execute(self, sql: str) -> None:
        views = self._views_named(sql)
        if views:
            self.spark.client.execute_command(_with_views(sql, views).command(self.spark.client))
        else:
            self.spark.sql(sql)

    def rows(self, sql: str) -> list[tuple]:
        return [tuple(r) for r in self._frame(sql).collect()]

    def records(self, sql: str) -> list[dict]:
        # Rows carry their names: no second round trip for the schema over Connect.
        return [r.asDict() for r in self._frame(sql).collect()]

    def arrow(self, sql: str, names: Optional[list[str]] = None) -> pa.Table:
        frame = self._frame(sql)
        return (frame.toDF(*names) if names is not None else frame).toArrow()

    def output_columns(self, sql: str) -> list[OutputColumn]:
        fields = self._frame(sql).schema.fields
        return [OutputColumn(f.name, f.dataType.simpleString(), bool(f.nullable)) for f in fields]

    # Temporary views.
    # A frame of rows sent from here is a local relation in Spark's plan, whose filters the
    # optimizer evaluates (no job) when nothing such as a repartition stands between.
    folds_local_rows = True

    def view_of_arrow(
        self, name: str, data: pa.Table, one_partition: bool = False, rows_name: Optional[str] = None
    ) -> None:
        from python_helpers.runtime.spark_types import spark_schema

        schema = spark_schema(data.schema)
        # One chunk per column: pyspark 4.1 drops the rows after an empty chunk (chunks of 1, 0
        # and 2 rows became a frame of 1 row), and tables concatenated from reads have them.
        data = data.combine_chunks()
        frame = self.spark.createDataFrame(data, schema=schema) if data.num_rows else self._empty(data.schema)
        self._register(frame.coalesce(1) if one_partition else frame, name, inline=True)
        if rows_name is not None:
            self._register(frame, rows_name, inline=True)

    def view_of_files(
        self,
        name: str,
        files: list[str],
        schema: pa.Schema,
        base_path: Optional[str] = None,
        columns: Optional[list[str]] = None,
        cache_key: Optional[tuple] = None,
    ) -> None:
        key = (self.key, cache_key, tuple(columns) if columns is not None else None)
        frame = None
        if cache_key is not None:
            with _SCANS_LOCK:
                frame = _SCANS.get(key)
                if frame is not None:
                    _SCANS.move_to_end(key)
        # The files are listed where the read is analysed: in `parquet()` in-process, when the
        # view is created over Connect.
        with held_settings.listing_in_driver(self, files):
            if frame is None:
                frame = self._files_frame(files, schema, base_path, columns)
                if cache_key is not None:
                    with _SCANS_LOCK:
                        _SCANS[key] = frame
                        while len(_SCANS) > _SCANS_KEPT:
                            _SCANS.popitem(last=False)
            self._register(frame, name)

    def _files_frame(self, files: list, schema: pa.Schema, base_path: Optional[str], columns: Optional[list]):
        from python_helpers.runtime.spark_types import spark_schema

        if not files:
            frame = self._empty(schema)
        else:
            reader = self.spark.read.schema(spark_schema(schema)).options(**NO_DICTIONARY_FILTER)
            if base_path is not None:
                # Partition values live in the directory names (hive style), found from the root.
                reader = reader.option("basePath", base_path)
            frame = reader.parquet(*files)
        if columns is not None:
            frame = frame.select(*["`" + c.replace("`", "``") + "`" for c in columns])
        return frame

    def view_of_query(
        self,
        name: str,
        sql: str,
        one_partition: bool = False,
        materialize: bool = False,
        flag: Optional[str] = None,
    ) -> Computed:
        frame = self._frame(sql)
        if one_partition:
            frame = frame.coalesce(1)
        computed = NOT_TOLD
        if materialize:
            # (Spark Connect 4.1 reports no observation of a checkpoint: asked instead.)
            observed = _Observed(frame, flag) if self._jvm is not None else None
            frame = self._own((observed.frame if observed else frame).localCheckpoint(eager=True))
            computed = observed.told() if observed else NOT_TOLD
        self._register(frame, name, inline=materialize)
        return computed

    def _own(self, frame):
        """A checkpointed frame bound to this session. Spark Connect's client (4.1) binds the
        result of a checkpoint to the process's active session, which for a cloned session is
        another server session: the view would be created there, over a relation it lacks."""
        if self._jvm is not None or frame.sparkSession is self.spark:
            return frame
        from pyspark.sql.connect import plan
        from pyspark.sql.connect.dataframe import DataFrame

        cached = frame._plan
        owned = DataFrame(plan=plan.CachedRemoteRelation(cached._relation_id, self.spark), session=self.spark)
        cached._relation_id = None  # released by `owned`, in the session that holds it
        return owned

    def drop_view(self, name: str) -> None:
        if self._inline.pop(name.lower(), None) is not None:
            return
        try:
            self.spark.catalog.dropTempView(name)
        except Exception:  # noqa: BLE001 - best effort cleanup
            pass

    def _empty(self, schema: pa.Schema):
        from python_helpers.runtime.spark_types import spark_schema

        return self.spark.createDataFrame([], spark_schema(schema))

    def _register(self, frame, name: str, inline: bool = False) -> None:
        """Bind `name` to `frame`. `inline`: a frame whose plan is cheap to send again and
        resolves to the same rows every time (rows of this process, a checkpoint), which Spark
        Connect then receives with each statement naming it rather than as a view."""
        if inline and self._jvm is None:
            self._inline[name.lower()] = frame
            return
        self._inline.pop(name.lower(), None)
        frame.createOrReplaceTempView(name)

    def _views_named(self, sql: str) -> dict:
        """The inline views `sql` names: {name as spelled there: frame} (the server matches a
        statement's relations to its names as spelled)."""
        if not self._inline:
            return {}
        spelled = set(_VIEW_NAME.findall(sql))
        return {n: self._inline[n.lower()] for n in spelled if n.lower() in self._inline}

    def _frame(self, sql: str):
        """The query's frame, with the inline views it names."""
        views = self._views_named(sql)
        if not views:
            return self.spark.sql(sql)
        from pyspark.sql.connect.dataframe import DataFrame

        return DataFrame(_with_views(sql, views), self.spark)

    # Catalog and settings.
    def table_exists(self, name: str) -> bool:
        return bool(self.spark.catalog.tableExists(name))

    def table_type(self, name: str) -> Optional[str]:
        try:
            return self.spark.catalog.getTable(name).tableType
        except Exception:  # noqa: BLE001 - no such object
            return None

    def conf(self, key: str, default: Optional[str] = None) -> Optional[str]:
        if key in STATIC_SETTINGS:
            if key not in self._static:  # fixed while the application runs: asked once
                self._static[key] = self.spark.conf.get(key, None)
            value = self._static[key]
            value = default if value is None else value
        else:
            value = self.spark.conf.get(key, default)
        return None if value is None else str(value)

    def setting(self, key: str) -> Optional[str]:
        try:
            value = self.spark.conf.get(key)  # no default given: Spark's own default when unset
        except Exception:  # noqa: BLE001 - a key without a default that nobody set
            return None
        return None if value is None else str(value)

    def settings(self, keys: list[str]) -> dict:
        if self._jvm is not None:
            return {key: self.setting(key) for key in keys}  # in-process: no round trips
        # Spark Connect: one config request for all keys (each `conf.get` is a round trip).
        # GetOption answers as `setting` does: the effective value, None for an unknown key.
        import pyspark.sql.connect.proto as proto

        operation = proto.ConfigRequest.Operation(get_option=proto.ConfigRequest.GetOption(keys=list(keys)))
        pairs = self.spark.client.config(operation).pairs
        return {key: None if value is None else str(value) for key, value in pairs}

    def set_conf(self, key: str, value: Optional[str]) -> None:
        self._static.pop(key, None)  # read back from the session next time
        if value is None:
            self.spark.conf.unset(key)
        else:
            self.spark.conf.set(key, value)

    def spark_version(self) -> str:
        if self._version is None:  # a round trip over Spark Connect: asked once
            self._version = str(self.spark.version).split()[0]
        return self._version

    def explicit_confs(self) -> dict:
        explicit = self.spark.conf.getAll
        explicit = explicit() if callable(explicit) else explicit
        return dict(explicit or {})

    # What only some connections can tell.
    def classify_function(self, name: str, arity: int) -> Optional[FunctionKind]:
        from python_helpers.runtime.refresh.functions import classify_by_sql

        if self._jvm is None:
            return classify_by_sql(self, name)
        return _classify_in_jvm(self.spark, self._jvm, name, arity)

    def ui_url(self) -> Optional[str]:
        if self._jvm is None:
            return None  # a Connect client cannot see the server's UI address
        try:
            return (self.spark.sparkContext.uiWebUrl or "").rstrip("/") or None
        except Exception:  # noqa: BLE001
            return None

    def add_tag(self, tag: str) -> bool:
        try:
            self.spark.addTag(tag)
            return True
        except Exception:  # noqa: BLE001 - no job tags in this Spark
            return False

    def remove_tag(self, tag: str) -> None:
        try:
            self.spark.removeTag(tag)
        except Exception:  # noqa: BLE001
            pass


def _classify_in_jvm(spark, jvm, name: str, arity: int) -> Optional[FunctionKind]:
    """Build the call once in the session's function registry over NULL arguments (no job, no
    data): the built expression says whether it is an aggregate and whether it is deterministic.
    A Hive function, which needs typed arguments to be built, is classified by its class."""
    database, _, func = name.rpartition(".")
    ident = jvm.org.apache.spark.sql.catalyst.FunctionIdentifier.apply(func, jvm.scala.Option.apply(database or None))
    try:
        registry = spark._jsparkSession.sessionState().functionRegistry()
        literal = getattr(jvm.org.apache.spark.sql.catalyst.expressions, "Literal$").__getattr__("MODULE$")
        null = literal.create(None, jvm.org.apache.spark.sql.types.DataTypes.NullType)
        args = jvm.java.util.ArrayList()
        for _ in range(arity):
            args.add(null)
        built = registry.lookupFunction(ident, jvm.scala.jdk.javaapi.CollectionConverters.asScala(args).toSeq())
        cls = built.getClass().getName()
        return FunctionKind(
            aggregate=_is_aggregate_class(jvm, cls),
            deterministic=bool(built.deterministic()),
            pandas=cls.endswith(".PythonUDAF"),
            code=_built_code(jvm, built, cls),
        )
    except Exception:  # noqa: BLE001 - not buildable over untyped NULLs (Hive), or not in the registry
        pass
    try:
        info = spark._jsparkSession.sessionState().catalog().lookupFunctionInfo(ident)
        class_name = info.getClassName()
        user = None if class_name.startswith(_SPARK_OWN) else function_code.jvm_class_by_name(jvm, class_name)
        return FunctionKind(
            aggregate=_is_aggregate_class(jvm, class_name),
            deterministic=_hive_deterministic(jvm, class_name),
            code=function_code.jvm_class_digest(jvm, user) if user is not None else None,
        )
    except Exception:  # noqa: BLE001 - Spark does not know it: its analysis reports that later
        return None


# Spark's own function classes: their code is Spark's version (recorded with every refresh).
_SPARK_OWN = ("org.apache.spark.sql.catalyst.expressions.", "org.apache.spark.sql.catalyst.")


def _built_code(jvm, built, cls: str) -> Optional[str]:
    """The code digest of a built user function call; None for Spark's built-in functions."""
    try:
        if cls.endswith((".PythonUDF", ".PythonUDAF")):
            return function_code.python_digest(bytes(built.func().command().unsafeArray()))
        if cls.endswith(".ScalaUDF"):
            return function_code.jvm_class_digest(jvm, built.function().getClass())
        if cls.endswith((".ScalaUDAF", ".ScalaAggregator")):
            inner = built.udaf() if cls.endswith(".ScalaUDAF") else built.agg()
            return function_code.jvm_class_digest(jvm, inner.getClass())
        if cls.startswith("org.apache.spark.sql.hive.Hive"):  # a Hive UDF/UDTF/UDAF wrapper
            user = function_code.jvm_class_by_name(jvm, str(built.funcWrapper().functionClassName()))
            return function_code.jvm_class_digest(jvm, user) if user is not None else None
    except Exception:  # noqa: BLE001 - a digest we cannot take is recorded as unknown
        return "unknown"
    return None


def _hive_deterministic(jvm, class_name: str) -> bool:
    """A Hive function's @UDFType(deterministic=...) (deterministic when not annotated)."""
    try:
        annotation = jvm.java.lang.Class.forName(class_name).getAnnotation(
            jvm.java.lang.Class.forName("org.apache.hadoop.hive.ql.udf.UDFType")
        )
        return True if annotation is None else bool(annotation.deterministic())
    except Exception:  # noqa: BLE001 - not a Hive class, or Hive is not on the classpath
        return True


def _is_aggregate_class(jvm, class_name: str) -> bool:
    try:
        cls = jvm.java.lang.Class.forName(class_name)
    except Exception:  # noqa: BLE001
        return False
    for base in _AGGREGATE_CLASSES:
        try:
            if jvm.java.lang.Class.forName(base).isAssignableFrom(cls):
                return True
        except Exception:  # noqa: BLE001 - that library is not on the classpath
            continue
    return False
