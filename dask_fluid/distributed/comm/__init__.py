"""Bytes between processes: Dask services and RPC, the socket wire, shared-memory payloads."""
