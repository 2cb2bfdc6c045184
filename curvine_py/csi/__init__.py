"""Kubernetes CSI driver: `curvine-py csi` (Identity, Controller and Node on one unix socket).

Modules: errors (CurvineError -> CSI status, the one table, and the handler decorator),
volumes (parameters, capabilities, ids and the on-master volume record: pure values), quota (the
one place that calls the master's directory quotas), identity, controller, node (one per CSI
service), mounts (the FUSE mount processes of staged volumes: start, stop, adopt), bindmounts
(mount(2)/umount(2) for bind mounts), nodestate (what is staged and published, kept on the node),
recovery (the watcher that remounts dead mounts), driver (the one driver object), server (the
unix-socket gRPC server and its logging interceptor), main (the composition root).
`curvine-py csi` never imports pyfuse3: mounts run as separate `curvine-py mount` processes.
"""
