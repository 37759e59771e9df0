"""Channels and the solver: py-rattler's solve behind one call (rattler_solve), and every download
and repodata read through one rattler client (network)."""
