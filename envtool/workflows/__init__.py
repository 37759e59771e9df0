"""Workflows: the multi-step work several commands run (lock an environment, lock its variants,
plan an install with its host check, remove a prefix or finish an interrupted removal).

Between the layers: commands -> workflows -> adapters -> core. A workflow may import adapters and
the core, never a command; adapters and the core never import a workflow.
"""
