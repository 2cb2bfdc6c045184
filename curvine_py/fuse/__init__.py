"""FUSE mount of the curvine namespace (pyfuse3 on trio): `curvine-py mount`.

Modules: options (flags -> MountOptions and FUSE mount options), errors (the one error boundary),
offload (blocking client calls in threads, with deadlines), attrs (Attr -> EntryAttributes),
state (lookup counts, open files, handles), filesystem (the semantics, in master inode numbers, wiring
context, session, nodes, handles, setattrs, readdir and xattrs), operations (thin pyfuse3.Operations), mountpoint (stale mounts, read-ahead), main (composition root).
"""
