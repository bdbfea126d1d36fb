"""The field types every schema uses, each checked one way (issue 33 item 2).

Each type is ``Annotated[T, BeforeValidator(check)]`` over a plain check of :mod:`labwright.schema.checks` (also
importable from here): it takes what the user wrote (a string from an inventory or ``--data``, a number, a bool),
returns the typed value, or raises ``ValueError`` with one line that names the value and how to fix it; the key is
added by :func:`labwright.schema.model.error_line`. A checked value checks again to itself.

This module imports pydantic: import it inside the function that parses data, never at a CLI module's top (a module
imported at start-up uses :mod:`labwright.schema.checks`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator

from labwright.schema.checks import (
    KERNEL_DIRS,
    MAX_DURATION,
    SYSTEM_DIRS,
    USER_NAME,
    abs_path,
    debian_packages,
    duration,
    flag,
    host_problem,
    key_file,
    line,
    listen_address,
    managed_dir,
    one_of,
    or_empty,
    package_name,
    port,
    secret,
    size,
    strict_bool,
    url,
    user_name,
    version,
    whole,
)

__all__ = [
    "KERNEL_DIRS",
    "MAX_DURATION",
    "SYSTEM_DIRS",
    "USER_NAME",
    "AbsPath",
    "Duration",
    "Flag",
    "KeyFile",
    "Line",
    "ListenAddress",
    "ManagedDir",
    "PackageName",
    "Packages",
    "Port",
    "Secret",
    "Size",
    "StrictBool",
    "Url",
    "UserName",
    "Version",
    "abs_path",
    "duration",
    "flag",
    "host_problem",
    "line",
    "listen_address",
    "managed_dir",
    "one_of",
    "or_empty",
    "package_name",
    "port",
    "secret",
    "size",
    "strict_bool",
    "url",
    "user_name",
    "version",
    "whole",
]

Url = Annotated[str, BeforeValidator(url)]
ListenAddress = Annotated[str, BeforeValidator(listen_address)]
Port = Annotated[int, BeforeValidator(port)]
AbsPath = Annotated[str, BeforeValidator(abs_path)]
ManagedDir = Annotated[str, BeforeValidator(managed_dir)]
KeyFile = Annotated[str, BeforeValidator(key_file)]
UserName = Annotated[str, BeforeValidator(user_name)]
Size = Annotated[int, BeforeValidator(size)]
Duration = Annotated[float, BeforeValidator(duration)]
Version = Annotated[str, BeforeValidator(version)]
PackageName = Annotated[str, BeforeValidator(package_name)]
#: Debian package names (a list, or ``a,b c`` from --data): every ``*_packages`` key
Packages = Annotated[list[str], BeforeValidator(debian_packages)]
Secret = Annotated[str, BeforeValidator(secret)]
StrictBool = Annotated[bool, BeforeValidator(strict_bool)]
Line = Annotated[str, BeforeValidator(line)]
#: An on/off deploy data key read as before (yes/no, on/off, 1/0 too); new inputs use StrictBool.
Flag = Annotated[bool, BeforeValidator(flag)]
