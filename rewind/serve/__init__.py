"""`rewind serve`: Rewind's one HTTP face (docs/streaming.md).

Rewind's own routes (runs: list, start, status, approve, reject, fork), a run's events as
server-sent events, the live page of a run, the OpenAPI document and its page, behind
REWIND_API_KEY. Built on Starlette, uvicorn and sse-starlette, over the client API
(rewind/client.py, rewind/starting.py, rewind/watching.py): nothing here talks to Temporal
or a store but through it.

Its modules, one role each:

    server.py     binding the address, running uvicorn, stopping on Ctrl-C
    app.py        the app: the groups of routes, the body checks, the error answers
    routes.py     routes as data: Endpoint, Group, Param, Answer (what app.py and docs.py read)
    runs.py       a group: GET/POST /runs, GET /runs/{run}, approve, reject, fork
    stream.py     a group: GET /runs/{run}/events (server-sent events)
    page.py       a group: the live page (the viewer's page, drawn again as events come)
    docs.py       a group: /openapi.json and /docs
    auth.py       REWIND_API_KEY, loopback-only without it
    backends.py   what requests share: the settings, the Temporal client, the checkpoint store
    errors.py     every error as {"error": "one line"} with its status

    agent/        a group: LangGraph's Agent Server API under /langgraph (docs/agent-server.md)

A new group of routes is a module with a GROUP and one line in app.GROUPS.
"""
