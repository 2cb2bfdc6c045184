"""Kubernetes CSI driver: `curvine-py csi` (Identity, Controller and Node on one unix socket).

Modules, one job each:
- errors: CurvineError -> CSI status (the one table) and the decorator every handler wears;
- volumes: StorageClass parameters, capacity ranges, capabilities, volume ids, the volume record
  (pure values); catalog: the volumes on the master (records on directories, the id index);
  quota: the one place that sets quotas and reads free space;
- identity, controller, node: one module per CSI service;
- mounts (the FUSE mount processes of staged volumes), bindmounts (mount(2)/umount2(2)),
  nodestate (what is staged and published, kept on the node), recovery (the watcher that remounts
  dead mounts and adopts live ones), locks (one lock per volume);
- driver_settings, driver (the one driver object), server (the unix-socket gRPC server and its
  logging interceptor), main (the composition root).
`curvine-py csi` never imports pyfuse3: mounts run as separate `curvine-py mount` processes.
"""
