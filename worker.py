"""Start a Rewind worker (the entry point the design names; the code is in rewind/worker/main.py).

    python worker.py [--tool-modules mod1,mod2] [--task-queue Q]      (same as `rewind worker`)
"""

from rewind.worker.main import build_worker, main, model_endpoint, run_worker

__all__ = ["build_worker", "main", "model_endpoint", "run_worker"]

if __name__ == "__main__":
    main()
