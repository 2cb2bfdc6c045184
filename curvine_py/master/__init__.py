"""The master role: durable namespace + block map (namespace.py), worker membership
(membership.py), block placement (placement.py), the gRPC service (service.py) and its process
(main.py)."""
