"""Thin I/O adapters behind the runtime's ports: SQLite and memory stores, gRPC, HTTP, httpx."""
