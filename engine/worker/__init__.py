"""The worker process: the Procrastinate app and its tasks (``queue.py``), the process that runs
them with the runner (``runtime.py``) and worker heartbeats."""
