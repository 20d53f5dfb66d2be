"""How to install an optional extra, said one way everywhere (the CLI, errors, docs).

trio-claw is not published on a package registry, so ``pip install 'trio-claw[mcp]'``
finds nothing. An extra goes into the checkout's environment with ``make extras``, and
into any other environment from the checkout's folder or a wheel built from it (see
README.md, "Installing extras"; ``tests/test_wheel.py`` runs those commands).
"""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """The sentence that says how to add ``extra`` (``"mcp"``, ``"postgres"``, ...)."""
    return (
        f"install the {extra} extra: in the claw checkout, make extras EXTRAS={extra}; "
        f"elsewhere, pip install '/path/to/claw[{extra}]' or the wheel built from it "
        "(README.md, \"Installing extras\")"
    )
