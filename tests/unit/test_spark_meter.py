"""The Spark metering (DBT_SPARK_STREAM_METRICS) reports what reading Spark's REST API cost it,
so a benchmark can take that out of a model's time (a user's run does not spend it)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from python_helpers.runtime.connections.metrics import ENABLE, SparkMeter

DELAY = 0.2  # each answer of this REST API takes this long


class _Api(BaseHTTPRequestHandler):
    tag = ""

    def do_GET(self):  # noqa: N802 - http.server's name
        time.sleep(DELAY)
        base = "/api/v1/applications"
        if self.path == base:
            body = [{"id": "app-1"}]
        elif self.path == f"{base}/app-1/jobs":
            body = [
                {"jobId": 3, "status": "SUCCEEDED", "stageIds": [7], "jobTags": [f"x-thread-1-{_Api.tag}"]},
                {"jobId": 1, "status": "SUCCEEDED", "stageIds": [2], "jobTags": []},  # before the refresh
            ]
        elif self.path == f"{base}/app-1/stages/7":
            body = [{"inputRecords": 42}]
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _Conn:
    def __init__(self, url):
        self.url = url

    def add_tag(self, tag):
        _Api.tag = tag
        return True

    def remove_tag(self, tag):
        pass

    def ui_url(self):
        return self.url


def test_the_meter_reports_jobs_rows_and_its_own_time(monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv(ENABLE, "1")
        meter = SparkMeter(_Conn(f"http://127.0.0.1:{server.server_port}"))  # 2 requests
        assert meter.first_job == 4
        _Api.tag = meter.tag
        got = meter.finish()  # 3 more: applications, jobs, the job's stage
    finally:
        server.shutdown()
    assert got["spark_jobs"] == 1 and got["rows_read"] == 42
    assert got["meter_ms"] >= 5 * DELAY * 1000
    # Off (the default): nothing asked, nothing reported.
    monkeypatch.delenv(ENABLE)
    assert SparkMeter(_Conn("http://127.0.0.1:9")).finish() == {}
