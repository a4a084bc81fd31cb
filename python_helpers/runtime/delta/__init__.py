"""Delta engines: how a refresh reads and writes Delta tables.

`base.DeltaEngine` is the interface; `embedded` reaches Delta with the `deltalake` package in the
dbt process (Spark without Delta Lake), `spark` with Delta Lake's SQL inside Spark. `choose` picks
one for a connection and the profile's `engine`.
"""
