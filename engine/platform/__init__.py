"""The platform under every domain: settings, database access, migrations, ids, secrets, errors,
logging, names and pagination. It imports no domain package."""
