"""The command line (rewind/ floor 5, the top): the `rewind` console script.

    main.py       the parser and the dispatch; errors as one line, exit codes
    commands/     one module per group of commands (running, branches, checkpoints, ...)
    reference.py  docs/cli.md, generated from the parser

Keeps logic out: every command wraps the client API or checkpoint_bridge, and
may import any room of rewind/ below it; nothing imports it.
"""
