"""The operators, one `Operator` subclass per node class (base.py), grouped in modules by family.

Importing this package imports every module in it, which registers every operator: a new
operator module needs no line anywhere else to be found.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
