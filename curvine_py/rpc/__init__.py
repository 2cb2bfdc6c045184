"""Control-plane plumbing shared by master, worker, clients: gRPC errors, auth, conversions."""
