"""The local stack (rewind/ floor 4): everything on one machine, for users and tests.

    stack.py    the dev server, the offline model and a worker in one process
    dev.py      `rewind dev`: the dev server and a worker for your tools, in the foreground
    dev_worker.py  the worker of `rewind dev`: one child process, its output, its stop
    reload.py   what `rewind dev` watches (your tools' files) and the changes it sees
    demo.py     `rewind demo`: the stack and the research agent, with live progress
    servers.py  throw-away PostgreSQL and Redis servers for tests and benchmarks
    testing.py  subprocess helpers shared by the test-suite and the benchmarks

Imports the worker, the client API, rewind/temporal/ and rewind/settings/
(below); only the CLI (above) imports it.
"""
