"""Start a Rewind worker (the entry point the design names; the code is in rewind/worker.py).

    python worker.py [--tool-modules mod1,mod2] [--task-queue Q]      (same as `rewind worker`)
"""

from rewind.worker import build_worker, main, model_endpoint, run_worker

__all__ = ["build_worker", "main", "model_endpoint", "run_worker"]

if __name__ == "__main__":
    main()
