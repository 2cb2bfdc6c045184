"""Operability: Prometheus metrics (metrics.py, rpcmetrics.py, exporter.py) and the master's read-only
status page (statusview.py, statuspage.py, status.py). Nothing here is on a data path's critical
section beyond a counter increment."""
