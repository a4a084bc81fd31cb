"""A Spark Connect server (optionally on a local standalone cluster) started from the installed
pyspark package: no download. Used by the benchmark (`--spark connect`) and the cluster tests.

    server = ConnectServer(work_dir, warehouse=...).start()   # sc://127.0.0.1:<port>
    ...
    server.stop()                                               # by process id

With `thrift=True` the application is a Spark Thrift server (HiveThriftServer2, on
`thrift_port`) that also loads the Spark Connect plugin: the set-up a `method: thrift` profile
with `connect_url` needs.

Everything it starts gets free ports and is stopped by its process id.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from typing import Optional


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, what: str, log: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited ({proc.returncode}); see {log}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout:.0f}s; see {log}")


class ConnectServer:
    def __init__(
        self,
        work: str,
        warehouse: str,
        memory: str = "4g",
        cluster: bool = False,
        cores: int = 2,
        extra_conf: Optional[dict] = None,
        thrift: bool = False,
    ):
        self.work, self.warehouse, self.memory, self.cluster, self.cores = work, warehouse, memory, cluster, cores
        self.extra_conf = dict(extra_conf or {})
        self.thrift = thrift
        self.thrift_port = free_port() if thrift else None
        self.procs: list = []
        self.port = free_port()
        self.ui_port = free_port()
        self.master = "local[2]"

    @property
    def remote(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://127.0.0.1:{self.ui_port}"

    def _spawn(self, args: list, name: str) -> subprocess.Popen:
        os.makedirs(self.work, exist_ok=True)
        log = open(os.path.join(self.work, f"{name}.log"), "w")
        env = {
            **os.environ,
            "SPARK_HOME": spark_home(),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOG_DIR": self.work,
            "SPARK_WORKER_DIR": os.path.join(self.work, "worker"),
        }
        env.pop("SPARK_REMOTE", None)
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.work)
        self.procs.append(proc)
        return proc

    def start(self) -> "ConnectServer":
        home = spark_home()
        if self.cluster:
            master_port, master_ui = free_port(), free_port()
            master = self._spawn(
                [
                    os.path.join(home, "bin", "spark-class"),
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(master_port),
                    "--webui-port",
                    str(master_ui),
                ],
                "master",
            )
            _wait_port(master_port, master, "the standalone master", os.path.join(self.work, "master.log"))
            self.master = f"spark://127.0.0.1:{master_port}"
            worker = self._spawn(
                [
                    os.path.join(home, "bin", "spark-class"),
                    "org.apache.spark.deploy.worker.Worker",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    str(free_port()),
                    self.master,
                ],
                "worker",
            )
            time.sleep(2)
            if worker.poll() is not None:
                raise RuntimeError(f"the standalone worker exited; see {self.work}/worker.log")
        metastore = os.path.join(self.work, "metastore_db")
        conf = {
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.ui.port": str(self.ui_port),
            "spark.sql.catalogImplementation": "hive",
            "spark.sql.warehouse.dir": self.warehouse,
            "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={metastore};create=true",
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={self.work}",
            "spark.driver.memory": self.memory,
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.session.timeZone": "UTC",
            **self.extra_conf,
        }
        if self.cluster:
            conf["spark.executor.memory"] = self.memory
        if self.thrift:
            main_class = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
            conf["spark.plugins"] = "org.apache.spark.sql.connect.SparkConnectPlugin"
        else:
            main_class = "org.apache.spark.sql.connect.service.SparkConnectServer"
        args = [os.path.join(home, "bin", "spark-submit"), "--class", main_class, "--master", self.master]
        for k, v in conf.items():
            args += ["--conf", f"{k}={v}"]
        if self.thrift:
            args += [
                "--hiveconf",
                f"hive.server2.thrift.port={self.thrift_port}",
                "--hiveconf",
                "hive.server2.thrift.bind.host=127.0.0.1",
            ]
        args.append("spark-internal")
        name = "thrift" if self.thrift else "connect"
        server = self._spawn(args, name)
        log = os.path.join(self.work, f"{name}.log")
        _wait_port(self.port, server, "the Spark Connect server", log, timeout=180)
        if self.thrift_port is not None:  # set exactly when self.thrift
            _wait_port(self.thrift_port, server, "the Spark Thrift server", log, timeout=180)
        return self

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        self.procs.clear()


def main(argv=None) -> int:
    """Start a standalone master, a worker and a Spark Connect server; print the URL; wait."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default="/tmp/dbt-spark-stream", help="logs, metastore and (default) warehouse")
    parser.add_argument("--warehouse", default=None, help="spark.sql.warehouse.dir (default <work>/warehouse)")
    parser.add_argument("--memory", default="2g")
    args = parser.parse_args(argv)
    warehouse = args.warehouse or os.path.join(args.work, "warehouse")
    server = ConnectServer(os.path.join(args.work, "server"), warehouse=warehouse, memory=args.memory, cluster=True)
    import signal

    def _stop(signum, frame):  # a background job gets SIGTERM, not Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _stop)
    server.start()
    print(
        f"Spark Connect at {server.remote} (master {server.master}); logs in {server.work}; Ctrl-C stops it", flush=True
    )
    try:
        while all(p.poll() is None for p in server.procs):
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
