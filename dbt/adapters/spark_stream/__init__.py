"""dbt adapter plugin `spark_stream`: dbt-spark plus the `stream_table` materialization.

dbt finds an adapter by importing `dbt.adapters.<type>` and reading `Plugin`; no entry point
is needed. `dependencies=["spark"]` makes dbt load dbt-spark's plugin and macros too, so
macro dispatch searches `spark_stream__`, then `spark__`, then `default__`.
"""

from dbt.adapters.base import AdapterPlugin

from dbt.adapters.spark_stream.connections import (  # noqa: F401
    SparkStreamConnectionManager,
    SparkStreamCredentials,
)
from dbt.adapters.spark_stream.impl import SparkStreamAdapter
from dbt.adapters.spark_stream.package_path import PACKAGE_NAME, find_package_path

Plugin = AdapterPlugin(
    adapter=SparkStreamAdapter,  # type: ignore[arg-type]
    credentials=SparkStreamCredentials,
    include_path=find_package_path(),
    dependencies=["spark"],
    # The default would be derived from the include path's folder name, which for an
    # editable install is the checkout's name; dispatch needs the dbt_project.yml name.
    project_name=PACKAGE_NAME,
)
