"""A directory that always holds exactly the stored result's live files, as hard links.

The stream table's view reads this fixed directory, so a refresh does not re-create the view
(an ALTER VIEW costs 100-200 ms in the Hive metastore: a schema inference plus a metastore
write) and the view text stays short however many files the table has. Each stored version
gets a generation directory of links; the `current` symlink is swapped to it atomically
(rename), so a reader lists either the old or the new set of files, never a mix. A few older
generations are kept for readers that listed them just before the swap.

Where links cannot be made (remote storage, another filesystem), `publish` returns None and the
caller names the files in the view instead.
"""
from __future__ import annotations

import os
import shutil
import uuid
from typing import Optional

PUBLISHED_DIR = "__dvm_published"
KEEP_GENERATIONS = 3


def published_root(target: str) -> str:
    return os.path.join(os.path.dirname(target.rstrip("/")), PUBLISHED_DIR, os.path.basename(target.rstrip("/")))


def _generation(name: str) -> Optional[int]:
    return int(name[1:]) if name.startswith("g") and name[1:].isdigit() else None


def current_generation(root: str) -> Optional[int]:
    link = os.path.join(root, "current")
    return _generation(os.readlink(link)) if os.path.islink(link) else None


def publish(target: str, table_id: str, version: int, files: list) -> Optional[str]:
    """Make `<root>/current` list exactly `files` (the stored table at `version`); returns that
    path, or None when it cannot be done here. Never moves `current` back to an older version
    (a slower refresh publishing after a newer one) of the same Delta table (`table_id`)."""
    if "://" in target or not files or any("://" in f for f in files):
        return None
    root = published_root(target)
    current = os.path.join(root, "current")
    marker = os.path.join(root, f".table-{table_id}")
    try:
        if os.path.isdir(root) and not os.path.exists(marker):
            shutil.rmtree(root)  # links of an earlier table at this path (its versions restarted)
        os.makedirs(root, exist_ok=True)
        open(marker, "a").close()
        live = current_generation(root)
        if live is not None and live >= version:
            return current if live == version else None
        gen = os.path.join(root, f"g{version}")
        if not os.path.isdir(gen):
            staging = os.path.join(root, f".staging-{uuid.uuid4().hex}")
            os.makedirs(staging)
            for f in files:
                os.link(f, os.path.join(staging, os.path.basename(f)))
            try:
                os.rename(staging, gen)
            except OSError:  # another process published this version first
                shutil.rmtree(staging, ignore_errors=True)
        swap = os.path.join(root, f".current-{uuid.uuid4().hex}")
        os.symlink(os.path.basename(gen), swap)
        os.replace(swap, current)
    except OSError:
        return None
    _prune(root)
    return current


def _prune(root: str) -> None:
    gens = sorted((g, n) for n in os.listdir(root) if (g := _generation(n)) is not None)
    for _, name in gens[:-KEEP_GENERATIONS]:
        shutil.rmtree(os.path.join(root, name), ignore_errors=True)
