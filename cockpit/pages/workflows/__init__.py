"""Workflow pages, one module per page and its fragments (templates in ``templates/pages/workflows/``).

- :mod:`.list`: the list and a new workflow
- :mod:`.detail`: one workflow, enable, disable, delete
- :mod:`.editor`: the definition editor, live validation, the builder's changes, saving;
  :mod:`.editor_text` parses the text and places issues on its lines; :mod:`.builder` reads
  the definition contract for the step builder
- :mod:`.revisions`: revisions, one revision with its diff (:mod:`.diff`), approve, reject,
  publish, roll back

The manual start form is on a workflow's page but belongs to runs (:mod:`cockpit.pages.runs.start`).
Permissions are those of the API: ``realm.workflows.read`` to read, ``realm.workflows.write``
to create, edit and disable, ``realm.workflows.publish`` to approve, reject, publish, roll back,
enable and delete.
"""
