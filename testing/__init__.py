"""Test support shared by tests/ and e2e/: real databases, servers and browsers."""
