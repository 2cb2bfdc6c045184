"""The storage worker: local store of blocks and KV objects (store.py), eviction of cache-class data
(evictor.py), the framed data-plane server on TCP (server.py) and on a unix socket with fd passing
for short-circuit reads (shortcircuit.py), heartbeats to the master (heartbeat.py), and the
composition root (main.py).
"""
