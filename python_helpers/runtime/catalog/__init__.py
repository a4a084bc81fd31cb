"""Catalog objects a refresh creates or reads: views and their ownership, column comments."""
