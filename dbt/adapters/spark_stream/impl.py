"""The spark_stream adapter: dbt-spark's adapter plus one bridge to the refresh conn.

The adapter builds no SQL of its own for refreshes; it hands the model's compiled SELECT to
`python_helpers.runtime.api.refresh_stream_table` and reports what the refresh engine did.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Dict, Optional

from dbt.adapters.base.meta import available
from dbt.adapters.base.relation import AdapterTrackingRelationInfo
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.events.types import AdapterEventWarning
from dbt.adapters.spark.impl import SparkAdapter, SparkConfig
from dbt_common.events.functions import warn_or_error
from dbt_common.exceptions import CompilationError, DbtRuntimeError

from dbt.adapters.spark_stream import preload
from dbt.adapters.spark_stream.connections import ADAPTER_TYPE, SparkStreamConnectionManager
from dbt.adapters.spark_stream.messages import first_line
from dbt.adapters.spark_stream.response import StreamTableResponse
from dbt.adapters.spark_stream.spark_session import get_spark_session, require_supported_method
from dbt.adapters.spark_stream.thrift_refresh import open_engine as open_thrift_engine
from dbt.adapters.spark_stream.thrift_refresh import thrift_only

logger = AdapterLogger("SparkStream")


@dataclass
class SparkStreamConfig(SparkConfig):
    # Model config of stream tables; declared so `dbt docs` / config validation know it.
    refresh_mode: Optional[str] = None
    auto_full_threshold: Optional[float] = None
    float_recompute_every: Optional[int] = None
    retention_hours: Optional[float] = None
    auto_from_history: Optional[bool] = None


class SparkStreamAdapter(SparkAdapter):
    ConnectionManager = SparkStreamConnectionManager
    AdapterSpecificConfigs = SparkStreamConfig

    @classmethod
    def get_adapter_run_info(cls, config) -> AdapterTrackingRelationInfo:
        # dbt's default derives the module from the class name ("SparkStreamAdapter" ->
        # dbt.adapters.sparkstream) and fails on every model when usage tracking is on.
        # mypy sees the frozen dataclass's generated __hash__ as abstract.
        return AdapterTrackingRelationInfo(  # type: ignore[abstract]
            adapter_name=ADAPTER_TYPE,
            base_adapter_version=import_module("dbt.adapters.__about__").version,
            adapter_version=import_module("dbt.adapters.spark_stream.__version__").version,
            model_adapter_details=cls._get_adapter_specific_run_info(config),
        )

    def _build_spark_relation_list(self, row_list, relation_info_func):
        # `show table extended in <schema>` also lists the session's temporary views (no schema,
        # e.g. an incremental model's `<name>__dbt_tmp`). They are not the schema's relations,
        # and a session that outlives one dbt command (method: session in a long-lived process,
        # a shared Connect session) would otherwise hand `docs generate` a relation without a
        # schema, which it fails on.
        return [
            relation for relation in super()._build_spark_relation_list(row_list, relation_info_func) if relation.schema
        ]

    def get_columns_in_relation(self, relation):
        # Under --empty (or --sample), ref() gives a relation that renders as a `(select ... limit 0)`
        # subquery, which Spark's DESCRIBE cannot parse; its columns are the table's own.
        if getattr(relation, "limit", None) is not None or getattr(relation, "event_time_filter", None) is not None:
            relation = relation.incorporate(limit=None, event_time_filter=None)
        return super().get_columns_in_relation(relation)

    @available
    def stream_table_refresh(
        self,
        model: str,
        schema: str,
        identifier: str,
        sql: str,
        refresh_mode: str = "auto",
        full_refresh: bool = False,
        sources: Optional[Dict[str, str]] = None,
        shaping_config: Optional[Dict] = None,
        auto_full_threshold: Optional[float] = None,
        float_recompute_every: Optional[int] = None,
        retention_hours: Optional[float] = None,
        docs: Optional[Dict] = None,
        contract: Optional[list] = None,
        auto_from_history: Optional[bool] = None,
        unique_key: Any = None,
        catalog_information: Optional[str] = None,
    ) -> StreamTableResponse:
        """Create or refresh one stream table; called by the `stream_table` materialization.

        `docs`: the descriptions persist_docs publishes ({"relation": text or None, "columns":
        {name: text}}); `contract`: [[name, data_type], ...] of an enforced contract;
        `catalog_information`: the model's view as dbt's relation cache describes it."""
        if contract:
            # Part of the stored result's fingerprint: a changed contract rebuilds (and is checked).
            shaping_config = {**(shaping_config or {}), "contract": repr([list(c) for c in contract])}
        spark, request = self._request(
            model,
            schema,
            identifier,
            sql,
            refresh_mode,
            full_refresh,
            sources,
            shaping_config,
            auto_full_threshold,
            float_recompute_every,
            retention_hours,
            auto_from_history,
            unique_key,
        )
        request.docs = dict(docs or {})
        request.catalog_information = str(catalog_information) if catalog_information else None
        request.contract = [tuple(c) for c in contract] if contract else None
        from python_helpers.errors import InvalidConfig, SqlParseError, StreamTableError, UnsupportedSql
        from python_helpers.runtime.api import refresh_stream_table
        from python_helpers.runtime.catalog import comments as view_comments
        from python_helpers.runtime.refresh.contract import ContractMismatch

        logger.debug(f"stream table {model}: refresh request {request}")
        started_ms = int(time.time() * 1000)
        try:
            try:
                result = refresh_stream_table(spark, request, log=_engine_log)
                view_comments.apply(spark, schema, identifier, request.docs)
            except Exception as exc:
                _record_failure(spark, request, exc, started_ms)
                raise
        except ContractMismatch as exc:
            raise _contract_error(exc) from exc
        except (InvalidConfig, SqlParseError, UnsupportedSql) as exc:
            # Problems with the model itself: dbt shows them as compilation errors.
            raise CompilationError(str(exc)) from exc
        except StreamTableError as exc:
            raise DbtRuntimeError(str(exc)) from exc
        except CompilationError:
            raise  # a fallback warning turned into an error by --warn-error (nothing written)
        except Exception as exc:
            # Anything else is a bug or an environment problem (Spark, Delta files): keep the
            # traceback in logs/dbt.log and show the model and the error on the console.
            logger.debug(f"stream table {model}: refresh failed\n{traceback.format_exc()}")
            raise DbtRuntimeError(
                f"stream table '{model}': refresh failed: {type(exc).__name__}: {first_line(exc)}"
                " (full error in logs/dbt.log)"
            ) from exc
        finally:
            self._done(spark)
        response = StreamTableResponse.from_result(result)
        logger.debug(f"stream table {model}: {response}")
        return response

    @available
    def stream_table_apply_grants(self, model: str, relation, grant_config: Dict, should_revoke: bool) -> None:
        """dbt-spark's apply_grants on the stream table's view; Spark's refusal (open-source Spark
        has no GRANT) becomes an error naming the model and what to do."""
        try:
            self.execute_macro(
                "apply_grants",
                kwargs={"relation": relation, "grant_config": grant_config, "should_revoke": should_revoke},
            )
        except DbtRuntimeError as exc:  # Spark's error, as dbt-spark's cursor raised it
            raise DbtRuntimeError(
                f"stream table '{model}': grants {grant_config} could not be applied to {relation} (the stream "
                f"table itself was refreshed): {_last_line(exc)}. Open-source Spark has no GRANT / SHOW GRANTS "
                "without an authorization plugin: remove `grants` from the model's config there, or run against "
                "a Spark that has SQL authorization (Databricks)"
            ) from exc

    def _get_columns_for_catalog(self, relation):
        # dbt-spark reads a view's columns from `show table extended`, whose schema has no
        # comments: add the comments persist_docs gave a stream table's view and its columns.
        comments = self._stream_table_comments(relation)
        for column in super()._get_columns_for_catalog(relation):
            comment = comments.get(str(column.get("column_name") or "").lower())
            if comment:
                column["column_comment"] = comment
            if comments.get(None):
                column["table_comment"] = comments[None]
            yield column

    def _stream_table_comments(self, relation) -> Dict[Optional[str], str]:
        """{lower-case column: its comment, None: the view's comment} of a stream table's view."""
        if "dbt_spark_stream.role=stream_table" not in (getattr(relation, "information", None) or ""):
            return {}
        try:
            _, table = self.execute(f"describe table extended {relation}", fetch=True)
        except DbtRuntimeError:  # dropped meanwhile: the catalog goes without its comments
            return {}
        comments: Dict[Optional[str], str] = {}
        in_columns = True
        for row in table:
            if not row[0] or str(row[0]).startswith("#"):
                in_columns = False
            elif in_columns and row[2]:
                comments[str(row[0]).lower()] = str(row[2])
            elif not in_columns and row[0] == "Comment" and row[1]:
                comments[None] = str(row[1])
        return comments

    def _spark(self, what: str):
        """What the refresh talks to Spark through: the SparkSession of this thread's connection
        (opened if dbt has not yet: it is lazy), or for a Thrift server without a Connect
        endpoint a connection over a Hive session of its own (close it with _done)."""
        connection = self.connections.get_thread_connection()
        require_supported_method(connection.credentials, what)
        if thrift_only(connection.credentials):
            return open_thrift_engine(connection.credentials)
        _ = connection.handle
        return get_spark_session(connection.credentials)

    @staticmethod
    def _done(spark) -> None:
        """Release what _spark opened for one call (a Thrift engine's Hive session)."""
        close = getattr(spark, "close", None)
        if callable(close) and hasattr(spark, "view_of_files"):
            close()

    def _request(
        self,
        model,
        schema,
        identifier,
        sql,
        refresh_mode,
        full_refresh,
        sources,
        shaping_config,
        auto_full_threshold,
        float_recompute_every,
        retention_hours=None,
        auto_from_history=None,
        unique_key=None,
    ):
        """(the Spark session, the engine's RefreshRequest) for one model."""
        credentials = self.connections.get_thread_connection().credentials
        spark = self._spark(model)
        preload.wait()  # the engine's modules: loaded by now, or loading since the connection opened
        try:
            from python_helpers.runtime.refresh.requests import RefreshRequest
        except ImportError as exc:  # a broken install should say so, not show a traceback
            raise DbtRuntimeError(f"stream table '{model}': cannot load the refresh engine: {exc}") from exc
        request = RefreshRequest(
            model=model,
            schema=schema,
            identifier=identifier,
            sql=sql,
            refresh_mode=refresh_mode,
            full_refresh=bool(full_refresh),
            sources={str(k).lower(): self._resolve_path(str(v)) for k, v in (sources or {}).items()},
            engine=credentials.engine,
            shaping_config=dict(shaping_config or {}),
            # dbt owns the model's relation name: a view of that name (the model materialized as
            # a view before, say) becomes the stream table's view, as dbt's own materializations
            # replace a relation of the model.
            take_over_relation=True,
            invocation_id=_invocation_id(),
        )
        # Unset configs keep the engine's defaults; set ones are validated by the conn.
        if auto_full_threshold is not None:
            request.auto_full_threshold = auto_full_threshold
        if float_recompute_every is not None:
            request.float_recompute_every = float_recompute_every
        if retention_hours is not None:
            request.retention_hours = retention_hours
        if auto_from_history is not None:
            request.auto_from_history = auto_from_history
        if unique_key is not None:
            # dbt's forms: one column name, or a list of them (validated by the engine).
            request.unique_key = list(unique_key) if isinstance(unique_key, (list, tuple)) else [unique_key]
        return spark, request

    @available
    def stream_table_explain(
        self,
        model: str,
        schema: str,
        identifier: str,
        sql: str,
        refresh_mode: str = "auto",
        full_refresh: bool = False,
        sources: Optional[Dict[str, str]] = None,
        auto_full_threshold: Optional[float] = None,
        float_recompute_every: Optional[int] = None,
        auto_from_history: Optional[bool] = None,
        unique_key: Any = None,
    ) -> StreamTableResponse:
        """What the next refresh of a stream table would do and its operator tree; changes nothing."""
        spark, request = self._request(
            model,
            schema,
            identifier,
            sql,
            refresh_mode,
            full_refresh,
            sources,
            None,
            auto_full_threshold,
            float_recompute_every,
            None,
            auto_from_history,
            unique_key,
        )
        from python_helpers.errors import StreamTableError
        from python_helpers.runtime.refresh.run import explain

        try:
            text = explain(spark, request)
        except StreamTableError as exc:
            raise DbtRuntimeError(str(exc)) from exc
        finally:
            self._done(spark)
        logger.info(text)
        first = text.splitlines()[1].strip() if len(text.splitlines()) > 1 else text
        return StreamTableResponse(_message=f"explained, nothing refreshed: {first}", code="explain", rows_affected=0)

    @available
    def stream_table_status(self, schema: str) -> str:
        """Every stream table of `schema`: its last refresh and how many commits its sources have
        moved since (Delta logs only: no Spark job). Also written to target/stream_table_status.json."""
        preload.wait()
        from python_helpers.runtime.status import format_status, schema_status

        statuses = self._on_schema(
            f"stream_table_status({schema})", lambda spark, engine: schema_status(spark, schema, engine)
        )
        target = os.path.join(
            getattr(self.config, "project_root", None) or os.getcwd(),
            getattr(self.config, "target_path", None) or "target",
        )
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, "stream_table_status.json"), "w", encoding="utf-8") as handle:
            json.dump({"schema": schema, "stream_tables": [s.as_dict() for s in statuses]}, handle, indent=2)
        return format_status(statuses, schema)

    @available
    def stream_table_refresh_history(self, schema: str) -> str:
        """Write `<schema>.stream_table_refresh_history` (one row per refresh commit in the
        stream tables' Delta logs) and say what it holds."""
        preload.wait()
        from python_helpers.runtime.history import format_summary, write_history

        rows = self._on_schema(
            f"stream_table_refresh_history({schema})", lambda spark, engine: write_history(spark, schema, engine)
        )
        return format_summary(rows, schema)

    def _on_schema(self, what: str, call):
        """`call(spark, engine)` with the thread's Spark and the profile's Delta engine, for an
        operation over a schema's stream tables."""
        spark = self._spark(what)
        engine = self.connections.get_thread_connection().credentials.engine
        try:
            return call(spark, engine)
        finally:
            self._done(spark)

    def _resolve_path(self, path: str) -> str:
        """A relative `delta_path` is relative to the dbt project, not to wherever dbt was started."""
        from python_helpers.runtime import paths

        if paths.is_uri(path) or os.path.isabs(path):  # s3a://, hdfs:/, dbfs:/ stay as given
            return path
        root = getattr(self.config, "project_root", None) or os.getcwd()
        return os.path.normpath(os.path.join(root, os.path.expanduser(path)))


def _last_line(exc: Exception) -> str:
    """The line of a (nested) dbt error that says what Spark refused."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return next((line for line in lines if line.startswith("[")), lines[-1] if lines else type(exc).__name__)


def _contract_error(exc) -> Exception:
    """dbt's own contract error (its table of mismatched columns) for the engine's mismatch."""
    try:
        from dbt.exceptions import ContractError
    except ImportError:  # dbt-core is what runs the adapter; keep the engine's text if it moved
        return CompilationError(str(exc))
    error = ContractError(exc.yaml_columns, exc.sql_columns)
    error.msg = f"stream table '{exc.model}': {error.msg}\nnothing was written"
    return error


def _engine_log(level: str, text: str) -> None:
    """The engine's `log(level, text)` callback, routed to dbt's log (console and logs/dbt.log).

    The engine's texts already name the model."""
    if level == "fallback":
        # A dbt warning event: `--warn-error` or
        # `--warn-error-options '{"error": ["AdapterEventWarning"]}'` makes it an error.
        warn_or_error(AdapterEventWarning(name="SparkStream", base_msg=text))
    elif level == "warn":
        logger.warning(text)
    elif level == "info":
        logger.info(text)
    else:
        logger.debug(text)


def _invocation_id() -> Optional[str]:
    """dbt's id of the running invocation (run_results.json's `invocation_id`)."""
    try:
        from dbt_common.invocation import get_invocation_id

        return str(get_invocation_id())
    except Exception:  # noqa: BLE001 - outside dbt, or an older dbt: not recorded
        return None


def _record_failure(spark, request, exc: Exception, started_ms: int) -> None:
    """The failed refresh's row in the schema's refresh history; never raises (a history that
    cannot be written must not change how the refresh ended)."""
    try:
        from python_helpers.runtime.history import record_failure

        record_failure(spark, request, f"{type(exc).__name__}: {exc}", started_ms)
    except Exception:  # noqa: BLE001
        logger.debug(f"stream table {request.model}: its failure was not recorded\n{traceback.format_exc()}")
