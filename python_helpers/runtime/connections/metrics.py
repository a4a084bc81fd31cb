"""What a refresh cost Spark: jobs run and rows read by its scans, from Spark's own status API.

Off by default (it waits for Spark's listener to settle and asks its REST API: tens of ms).
DBT_SPARK_STREAM_METRICS=1 turns it on; the benchmark does. The refresh's jobs carry a job tag
(`spark.addTag`, thread-local), so the jobs of other dbt threads are not counted. The REST API
is the application's UI: the local session's (`spark.ui.enabled` must be true), or for Spark
Connect the server's, at DBT_SPARK_STREAM_SPARK_UI (e.g. http://127.0.0.1:4040).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import datetime
from typing import Optional
from urllib.request import urlopen

from python_helpers.runtime.connections.base import Connection

ENABLE = "DBT_SPARK_STREAM_METRICS"
UI_URL = "DBT_SPARK_STREAM_SPARK_UI"


class SparkMeter:
    def __init__(self, conn: Connection):
        self.conn = conn
        self.enabled = bool(os.environ.get(ENABLE))
        self.tag = f"dvm-{uuid.uuid4().hex[:12]}"
        self.first_job: Optional[int] = None  # the first job id this refresh can have started
        # Seconds spent asking the REST API: the model's time includes them, a user's run (no
        # metering) does not, so they are reported (`meter_ms`) for a benchmark to take out.
        # The first request to a fresh application's UI takes about a second.
        self.spent = 0.0
        if self.enabled:
            self.enabled = conn.add_tag(self.tag)  # no job tags in this Spark: no metrics
        if self.enabled:
            try:
                self.first_job = 1 + max((j["jobId"] for j in self._get(f"{self._base()}/jobs")), default=-1)
            except Exception:  # noqa: BLE001 - metrics never fail a refresh
                self.first_job = None

    def finish(self) -> dict:
        if not self.enabled:
            return {}
        self.conn.remove_tag(self.tag)
        try:
            read = self._read()
        except Exception:  # noqa: BLE001 - metrics never fail a refresh
            read = {}
        return {**read, "meter_ms": int(self.spent * 1000)}

    def _ui(self) -> Optional[str]:
        url = os.environ.get(UI_URL)
        if url:
            return url.rstrip("/")
        return self.conn.ui_url()

    def _get(self, url: str):
        started = time.perf_counter()
        try:
            with urlopen(url, timeout=5) as response:
                return json.loads(response.read().decode("utf-8"))
        finally:
            self.spent += time.perf_counter() - started

    def _base(self) -> Optional[str]:
        ui = self._ui()
        if not ui:
            return None
        apps = self._get(f"{ui}/api/v1/applications")
        return f"{ui}/api/v1/applications/{apps[0]['id']}" if apps else None

    def _ours(self, job: dict) -> bool:
        """A job of this refresh: it carries the tag (Spark decorates a session's tags as
        `...-thread-<id>-<tag>`), or it started during the refresh with no tag of ours at all,
        as the jobs Spark starts on its own threads do (collecting a result to Arrow); with
        dbt threads > 1 those may belong to another model's refresh."""
        tags = job.get("jobTags") or []
        if any(t.endswith(self.tag) for t in tags):
            return True
        if self.first_job is None or job.get("jobId", -1) < self.first_job:
            return False
        return not any("dvm-" in t for t in tags)

    def _read(self) -> dict:
        base = self._base()
        if not base:
            return {}
        deadline = time.time() + 2.0
        while True:  # the listener reports a finished job a moment after the action returned
            jobs = [j for j in self._get(f"{base}/jobs") if self._ours(j)]
            if all(j.get("status") in ("SUCCEEDED", "FAILED") for j in jobs) or time.time() > deadline:
                break
            paused = time.perf_counter()
            time.sleep(0.05)
            self.spent += time.perf_counter() - paused
        stages = {s for j in jobs for s in j.get("stageIds", [])}
        read = run_ms = cpu_ns = gc_ms = 0
        for stage in stages:
            for attempt in self._get(f"{base}/stages/{stage}"):
                # Rows, not bytes: the local file system under-reports bytes read by the
                # vectorised Parquet reader, while the records read are exact.
                read += int(attempt.get("inputRecords", 0) or 0)
                run_ms += int(attempt.get("executorRunTime", 0) or 0)
                cpu_ns += int(attempt.get("executorCpuTime", 0) or 0)
                gc_ms += int(attempt.get("jvmGcTime", 0) or 0)
        # Task time summed over tasks (run, CPU, garbage collection): where a refresh's jobs were
        # slow, these tell the executors' work from the driver's and the client's.
        return {
            "spark_jobs": len(jobs),
            "rows_read": read,
            "task_ms": run_ms,
            "task_cpu_ms": cpu_ns // 1_000_000,
            "task_gc_ms": gc_ms,
            "job_ms": sum(_job_ms(j) for j in jobs),
        }


def _job_ms(job: dict) -> int:
    """A job's wall time from its submission to its completion (0 when either is missing)."""
    try:
        started, ended = (
            datetime.strptime(job[k].replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
            for k in ("submissionTime", "completionTime")
        )
    except (KeyError, ValueError, AttributeError):  # missing, malformed or null
        return 0
    return int((ended - started).total_seconds() * 1000)
