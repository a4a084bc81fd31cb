"""Locations: storage URIs stay URIs (one-slash Hadoop forms included), local paths stay local."""

from __future__ import annotations

import os

import pytest

from python_helpers.runtime import paths


@pytest.mark.parametrize(
    "location",
    ["s3a://bucket/lake/t", "abfss://c@acct.dfs.core.windows.net/t", "hdfs:/warehouse/t", "dbfs:/mnt/lake/t"],
)
def test_a_storage_uri_is_never_made_a_local_path(location):
    assert paths.is_uri(location)
    assert paths.normalize(location + "/") == location
    assert paths.join(location, "_delta_log") == location + "/_delta_log"
    assert paths.dirname(location + "/x") == location


@pytest.mark.parametrize("location", ["/tmp/lake/t", "lake/t", "file:/tmp/lake/t", "file:///tmp/lake/t"])
def test_a_local_path_is_absolute_and_plain(location):
    assert not paths.is_uri(location)
    assert paths.normalize(location) == os.path.abspath(location.replace("file://", "").replace("file:", ""))


def test_delta_rs_gets_its_own_scheme_for_s3a():
    assert paths.for_delta_rs("s3a://b/t") == "s3://b/t"
    assert paths.for_delta_rs("hdfs:/warehouse/t") == "hdfs:/warehouse/t"
