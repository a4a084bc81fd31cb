"""`method: connect`: dbt's statements and the stream tables' refreshes over Spark Connect.

dbt-spark has no Spark Connect method. Ours reuses dbt-spark's session cursor (it only needs a
SparkSession and DataFrames) with a remote session: every thread of a `dbt run` shares one
Connect session per server URL (Spark Connect sessions are safe to share across threads), and
the stream table's own Python work (parsing, planning, the Delta log) stays in the dbt process.

The profile:

    method: connect
    host: sc://spark.example.com:15002     # or a bare host name, with `port` (default 15002)
    token: ...                              # optional: bearer token (implies TLS)
    use_ssl: true                           # optional
    user: ...                               # optional: the Connect user id
"""

from __future__ import annotations

import atexit
import socket
import threading
from typing import Dict
from urllib.parse import quote

from dbt.adapters.events.logging import AdapterLogger
from dbt.adapters.exceptions import FailedToConnectError

from dbt.adapters.spark_stream.messages import first_line
from python_helpers.runtime.connections.server_checks import lacks_recursion, required_version, too_old

logger = AdapterLogger("SparkStream")

DEFAULT_PORT = 15002
# dbt-spark's default `port` (its http method's); a connect profile that leaves it unset means
# Spark Connect's own default.
_DBT_SPARK_DEFAULT_PORT = 443

_sessions: Dict[str, object] = {}
_lock = threading.Lock()


def connect_url(credentials) -> str:
    """The `sc://` URL of a `method: connect` profile, with its token/TLS/user parameters; for
    another method, its `connect_url` as given (the Thrift server's `token`/`user` are not the
    Connect endpoint's)."""
    if credentials.method != "connect":
        return str(credentials.connect_url).strip()
    host = (credentials.host or "").strip()
    if host.startswith("sc://"):
        url = host
    else:
        port = credentials.port if credentials.port and credentials.port != _DBT_SPARK_DEFAULT_PORT else DEFAULT_PORT
        url = f"sc://{host}:{port}"
    params = []
    if credentials.token and ";token=" not in url:
        params.append(f"token={quote(credentials.token, safe='')}")
    if credentials.use_ssl and ";use_ssl=" not in url:
        params.append("use_ssl=true")
    if credentials.user and ";user_id=" not in url:
        params.append(f"user_id={quote(credentials.user, safe='')}")
    if params:
        url = url.rstrip("/") + ("" if "/;" in url else "/") + ";" + ";".join(params)
    return url


def _address(url: str):
    """(host, port) of an `sc://host:port/;params` URL."""
    netloc = url[len("sc://") :].split("/", 1)[0].split(";", 1)[0]
    host, _, port = netloc.rpartition(":")
    if not host:
        return netloc, DEFAULT_PORT
    return host.strip("[]"), int(port)


def _redacted(url: str) -> str:
    return ";".join(p if not p.startswith("token=") else "token=***" for p in url.split(";"))


def check_reachable(url: str, timeout: float, keys: str = "`host` (sc://host:port) and `port`") -> None:
    """Fail fast, naming the profile keys, when nothing listens at the server's address.

    The Connect client itself retries an unreachable server with back-off for minutes before it
    gives up; a scheduled run with a wrong host should fail in seconds."""
    host, port = _address(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return
    except OSError as exc:
        raise FailedToConnectError(
            f"spark_stream profile (method: connect): cannot reach the Spark Connect server at "
            f"{_redacted(url)} ({exc.strerror or exc}). Check {keys} in "
            "profiles.yml, and that the server runs (sbin/start-connect-server.sh, or spark-submit "
            "--class org.apache.spark.sql.connect.service.SparkConnectServer)."
        ) from exc


def connect_session(credentials):
    """The shared Spark Connect session of this profile's server (created on first use)."""
    url = connect_url(credentials)
    with _lock:
        session = _sessions.get(url)
        if session is not None:
            return session
        keys = "`host` (sc://host:port) and `port`" if credentials.method == "connect" else "`connect_url`"
        check_reachable(url, float(credentials.connect_timeout or 10), keys)
        try:
            # The Connect client's own builder: pyspark's classic builder would also mark the
            # whole process as a Connect client (SPARK_CONNECT_MODE_ENABLED), and a classic
            # session built later in it (dbt run in-process beside other Spark code) would fail.
            from pyspark.sql.connect.session import SparkSession

            session = SparkSession.builder.remote(url).create()
        except ImportError as exc:
            raise FailedToConnectError(
                "spark_stream profile (method: connect) needs the Spark Connect client: "
                f"pip install 'dbt-spark-stream[connect]' ({exc})"
            ) from exc
        no_call_at_exit(session)
        _require_version(session, url)
        _apply_parameters(session, credentials.server_side_parameters, url)
        _sessions[url] = session
        return session


def no_call_at_exit(session) -> None:
    """Take back the call pyspark's Connect client registers to run at the process's exit (it
    clears the server's ML cache, which dbt never fills). The shared session lives as long as the
    process; if its server has gone by then (a restarted cluster, a run that failed because the
    server died), that call retries with back-off for about ten minutes, and the dbt process with
    it. A session the server no longer needs ends by the server's own timeout."""
    cleanup = getattr(getattr(session, "client", None), "_cleanup_ml_cache", None)
    if cleanup is not None:
        atexit.unregister(cleanup)


def _apply_parameters(session, parameters: Dict[str, str], url: str) -> None:
    """server_side_parameters that a client may set are set on the session; static ones (the
    warehouse, the metastore, memory) belong to the server's own configuration."""
    for key, value in parameters.items():
        try:
            if session.conf.get(key, None) == value:
                continue  # a static setting the server already has is no conflict
            session.conf.set(key, value)
        except Exception as exc:  # noqa: BLE001 - Spark's error class names the reason
            logger.warning(
                f"spark_stream (method: connect): server_side_parameters.{key} cannot be set from "
                f"a client of {_redacted(url)}; set it in the Connect server's configuration "
                f"instead ({first_line(exc, 200)})"
            )


def _require_version(session, url: str) -> None:
    try:
        version = session.version
    except Exception as exc:  # noqa: BLE001 - the first RPC: a server that is not Spark Connect
        raise FailedToConnectError(
            f"spark_stream profile (method: connect): {_redacted(url)} did not answer as a Spark "
            f"Connect server: {type(exc).__name__}: {first_line(exc, 300)}. "
            "Check `host`/`port` (the Connect port, 15002 by default, not the Thrift or UI port) and "
            "`token`/`use_ssl`."
        ) from exc
    if too_old(version):
        raise FailedToConnectError(
            f"spark_stream profile (method: connect): the server at {_redacted(url)} runs Spark "
            f"{version}; stream tables need {required_version()}. Upgrade the server or point `host` "
            "at one that is."
        )
    if lacks_recursion(version):
        logger.warning(
            f"spark_stream: the Spark Connect server runs Spark {version}; models with WITH RECURSIVE "
            f"need {required_version()}."
        )


def make_handle(credentials):
    """dbt's connection handle for `method: connect`: dbt-spark's session wrapper over a cursor
    that runs on the shared Connect session."""
    from dbt.adapters.spark.session import Connection, Cursor, SessionConnectionWrapper
    from dbt_common.exceptions import DbtRuntimeError
    from pyspark.errors import AnalysisException

    session = connect_session(credentials)

    class ConnectCursor(Cursor):
        def execute(self, sql: str, *parameters) -> None:
            if parameters:
                sql = sql % parameters
            try:
                self._df = session.sql(sql)
            except AnalysisException as exc:
                raise DbtRuntimeError(str(exc)) from exc

    class ConnectConnection(Connection):
        def cursor(self) -> Cursor:
            return ConnectCursor(server_side_parameters=self.server_side_parameters)

    return SessionConnectionWrapper(ConnectConnection(server_side_parameters=credentials.server_side_parameters))
