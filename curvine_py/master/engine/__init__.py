"""The metadata engine boundary: which database holds the master's namespace (engine/url.py parses
`--meta`), opening it (engine/open.py), and moving a namespace between databases (engine/dumpfile.py,
engine/transfer.py)."""
