"""One module per verb. Each exposes a click command `cmd`; cli.py loads them lazily."""
