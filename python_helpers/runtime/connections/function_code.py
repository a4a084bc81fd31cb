"""A digest of a user function's code, for the in-process session (the only binding whose JVM
the dbt process can ask): recorded with every refresh, so a deploy that changes a deterministic
UDF's code rebuilds the stream tables that call it (runtime/refresh/settings.py).

* A Python UDF: its pickled command, loaded back, digested by its code objects (bytecode,
  constants, names, nested functions, closures, and the globals its code names: helper
  functions and constants), so re-registering the same code in another process gives the same
  digest; the pickled bytes themselves if they do not load. Not seen: code inside a module it
  imports (a library's), and objects' state other than their type.
* A JVM function (a Hive class, a Scala/Java UDF): the class's bytecode and the jar it comes
  from (its location and size); for a lambda (a hidden class, whose name changes from run to run)
  the jar alone. A Java/Scala UDF registered through Spark's API is wrapped in Spark's own
  lambda, so its digest is Spark's jar: a deploy of the user's jar is not seen (documented).

Spark's built-in functions have none. Over Spark Connect and Thrift user functions are not
classified at all (SQL cannot tell whether one is deterministic): those models refresh in full.
"""

from __future__ import annotations

import functools
import hashlib
import types
from typing import Any, Optional

_MAX_DEPTH = 6


def python_digest(command: bytes) -> str:
    """The digest of a Python UDF from the command Spark holds (cloudpickled function and type)."""
    try:
        from pyspark.serializers import CloudPickleSerializer

        loaded = CloudPickleSerializer().loads(command)
    except Exception:  # noqa: BLE001 - not loadable here: the bytes themselves
        return "python-bytes:" + hashlib.md5(command).hexdigest()
    if type(loaded).__name__ == "Broadcast":
        return "unknown"  # a command over Spark's broadcast threshold (1 MB) holds only a reference
    return "python:" + hashlib.md5(_describe(loaded, 0, set()).encode()).hexdigest()


def _describe(value: Any, depth: int, seen: set) -> str:
    """What a value contributes to a function's behaviour, stably across processes (`seen`: the
    functions described already, so helpers that call each other are described once)."""
    if depth > _MAX_DEPTH:
        return "..."
    if isinstance(value, types.CodeType):
        consts = ",".join(_describe(c, depth + 1, seen) for c in value.co_consts)
        return f"code({value.co_code.hex()};{consts};{','.join(value.co_names)})"
    if isinstance(value, (types.FunctionType, types.LambdaType)):
        if id(value) in seen:
            return f"fn:{value.__qualname__}"
        seen.add(id(value))
        closure = ",".join(_describe(c.cell_contents, depth + 1, seen) for c in (value.__closure__ or ()) if _filled(c))
        defaults = ",".join(_describe(d, depth + 1, seen) for d in (value.__defaults__ or ()))
        # The globals its code names (nested code too): a helper or a constant changed in a deploy.
        names = sorted(_names(value.__code__))
        used = ",".join(
            f"{n}={_describe(value.__globals__[n], depth + 1, seen)}" for n in names if n in value.__globals__
        )
        return f"fn({_describe(value.__code__, depth + 1, seen)};{closure};{defaults};{used})"
    if isinstance(value, (tuple, list)):
        return "[" + ",".join(_describe(v, depth + 1, seen) for v in value) + "]"
    if isinstance(value, functools.partial):
        func, args = _describe(value.func, depth + 1, seen), _describe(list(value.args), depth + 1, seen)
        return f"partial({func};{args})"
    if callable(getattr(value, "__wrapped__", None)):
        return _describe(value.__wrapped__, depth + 1, seen)
    if isinstance(value, (set, frozenset)):
        return "{" + ",".join(sorted(_describe(v, depth + 1, seen) for v in value)) + "}"
    if isinstance(value, dict):
        items = sorted(f"{_describe(k, depth + 1, seen)}:{_describe(v, depth + 1, seen)}" for k, v in value.items())
        return "dict(" + ",".join(items) + ")"
    if isinstance(value, types.ModuleType):
        return f"module({value.__name__})"
    if isinstance(value, (str, int, float, bool, bytes, type(None))):
        return repr(value)
    if hasattr(value, "simpleString"):  # a Spark DataType (the UDF's return type)
        return f"type({value.simpleString()})"
    return type(value).__qualname__  # an object's identity is not its behaviour; its type is


def _names(code: types.CodeType) -> set:
    """The global names a code object and the code nested in it (comprehensions, lambdas) use."""
    out = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out |= _names(const)
    return out


def _filled(cell) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def jvm_class_digest(jvm: Any, cls: Any) -> str:
    """The digest of a JVM class's code: its bytecode when it is an ordinary class, and the
    location and size of the jar (or directory) it was loaded from."""
    parts = []
    name = str(cls.getName())
    if "$$Lambda" not in name and "/0x" not in name:
        parts.append(name)
        try:
            stream = cls.getResourceAsStream("/" + name.replace(".", "/") + ".class")
            if stream is not None:
                try:
                    parts.append(hashlib.md5(bytes(stream.readAllBytes())).hexdigest())
                finally:
                    stream.close()
        except Exception:  # noqa: BLE001 - no class file to read: the jar says the rest
            pass
    try:
        location = cls.getProtectionDomain().getCodeSource().getLocation()
        parts.append(str(location.toString()))
        parts.append(str(jvm.java.io.File(location.toURI()).length()))
    except Exception:  # noqa: BLE001 - a class defined at run time has no code source
        pass
    return "jvm:" + hashlib.md5("|".join(parts).encode()).hexdigest()


def jvm_class_by_name(jvm: Any, class_name: str) -> Optional[Any]:
    """A class as the session loads user functions (jars added with ADD JAR included)."""
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        return jvm.java.lang.Class.forName(class_name, False, loader)
    except Exception:  # noqa: BLE001
        return None
