"""Typed errors. Every message names the model, says what is wrong and what to do."""

from __future__ import annotations


class StreamTableError(Exception):
    """Base class: a refresh of one stream table could not be done as asked."""

    def __init__(self, model: str, problem: str, fix: str = ""):
        self.model = model
        self.problem = problem
        self.fix = fix
        text = f"stream table '{model}': {problem}"
        if fix:
            text += f" -- {fix}"
        super().__init__(text)


class SqlParseError(StreamTableError):
    """The model's SQL does not parse as Spark SQL."""


class UnsupportedSql(StreamTableError):
    """The query uses a construct outside the differential set (refresh_mode=differential rejects it)."""

    def __init__(self, model: str, construct: str):
        self.construct = construct
        super().__init__(
            model,
            f"cannot be refreshed differentially: {construct}",
            "use refresh_mode='auto' (refreshes in full) or 'full', or rewrite the query; see docs/supported-sql.md",
        )


class SourceMissing(StreamTableError):
    """A source named in the query is not a Delta table where we look for it."""


class ChangeFeedDisabled(StreamTableError):
    """A source is a Delta table but its change data feed is off."""

    def __init__(self, model: str, relation: str, path: str):
        self.relation = relation
        super().__init__(
            model,
            f"source {relation} (Delta table at {path}) does not have the change data feed enabled",
            f"run: ALTER TABLE {relation} SET TBLPROPERTIES (delta.enableChangeDataFeed = true) "
            "(or with the deltalake package: DeltaTable(path).alter.set_table_properties("
            "{'delta.enableChangeDataFeed': 'true'})); until then refresh_mode='auto' refreshes in full",
        )


class ChangesUnavailable(StreamTableError):
    """The changes since the last refresh can no longer be read (vacuumed, recreated, schema changed)."""


class ConcurrentRefresh(StreamTableError):
    """Another refresh of the same stream table committed while this one ran."""


class PublishLockHeld(StreamTableError):
    """Another process holds a view's publishing lock too long (not retried: it would wait again)."""


class InvalidConfig(StreamTableError):
    """A config value of the model is not one we accept."""


class UniqueKeyViolated(StreamTableError):
    """A refresh would give a key of the model's unique_key a second row (nothing is written)."""


class SourceBehind(StreamTableError):
    """A source is pinned at an older version than the stream table already consumed."""
