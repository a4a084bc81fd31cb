"""The code digest of a Python UDF (connections/function_code.py): the same code gives the same
digest however often it is pickled and registered; other code, constants or closure values give
another."""

from __future__ import annotations

from pyspark.serializers import CloudPickleSerializer
from pyspark.sql.types import IntegerType, LongType

from python_helpers.runtime.connections.function_code import python_digest


def _command(func, return_type=None) -> bytes:
    # what Spark holds for a Python UDF: the cloudpickled function and its return type
    return CloudPickleSerializer().dumps((func, return_type or IntegerType()))


def _scale(factor: int):
    def scale(x):
        return None if x is None else x * factor

    return scale


def test_the_same_code_registered_twice_has_one_digest():
    assert python_digest(_command(_scale(2))) == python_digest(_command(_scale(2)))
    assert python_digest(_command(lambda x: x + 1)) == python_digest(_command(lambda x: x + 1))


def test_other_code_constants_closures_or_types_have_another_digest():
    base = python_digest(_command(_scale(2)))
    assert python_digest(_command(_scale(3))) != base  # a closure value
    assert python_digest(_command(_scale(2), LongType())) != base  # the return type
    assert python_digest(_command(lambda x: x + 1)) != python_digest(_command(lambda x: x + 2))  # a constant
    assert python_digest(_command(lambda x: x + 1)) != python_digest(_command(lambda x: x - 1))  # the bytecode


def test_bytes_that_do_not_load_are_digested_as_they_are():
    assert python_digest(b"not a pickle").startswith("python-bytes:")


def test_a_changed_helper_or_global_constant_has_another_digest():
    source = "def udf(x):\n    return helper(x) * FACTOR\n"

    def compiled(helper_body: str, factor: int):
        namespace: dict = {"FACTOR": factor}
        exec(f"def helper(x):\n    return {helper_body}\n" + source, namespace)
        return namespace["udf"]

    base = python_digest(_command(compiled("x + 1", 2)))
    assert python_digest(_command(compiled("x + 1", 2))) == base
    assert python_digest(_command(compiled("x + 2", 2))) != base  # the helper changed
    assert python_digest(_command(compiled("x + 1", 3))) != base  # the constant changed


def test_set_constants_and_globals_used_in_nested_code_count():
    assert python_digest(_command(lambda x: x in {"a", "b"})) != python_digest(_command(lambda x: x in {"a", "c"}))

    def compiled(factor: int):
        namespace: dict = {"FACTOR": factor}
        exec("def udf(xs):\n    return [x * FACTOR for x in xs]\n", namespace)
        return namespace["udf"]

    assert python_digest(_command(compiled(2))) != python_digest(_command(compiled(3)))
