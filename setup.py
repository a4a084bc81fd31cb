import os

from setuptools import find_namespace_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _version():
    # dbt reads the adapter's version from dbt/adapters/<type>/__version__.py; one source of truth.
    about = {}
    with open(os.path.join(HERE, "dbt", "adapters", "spark_stream", "__version__.py")) as f:
        exec(f.read(), about)
    return about["version"]


def dbt_package_data_files():
    """The top-level dbt package (dbt_project.yml + macros/) as data files.

    It lives outside the Python packages, so a regular (non-editable)
    install ships it to <prefix>/share/dbt_spark_stream, where
    dbt/adapters/spark_stream/package_path.py finds it. An editable install reads the
    checkout directly.
    """
    target = os.path.join("share", "dbt_spark_stream")
    files = [(target, ["dbt_project.yml"])]
    for folder, _, names in os.walk(os.path.join(HERE, "macros")):
        sql = sorted(os.path.relpath(os.path.join(folder, n), HERE) for n in names if n.endswith(".sql"))
        if sql:
            files.append((os.path.join(target, os.path.relpath(folder, HERE)), sql))
    return files


setup(
    name="dbt-spark-stream",
    version=_version(),
    description="Stream tables for dbt on Apache Spark and Delta Lake: differential refresh of dbt models",
    python_requires=">=3.10",
    # dbt finds the adapter by importing dbt.adapters.spark_stream (no entry point needed):
    # `dbt` and `dbt.adapters` extend their __path__ over sys.path entries, so the checkout
    # root must be on sys.path. package_dir {"": "."} makes setuptools' editable install a
    # plain .pth entry for the checkout instead of an import hook that extend_path ignores.
    package_dir={"": "."},
    packages=find_namespace_packages(include=["python_helpers", "python_helpers.*", "dbt", "dbt.*"]),
    include_package_data=True,
    data_files=dbt_package_data_files(),
    install_requires=[
        "dbt-core==1.11.16",
        "dbt-spark[session]==1.11.0",
        "pyspark==4.1.4",
        "pandas<3",
        "pyarrow>=15",
        "deltalake>=1.0,<2",
        "sqlglot>=27,<31",
    ],
    extras_require={
        # connect: the Spark Connect client (pyspark's own extra), for profiles with `method: connect`.
        "connect": ["pyspark[connect]==4.1.4"],
        # thrift: dbt-spark's Thrift client, for `method: thrift` (and the Connect client for `connect_url`).
        "thrift": ["dbt-spark[PyHive]==1.11.0", "pyspark[connect]==4.1.4"],
        "dev": [
            # pytest 9.2 keeps a test's id where pytest-xdist 3.8 cannot rename it, so
            # `--dist loadgroup` would split the groups (a module's shared cluster, its dbt project)
            # across workers.
            "pytest>=9,<9.2",
            # make test runs the suite on two workers (pytest -n 2 --dist loadgroup).
            "pytest-xdist==3.8.0",
            # A test that hangs fails with every thread's stack instead of holding CI to its limit.
            "pytest-timeout==2.4.0",
            "hypothesis",
            "duckdb",
            "duckdb-extension-tpch",
            "matplotlib",
            "pyspark[connect]==4.1.4",
            "dbt-spark[PyHive]==1.11.0",
            "ruff==0.17.6",
            # mypy 1.19.1: the last release that accepts dbt-core's pathspec<0.13 (2.x needs pathspec 1.x).
            "mypy==1.19.1",
            # dbt's standard adapter suites (tests/adapter); 1.20.0 installs beside dbt-core 1.11.16.
            "dbt-tests-adapter==1.20.0",
        ],
    },
)
