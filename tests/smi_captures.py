"""The real nvidia-smi captures in fixtures/nvidia-smi/extracted, as the tests read them (the
host-probe tests and the variant choice on recorded hosts)."""

from __future__ import annotations


def strip_command_line(text: str) -> str:
    """extracted/ files start with a `# $ <command>` line that nvidia-smi did not print."""
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith("# $ "))
