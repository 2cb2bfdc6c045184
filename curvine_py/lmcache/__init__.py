"""LMCache integration (the native plugin): an in-process `RemoteConnector` (connector.py, loaded
with `remote_storage_plugins`) and a multiprocess-mode `native_plugin` L2 connector (native.py).
Both talk the data plane straight to each key's owner worker through curvine_py.client."""
