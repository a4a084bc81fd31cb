"""A Spark server too old for stream tables is refused before anything is written, with the
version it runs, the profile key and the fix (no older Spark is installable here, so the checks
are fed the version strings such servers report); and a Connect session whose server has gone
does not hold the process at its exit."""

from __future__ import annotations

import pytest
from dbt.adapters.exceptions import FailedToConnectError

from dbt.adapters.spark_stream.spark_connect import _require_version
from python_helpers.runtime.connections.server_checks import lacks_recursion, spark_version, too_old
from python_helpers.runtime.connections.thrift import old_server_message


@pytest.mark.parametrize(
    "text, expected",
    [
        ("4.1.4", (4, 1)),
        ("3.5.1-amzn-0", (3, 5)),  # EMR's form
        ("4.1.4 5a6f1c0e9f1c", (4, 1)),  # Spark SQL's version(): number and git hash
        ("14.3.x-scala2.12", (14, 3)),  # Databricks runtime names
        ("unknown", (0, 0)),
    ],
)
def test_spark_version_reads_what_servers_report(text, expected):
    assert spark_version(text) == expected


def test_only_spark_4_runs_stream_tables_and_only_4_1_recursion():
    assert too_old("3.5.1") and too_old("2.4.8") and too_old("not a version")
    assert not too_old("4.0.1") and not too_old("4.1.4")
    assert lacks_recursion("4.0.1")
    assert not lacks_recursion("4.1.4") and not lacks_recursion("3.5.1")


class _Server:
    """What `_require_version` reads of a Connect session: its `version` (one RPC)."""

    def __init__(self, version=None, error=None):
        self._version, self._error = version, error

    @property
    def version(self):
        if self._error is not None:
            raise self._error
        return self._version


def test_connect_server_below_spark_4_is_refused_naming_version_key_and_fix():
    with pytest.raises(FailedToConnectError) as info:
        _require_version(_Server("3.5.1"), "sc://spark.example.com:15002/;token=secret")
    message = str(info.value)
    assert "sc://spark.example.com:15002" in message and "secret" not in message
    assert "runs Spark 3.5.1" in message and "Spark 4.0 or later" in message
    assert "`host`" in message and "Upgrade the server" in message


def test_connect_server_of_4_0_is_accepted_and_4_1_too():
    _require_version(_Server("4.0.1"), "sc://localhost:15002")
    _require_version(_Server("4.1.4"), "sc://localhost:15002")


def test_an_endpoint_that_is_not_spark_connect_names_the_port_to_check():
    with pytest.raises(FailedToConnectError) as info:
        _require_version(_Server(error=ConnectionError("HTTP/1.1 400 Bad Request")), "sc://localhost:4040")
    message = str(info.value)
    assert "did not answer as a Spark Connect server" in message and "400 Bad Request" in message
    assert "15002" in message


def test_thrift_server_below_spark_4_message_names_server_keys_and_fix():
    message = old_server_message("localhost:10000", "3.5.1")
    assert "localhost:10000" in message and "Spark 3.5.1" in message
    assert "`host`/`port`" in message and "Spark 4.0 or later" in message and "newer server" in message


def test_a_connect_session_whose_server_is_gone_lets_the_process_exit():
    """pyspark's Connect client registers a call for the process's exit that retries a server
    that is gone for about ten minutes; the adapter's shared session takes it back. A real
    client, in a process of its own, pointed at a port nobody listens on (the client makes no
    call before the first query): it exits in seconds."""
    import subprocess
    import sys
    import time

    from python_helpers.testing.local_spark import free_port

    script = (
        "from pyspark.sql.connect.session import SparkSession\n"
        "from dbt.adapters.spark_stream.spark_connect import no_call_at_exit\n"
        f"session = SparkSession.builder.remote('sc://127.0.0.1:{free_port()}').create()\n"
        "no_call_at_exit(session)\n"
        "print('created')\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "created", done.stderr[-2000:]
    # Without no_call_at_exit the same process was still waiting when killed after 90 s (by hand).
    assert time.monotonic() - started < 60
