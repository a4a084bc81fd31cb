"""The spark_stream adapter: dbt-spark's adapter plus one bridge to the refresh engine.

The adapter builds no SQL of its own for refreshes; it hands the model's compiled SELECT to
`python_helpers.runtime.api.refresh_stream_table` and reports what the engine did.
"""
from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass
from importlib import import_module
from typing import Dict, Optional

from dbt.adapters.base.meta import available
from dbt.adapters.base.relation import AdapterTrackingRelationInfo
from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.events.types import AdapterEventWarning
from dbt.adapters.spark.impl import SparkAdapter, SparkConfig
from dbt_common.events.functions import warn_or_error
from dbt_common.exceptions import CompilationError, DbtRuntimeError

from dbt.adapters.spark_stream.connections import ADAPTER_TYPE, SparkStreamConnectionManager
from dbt.adapters.spark_stream.messages import first_line
from dbt.adapters.spark_stream.response import StreamTableResponse
from dbt.adapters.spark_stream.spark_session import get_spark_session, require_session_method

logger = AdapterLogger("SparkStream")


@dataclass
class SparkStreamConfig(SparkConfig):
    # Model config of stream tables; declared so `dbt docs` / config validation know it.
    refresh_mode: Optional[str] = None
    auto_full_threshold: Optional[float] = None
    float_recompute_every: Optional[int] = None
    retention_hours: Optional[float] = None


class SparkStreamAdapter(SparkAdapter):
    ConnectionManager = SparkStreamConnectionManager  # type: ignore[assignment]
    AdapterSpecificConfigs = SparkStreamConfig  # type: ignore[assignment]

    @classmethod
    def get_adapter_run_info(cls, config) -> AdapterTrackingRelationInfo:
        # dbt's default derives the module from the class name ("SparkStreamAdapter" ->
        # dbt.adapters.sparkstream) and fails on every model when usage tracking is on.
        return AdapterTrackingRelationInfo(
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
            relation
            for relation in super()._build_spark_relation_list(row_list, relation_info_func)
            if relation.schema
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
    ) -> StreamTableResponse:
        """Create or refresh one stream table; called by the `stream_table` materialization."""
        spark, request = self._request(model, schema, identifier, sql, refresh_mode, full_refresh, sources,
                                       shaping_config, auto_full_threshold, float_recompute_every, retention_hours)
        from python_helpers.errors import InvalidConfig, SqlParseError, StreamTableError, UnsupportedSql
        from python_helpers.runtime.api import refresh_stream_table

        logger.debug(f"stream table {model}: refresh request {request}")
        try:
            result = refresh_stream_table(spark, request, log=_engine_log)
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
        response = StreamTableResponse.from_result(result)
        logger.debug(f"stream table {model}: {response}")
        return response

    def _spark(self, what: str):
        """The SparkSession of this thread's connection (opened if dbt has not yet: it is lazy)."""
        connection = self.connections.get_thread_connection()
        require_session_method(connection.credentials, what)
        _ = connection.handle
        return get_spark_session(connection.credentials)

    def _request(self, model, schema, identifier, sql, refresh_mode, full_refresh, sources, shaping_config,
                 auto_full_threshold, float_recompute_every, retention_hours=None):
        """(the Spark session, the engine's RefreshRequest) for one model."""
        credentials = self.connections.get_thread_connection().credentials
        spark = self._spark(model)
        try:
            from python_helpers.runtime.api import RefreshRequest
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
        )
        # Unset configs keep the engine's defaults; set ones are validated by the engine.
        if auto_full_threshold is not None:
            request.auto_full_threshold = auto_full_threshold
        if float_recompute_every is not None:
            request.float_recompute_every = float_recompute_every
        if retention_hours is not None:
            request.retention_hours = retention_hours
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
    ) -> StreamTableResponse:
        """What the next refresh of a stream table would do and its operator tree; changes nothing."""
        spark, request = self._request(model, schema, identifier, sql, refresh_mode, full_refresh, sources, None,
                                       auto_full_threshold, float_recompute_every)
        from python_helpers.errors import StreamTableError
        from python_helpers.runtime.refresh import explain

        try:
            text = explain(spark, request)
        except StreamTableError as exc:
            raise DbtRuntimeError(str(exc)) from exc
        logger.info(text)
        first = text.splitlines()[1].strip() if len(text.splitlines()) > 1 else text
        return StreamTableResponse(_message=f"explained, nothing refreshed: {first}", code="explain",
                                   rows_affected=0)

    @available
    def stream_table_status(self, schema: str) -> str:
        """Every stream table of `schema`: its last refresh and how many commits its sources have
        moved since (Delta logs only: no Spark job). Also written to target/stream_table_status.json."""
        from python_helpers.runtime.status import format_status, schema_status

        statuses = schema_status(self._spark(f"stream_table_status({schema})"), schema)
        target = os.path.join(getattr(self.config, "project_root", None) or os.getcwd(),
                              getattr(self.config, "target_path", None) or "target")
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, "stream_table_status.json"), "w", encoding="utf-8") as handle:
            json.dump({"schema": schema, "stream_tables": [s.as_dict() for s in statuses]}, handle, indent=2)
        return format_status(statuses, schema)

    def _resolve_path(self, path: str) -> str:
        """A relative `delta_path` is relative to the dbt project, not to wherever dbt was started."""
        if "://" in path or os.path.isabs(path):
            return path
        root = getattr(self.config, "project_root", None) or os.getcwd()
        return os.path.normpath(os.path.join(root, os.path.expanduser(path)))


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
