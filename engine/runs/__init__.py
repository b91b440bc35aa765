"""The run-time: starting and cancelling runs, the runner, the run store, the fast path, step types
(``steps/``), run and attempt states with their transitions (``states.py``) and retry backoff."""
