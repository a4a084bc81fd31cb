"""Where the dbt package (dbt_project.yml + macros/) of this plugin lives.

The package sits at the top of the repository, not inside the Python
package, so two layouts have to be found:

- editable install / source checkout: three folders above this file is the repository root;
- regular install (wheel): setup.py copies the package to `<prefix>/share/dbt_spark_stream`
  as data files, since a wheel cannot ship files from outside its Python packages otherwise.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path

PACKAGE_NAME = "dbt_spark_stream"
DATA_DIR_NAME = "dbt_spark_stream"  # under <prefix>/share, see setup.py data_files


def _is_package_dir(path: Path) -> bool:
    project = path / "dbt_project.yml"
    if not project.is_file():
        return False
    # A checkout may sit inside another dbt project; make sure it is ours.
    return f"name: {PACKAGE_NAME}" in project.read_text(encoding="utf-8")


def _candidates():
    yield Path(__file__).resolve().parents[3]  # repository root of a checkout
    prefixes = {sys.prefix, sys.exec_prefix, sysconfig.get_paths().get("data", sys.prefix)}
    for prefix in prefixes:
        yield Path(prefix) / "share" / DATA_DIR_NAME
    # `pip install --user` puts data files under the user base.
    yield Path(sysconfig.get_config_var("userbase") or os.path.expanduser("~/.local")) / "share" / DATA_DIR_NAME


def find_package_path() -> str:
    """Return the folder holding the dbt package, or raise with what was tried."""
    tried = []
    for candidate in _candidates():
        if _is_package_dir(candidate):
            return str(candidate)
        tried.append(str(candidate))
    raise RuntimeError(
        "dbt-spark-stream: cannot find its dbt package (dbt_project.yml named "
        f"{PACKAGE_NAME}); looked in: {', '.join(tried)}. Reinstall with `pip install -e .` "
        "from the repository or `pip install .`."
    )
