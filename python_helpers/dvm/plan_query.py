"""From a parsed model query to its operator tree: the one order every caller uses.

split the top-level Top-K off -> reject what is out of scope -> qualify columns -> rewrite
(python_helpers.sql.rewrites) -> build the tree (python_helpers.dvm.build).
"""

from __future__ import annotations

from sqlglot import exp

from python_helpers.dvm.build import build_tree
from python_helpers.dvm.tree import Node, Scan, walk
from python_helpers.sql import rewrites
from python_helpers.sql.parse import qualify_query
from python_helpers.sql.support import check_supported
from python_helpers.sql.top_k import TopK, split_top_k


def query_tree(model: str, query: exp.Query, schemas: dict, weights: dict | None = None) -> tuple[Node, TopK | None]:
    """Raises UnsupportedSql (naming the construct) when the query is outside the differential set.
    `weights`: relation -> the column holding each row's multiplicity (upstream bag stream tables)."""
    body, top_k = split_top_k(model, query)
    check_supported(model, body)
    tree = build_tree(model, rewrites.rewrite(model, qualify_query(model, body, schemas)))
    for node in walk(tree):
        if isinstance(node, Scan):
            node.weight_column = (weights or {}).get(node.relation)
    return tree, top_k
