"""Pure core: knowledge, models and decisions. No I/O, no subprocess, no os.environ, no click."""
