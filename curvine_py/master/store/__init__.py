"""The master's SQLite store, one module per concern; master/namespace.py composes them."""
