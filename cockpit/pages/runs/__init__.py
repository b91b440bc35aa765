"""Run pages, one module per page and its fragments (templates in ``templates/pages/runs/``).

- :mod:`.list`: the runs of the realm or of one workflow, with their filters
- :mod:`.bulk`: cancelling or re-running many runs from the list, a chunk at a time
- :mod:`.detail`: one run's timeline, its poll fragment, cancel, re-run, retry now;
  :mod:`.timeline` builds what the timeline shows
- :mod:`.start`: starting a run by hand (the form on a workflow's page)

Permissions are those of the API: ``realm.workflows.read`` to read, ``realm.workflows.run`` to
start and cancel.
"""
