"""sha256 of a Python file and of every module of the account_tax package it imports, directly
or through other modules: what decides whether a result made by that code is still current."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

PACKAGE = Path(__file__).parent


def imported_package_files(path: Path) -> list[Path]:
    """The file and the package modules it reaches through imports, sorted."""
    pending, seen = [path], set()
    while pending:
        path = pending.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_bytes())):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for module in modules:
                if module.split(".")[0] == "account_tax":
                    parts = module.split(".")[1:]
                    pending.append(
                        PACKAGE.joinpath(*parts).with_suffix(".py")
                        if parts
                        else PACKAGE / "__init__.py"
                    )
    return sorted(seen)


def code_sha256(path: Path) -> str:
    """The files are named by their place in the package (the script by its name), so the hash
    does not depend on where the repository or the package lies."""
    named = {
        (file.relative_to(PACKAGE).as_posix() if file.is_relative_to(PACKAGE) else file.name): file
        for file in imported_package_files(path)
    }
    digest = hashlib.sha256()
    for name, file in sorted(named.items()):
        for part in (name.encode(), b"\0", file.read_bytes()):
            digest.update(part)
    return digest.hexdigest()
