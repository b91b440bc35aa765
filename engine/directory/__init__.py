"""The directory: realms, users and service principals, organizations, groups, roles and their
assignments, tokens, sign-in, webhook subscriptions, realm policy, notice templates, authorization
and the audit trail with its outbox. It imports neither ``engine.workflows`` nor ``engine.runs``."""
