"""Connections: how a refresh talks to Spark.

`base.Connection` is the interface (run a statement, read rows or Arrow, analyse a query, bind a
temporary view, read settings and the catalog, classify a function); `spark.SparkConnection`
binds it to a SparkSession in the dbt process or over Spark Connect, `thrift.ThriftConnection` to
a Spark Thrift server in SQL only.
"""
