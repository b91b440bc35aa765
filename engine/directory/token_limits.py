"""How long an API token lives, in days: apart from ``tokens.py`` so that the command line's
parser can name the limits without importing the database layer."""

TOKEN_DEFAULT_DAYS = 90  # a token's life when none is asked for (API, pages, CLI)
TOKEN_MAX_DAYS = 365
