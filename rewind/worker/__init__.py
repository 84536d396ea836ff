"""The worker process (rewind/ floor 3): `rewind worker`, `python -m rewind.worker`, worker.py.

    main.py            build and run a worker: registries, stores, model endpoint, health
    args.py            its command-line options and the settings they override
    pool.py            `--processes N`: N worker processes supervised as one
    startup.py         a starting worker waits for Temporal and its stores to come up
    health.py          `rewind health`: is the worker on this machine polling Temporal?
    scripted_model.py  the offline model a worker serves when no OPENAI_API_KEY is set
    scripted_stream.py how it streams an answer: each dialect's chunks, at a pace

Imports the client API (rewind/ top level), rewind/temporal/ and
rewind/settings/; the local stack and the CLI (above) start workers.
"""
