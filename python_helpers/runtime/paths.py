"""Locations of Delta tables and files: local paths and storage URIs, kept apart.

A local path stays a local path (absolute); a URI (`s3a://`, `abfss://`, `gs://`, ...) stays a
URI from the profile to Spark, never turned into a local path. Three readers speak about the
same files:

* Spark (Hadoop file systems): local paths or the URI as the user wrote it (`s3a://`);
* delta-rs: `s3://` where Hadoop says `s3a://` (it knows no `s3a`), local paths plain;
* Hadoop's glob syntax: every path handed to `spark.read...parquet(...)` is a glob pattern,
  so `{ } [ ] * ? \\` in a file name must be escaped.
"""

from __future__ import annotations

import os
import posixpath
import re
from urllib.parse import unquote, urlparse

# Hadoop scheme -> the scheme delta-rs (object_store) uses for the same store.
_DELTA_RS_SCHEMES = {"s3a": "s3", "s3n": "s3"}
_GLOB_SPECIAL = "\\{}[]*?"


# A scheme of two or more letters: `s3a://b/t`, and Hadoop's one-slash forms `hdfs:/t`, `dbfs:/mnt/t`.
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")


def is_uri(path: str) -> bool:
    """A remote storage URI (anything with a scheme but `file:`)."""
    return bool(_SCHEME.match(path)) and not path.lower().startswith("file:")


def local(path: str) -> str:
    """A `file:` URI as a local path; local paths and remote URIs unchanged."""
    if path.startswith("file:"):
        return unquote(urlparse(path).path)
    return path


def normalize(path: str) -> str:
    """A table location as the project keeps it: local paths absolute, URIs as given."""
    path = local(path)
    return path.rstrip("/") if is_uri(path) else os.path.abspath(path)


def join(base: str, *parts: str) -> str:
    if is_uri(base):
        return posixpath.join(base.rstrip("/"), *parts)
    return os.path.join(base, *parts)


def dirname(path: str) -> str:
    return posixpath.dirname(path.rstrip("/")) if is_uri(path) else os.path.dirname(path.rstrip(os.sep))


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_uri(path) else os.path.basename(path.rstrip(os.sep))


def relative(path: str, root: str) -> str:
    if is_uri(path):
        return path[len(root.rstrip("/")) + 1 :] if path.startswith(root.rstrip("/") + "/") else path
    return os.path.relpath(path, root)


def for_delta_rs(path: str) -> str:
    """The location as delta-rs wants it (`s3a://b/t` -> `s3://b/t`)."""
    path = local(path)
    if is_uri(path) and "://" in path:
        scheme, rest = path.split("://", 1)
        return f"{_DELTA_RS_SCHEMES.get(scheme.lower(), scheme)}://{rest}"
    return path


def from_delta_rs(file_uri: str) -> str:
    """A file location as delta-rs reports it: local ones are percent-encoded (`a%20b`), with or
    without a `file:` scheme."""
    if file_uri.startswith("file:"):
        return local(file_uri)
    if file_uri.startswith("/"):
        return unquote(file_uri)
    return file_uri


def for_spark(file_uri: str, table_path: str) -> str:
    """A file URI from delta-rs as Spark should read it: local, or in the table path's scheme."""
    path = from_delta_rs(file_uri)
    if is_uri(path) and is_uri(table_path):
        scheme = table_path.split("://", 1)[0]
        return f"{scheme}://{path.split('://', 1)[1]}"
    return path


def glob_escaped(path: str) -> str:
    """`path` as a Hadoop glob pattern matching exactly that path."""
    return "".join("\\" + ch if ch in _GLOB_SPECIAL else ch for ch in path)


def spark_glob_path(file_uri: str, table_path: str) -> str:
    return glob_escaped(for_spark(file_uri, table_path))


def _filesystem(uri: str):
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(for_delta_rs(uri))


def read_text(path: str) -> str:
    """A small file's text (local or remote); FileNotFoundError when it is not there."""
    if not is_uri(path):
        with open(local(path), "r", encoding="utf-8") as handle:
            return handle.read()
    fs, inner = _filesystem(path)
    with fs.open_input_stream(inner) as handle:
        return handle.read().decode("utf-8")


def write_text_atomic(path: str, text: str) -> None:
    """Replace a small file in one step: readers see the old text or the new, never a part."""
    if not is_uri(path):
        import uuid

        path = local(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = os.path.join(os.path.dirname(path), f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
        return
    fs, inner = _filesystem(path)  # an object store's put is atomic
    with fs.open_output_stream(inner) as handle:
        handle.write(text.encode("utf-8"))


def list_directories(root: str) -> list:
    """Names of the directories directly under `root` (local or remote), sorted; none when it is
    missing. Hidden ones (`.name`) are left out."""
    if is_uri(root):
        import pyarrow.fs as pafs

        fs, inner = _filesystem(root)
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
        return sorted(
            i.base_name for i in infos if i.type == pafs.FileType.Directory and not i.base_name.startswith(".")
        )
    root = local(root)
    if not os.path.isdir(root):
        return []
    return sorted(n for n in os.listdir(root) if os.path.isdir(os.path.join(root, n)) and not n.startswith("."))
