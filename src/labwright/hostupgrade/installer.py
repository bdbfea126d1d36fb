"""What a failed NVIDIA installer run says went wrong: the ERROR message(s) that name the failure, not the closing
line every failed install ends with, and the log file the installer names (pure).

How nvidia-installer writes its messages (NVIDIA/nvidia-installer, 590.48.01 = 00aaa9f, cross-checked 470.256.02 =
b4d500f; tests/conformance/nvidia-installer/):

- ``ui_error`` shows the message through the UI and logs it with the prefix ``ERROR: `` (user-interface.c
  ``message_helper`` L320-328 and ``level_str`` L91-98; 470: ``ui_error`` L255-266). ``ui_warn`` the same with
  ``WARNING: ``; ``ui_message``/``ui_log`` with ``-> `` (nvidia-installer.h ``NV_BULLET_STR`` L562).
- In the log a message is one ``fprintf`` of prefix and text (log.c ``log_printf`` L127-156): never wrapped, and a
  message with ``\\n`` in it goes on with unprefixed lines (kernel.c L1303-1316: "...release.\\n\\nPlease see the log
  entries 'Kernel module load error' and 'Kernel messages' at the end of the file '%s' ...").
- On stderr (``--silent`` is the stream UI: stream-ui.c ``stream_message`` L243-272) it stands between blank lines;
  not on a terminal it is one line too, on a terminal wrapped with the next rows indented to the prefix's width
  (common-utils/msg.c ``format`` L90-107, ``nv_format_text_rows`` L252-366).
- Every failed install ends with ``ERROR: Installation has failed.  Please see the file '%s' for details.  You may
  find suggestions on fixing installation problems in the README available on the Linux driver download page at
  www.nvidia.com.`` (without a log: ``Installation has failed.  You may find suggestions ...``; install-from-cwd.c
  L418-434, 470: L397-413). It names the log, not the failure.
- From 545 a loaded module is only a WARNING ("An NVIDIA kernel module '%s' appears to be already loaded in your
  kernel.  ...", kernel.c L1712-1720) and the silent default answer aborts; before (470: kernel.c L1555-1570) it is
  an ERROR ("... appears to already be loaded in your kernel.  ..."). So where no ERROR but the closing one names the
  failure, the last WARNING before it does.
- An option it does not know stops it before anything, with no log written: the option parser's own line
  ``./nvidia-installer: unrecognized option: "--X"`` (no prefix; common-utils/nvgetopt.c L246, 302.17: L192), then
  ``ERROR: Invalid commandline, please run `./nvidia-installer --help` for usage information.`` (nvidia-installer.c
  L635-639, 535.216.01: L575-578). Both are quoted (``unrecognized option: "--X"`` first); ``commandline`` says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The installer's default log (nvidia-installer.h DEFAULT_LOG_FILE_NAME); labwright passes it explicitly too.
DEFAULT_LOG = "/var/log/nvidia-installer.log"
_PREFIXES = ("ERROR: ", "WARNING: ", "-> ")
_CLOSING = re.compile(r"^Installation has failed\.")
_NAMED_LOG = re.compile(r"Please see the file '([^']+)' for details")
#: nvgetopt's line for an option the installer does not know (or one without a dash), before its ERROR.
_OPTION = re.compile(r'^\S*nvidia-installer: ((?:unrecognized|invalid) option: ".*")$')
_COMMANDLINE = re.compile(r"^Invalid commandline\b")
_WIDTH = 240  # characters quoted of one message


@dataclass(frozen=True)
class InstallerFailure:
    """``errors``: the messages naming what failed (the closing line left out), in order; ``warning``: the last
    WARNING before the closing line, for a failure only a warning names; ``log``: the file the installer names."""

    errors: tuple[str, ...]
    warning: str | None
    log: str | None

    @property
    def commandline(self) -> bool:
        """It stopped at its command line (an option it does not know): nothing done, no log written."""
        return any(_COMMANDLINE.match(e) for e in self.errors)

    def said(self) -> str:
        """The one-line quote, or "" when the output names no failure."""
        if self.errors:
            return "; ".join(_short(e) for e in self.errors[:2]) + (
                f" (and {len(self.errors) - 2} more ERROR lines)" if len(self.errors) > 2 else "")
        return f"WARNING: {_short(self.warning)}" if self.warning else ""


def _short(text: str) -> str:
    return text if len(text) <= _WIDTH else text[:_WIDTH - 3].rstrip() + "..."


def messages(text: str) -> list[tuple[str, str]]:
    """``(level, message)`` for each ``ERROR: ``/``WARNING: `` message in an installer's output or log: its first
    paragraph, with the rows a terminal's wrapping indented to the prefix's width joined back."""
    found: list[tuple[str, str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        option = _OPTION.match(line)
        if option:
            current = None
            found.append(("ERROR", option.group(1)))
            continue
        prefix = next((p for p in _PREFIXES if line.startswith(p)), None)
        if prefix is not None:
            current = None
            if prefix != "-> ":
                current = [line.removeprefix(prefix).strip()]
                found.append((prefix.rstrip(": "), ""))
        elif current is not None and line.startswith(" " * 7) and line.strip():
            current.append(line.strip())  # a wrapped row (msg.c nv_format_text_rows: indented to "ERROR: ")
        else:
            current = None  # a blank line or an unprefixed one ends the first paragraph
        if current is not None:
            found[-1] = (found[-1][0], " ".join(current))
    return found


def read_failure(text: str) -> InstallerFailure:
    """The ERRORs that say what failed (the closing "Installation has failed." left out), else the last WARNING
    before it, and the log the closing line names."""
    errors: list[str] = []
    warning: str | None = None
    log: str | None = None
    for level, message in messages(text):
        if level == "ERROR" and _CLOSING.match(message):
            named = _NAMED_LOG.search(message)
            log = named.group(1) if named else log
            continue
        if level == "ERROR":
            if message not in errors:
                errors.append(message)
        elif log is None:  # a warning after the closing line is not what failed
            warning = message
    return InstallerFailure(tuple(errors), warning, log)


def failure(output: str, log_text: str = "") -> InstallerFailure:
    """From the run's own output (stderr and stdout) first; where that names no failure (or cannot: the output was
    lost), from the log the installer wrote. The log named by either, else None."""
    ran = read_failure(output)
    if ran.errors:
        return ran
    logged = read_failure(log_text)
    if logged.errors or (logged.warning and not ran.warning):
        return InstallerFailure(logged.errors, logged.warning, ran.log or logged.log)
    return InstallerFailure(ran.errors, ran.warning, ran.log or logged.log)


def named_log(output: str) -> str:
    """The log file the installer's output names, else its default."""
    return read_failure(output).log or DEFAULT_LOG


def guest_installer_said(output: str) -> str:
    """One line for a failed ``--no-kernel-module`` run inside a guest (its log stays in the guest): what failed,
    else the output's last line, and the log the installer names there."""
    found = read_failure(output)
    said = found.said()
    if not said:
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        said = lines[-1][:200] if lines else "no output"
    return said + (f" (log in the guest: {found.log})" if found.log else "")
