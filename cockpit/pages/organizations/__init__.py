"""Organization pages, one module per page and its fragments (templates in ``templates/pages/organizations/``).

- :mod:`.list`: the organizations of the realm, a new organization (``list.html``, ``_table.html``)
- :mod:`.detail`: one organization, its members and groups (``detail.html``, ``_members.html``)
- :mod:`.group`: one group, its members and roles (``group.html``, ``_group_members.html``)

Members and group members are live components: their add and remove forms post with htmx and
the component (``#org-members``, ``#group-members``) swaps itself, errors included; without
JavaScript the same forms are plain POSTs answered with a redirect, or with the whole page and
its errors. HTML forms cannot send DELETE, so removals are ``POST …/remove``. Permissions are
those of the API, checked in the organization of the URL: ``realm.organizations.read`` to
read, ``org.members.write`` and ``org.groups.write`` to change members and groups,
``realm.organizations.write`` to create, rename or deactivate an organization.
"""
