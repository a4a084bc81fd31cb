"""The spark_stream adapter plugin without Spark: loading, profile, responses, errors."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from dbt_common.exceptions import DbtRuntimeError

from dbt.adapters.spark_stream import Plugin
from dbt.adapters.spark_stream.connections import SparkStreamCredentials
from dbt.adapters.spark_stream.response import StreamTableResponse
from dbt.adapters.spark_stream.spark_connect import check_reachable, connect_url
from dbt.adapters.spark_stream.spark_session import require_supported_method
from python_helpers.runtime.api import RefreshResult

ROOT = Path(__file__).resolve().parents[2]


def test_plugin_is_spark_stream_on_top_of_spark():
    assert Plugin.adapter.type() == "spark_stream"
    assert Plugin.dependencies == ["spark"]
    assert Plugin.project_name == "dbt_spark_stream"
    include = Path(Plugin.include_path)
    assert "name: dbt_spark_stream" in (include / "dbt_project.yml").read_text()
    assert (include / "macros" / "materializations" / "stream_table.sql").is_file()


def test_plugin_version_module_exists_for_dbt():
    # dbt imports dbt.adapters.<type>.__version__ when it registers the adapter.
    from dbt.adapters.spark_stream.__version__ import version

    assert version


def test_adapter_run_info_names_our_module():
    info = Plugin.adapter.get_adapter_run_info({})
    assert info.adapter_name == "spark_stream" and info.adapter_version


def _credentials(**extra):
    return SparkStreamCredentials(method="session", host="localhost", schema="analytics", **extra)


def test_credentials_default_engine_is_auto():
    creds = _credentials()
    assert creds.engine == "auto"
    assert creds.type == "spark_stream"
    assert "engine" in creds._connection_keys()
    # dbt-spark's own behaviour is kept.
    assert creds.server_side_parameters["spark.sql.ansi.enabled"] == "false"


def test_credentials_accept_engines_case_insensitively():
    assert _credentials(engine="Embedded").engine == "embedded"


def test_credentials_reject_unknown_engine():
    with pytest.raises(DbtRuntimeError, match="engine must be one of auto, embedded, spark"):
        _credentials(engine="duckdb")


@pytest.mark.parametrize("method", ["http", "odbc"])
def test_stream_tables_refuse_http_and_odbc_naming_the_methods_that_work(method):
    with pytest.raises(DbtRuntimeError) as err:
        require_supported_method(SimpleNamespace(method=method), "customer_totals")
    text = str(err.value)
    assert "customer_totals" in text and f"method: {method}" in text
    assert "method: session" in text and "method: connect" in text and "method: thrift" in text


@pytest.mark.parametrize("method", ["session", "connect", "thrift"])
def test_session_and_connect_methods_pass(method):
    require_supported_method(SimpleNamespace(method=method), "m")


def test_thrift_with_a_connect_url_refreshes_over_that_endpoint():
    creds = SparkStreamCredentials(
        method="thrift",
        host="thrift.internal",
        port=10000,
        schema="analytics",
        connect_url="sc://thrift.internal:15002",
        token="hive-token",
    )
    require_supported_method(creds, "m")
    # The Thrift server's token is not the Connect endpoint's: the URL is taken as given.
    assert connect_url(creds) == "sc://thrift.internal:15002"
    assert "connect_url" in creds._connection_keys()


def _connect(**extra):
    return SparkStreamCredentials(method="connect", schema="analytics", **extra)


def test_connect_method_is_a_profile_method():
    creds = _connect(host="sc://spark.internal:15002")
    assert creds.method == "connect" and creds.type == "spark_stream"
    assert connect_url(creds) == "sc://spark.internal:15002"


def test_connect_url_from_host_and_port_defaults_to_the_connect_port():
    assert connect_url(_connect(host="spark.internal")) == "sc://spark.internal:15002"
    assert connect_url(_connect(host="spark.internal", port=16000)) == "sc://spark.internal:16000"


def test_connect_url_carries_token_tls_and_user_as_connect_parameters():
    url = connect_url(_connect(host="sc://h:15002", token="a/b+c", use_ssl=True, user="etl"))
    assert url == "sc://h:15002/;token=a%2Fb%2Bc;use_ssl=true;user_id=etl"
    # Parameters already in the URL are kept, not doubled.
    assert connect_url(_connect(host="sc://h:15002/;token=t", token="t")) == "sc://h:15002/;token=t"


def test_an_unreachable_connect_server_fails_fast_naming_the_profile_keys():
    from dbt.adapters.exceptions import FailedToConnectError

    from python_helpers.testing.local_spark import free_port

    with pytest.raises(FailedToConnectError) as err:
        check_reachable(f"sc://127.0.0.1:{free_port()}/;token=secret", timeout=2)
    text = str(err.value)
    assert "cannot reach the Spark Connect server" in text and "`host`" in text and "`port`" in text
    assert "secret" not in text and "token=***" in text


def test_response_carries_mode_and_rows_into_run_results():
    result = RefreshResult("m", "full", 63, 1.23456, reason="first build", source_versions={"shop.orders": 3})
    response = StreamTableResponse.from_result(result)
    data = response.to_dict(omit_none=True)  # what dbt writes as adapter_response
    assert data["mode"] == "full" and data["code"] == "full"
    assert data["rows_changed"] == 63 and data["rows_affected"] == 63
    assert data["seconds"] == pytest.approx(1.235)
    assert data["reason"] == "first build"
    assert data["source_versions"] == {"shop.orders": 3}
    assert str(response) == result.message  # the console line


def test_response_of_skipped_refresh():
    result = RefreshResult("m", "differential", 0, 0.1, skipped=True)
    data = StreamTableResponse.from_result(result).to_dict(omit_none=True)
    assert data["skipped"] is True and data["mode"] == "differential" and "reason" not in data


def test_the_demo_table_puts_each_refresh_beside_its_full_build():
    from python_helpers.testing.run_results import format_benefit

    def refresh(mode, seconds, rows, status="success"):
        return {"mode": mode, "execution_time": seconds, "rows_changed": rows, "status": status}

    first = {"a": refresh("full", 8.0, 1000), "b": refresh("full", 2.0, 10), "c": refresh("full", 3.0, 5)}
    second = {"a": refresh("differential", 2.0, 4), "b": refresh("differential", 4.0, 1), "c": refresh("full", 3.1, 5)}
    lines = format_benefit(first, second).splitlines()
    assert lines[0].split() == ["model", "full", "build", "s", "refresh", "s", "faster", "rows", "changed"]
    assert lines[2].split() == ["a", "8.00", "2.00", "4.0x", "4"]
    assert lines[3].split() == ["b", "2.00", "4.00", "0.5x", "1"]
    assert lines[4].split() == ["c", "3.00", "3.10", "(full)", "5"]  # not a differential refresh: no ratio
    assert lines[-1] == (
        "refresh: 2 differential: median 2.2x faster than the full build (from 0.5x to 4.0x), 1 of them faster, "
        "1 more than 1.1x slower (b); 1 in full, in this share of the build's time: c 1.03x"
    )

    # A second refresh: `auto` ran b in full from its history; one column pair per refresh.
    third = {"a": refresh("differential", 1.6, 3), "b": refresh("full", 2.1, 2), "c": refresh("full", 2.9, 6)}
    lines = format_benefit(first, second, third).splitlines()
    assert lines[0].split()[4:10] == ["refresh", "1", "s", "faster", "refresh", "2"]
    assert lines[3].split() == ["b", "2.00", "4.00", "0.5x", "2.10", "(full)", "2"]
    assert lines[-2].endswith("1 more than 1.1x slower (b); 1 in full, in this share of the build's time: c 1.03x")
    assert lines[-1] == (
        "refresh 2: 1 differential: median 5.0x faster than the full build (from 5.0x to 5.0x), 1 of them faster, "
        "0 more than 1.1x slower; 2 in full, in this share of the build's time: b 1.05x, c 0.97x"
    )
