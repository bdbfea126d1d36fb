"""A failed NVIDIA installer run quoted by what failed (labwright.hostupgrade.installer), not by the closing
"Installation has failed." line every failed run ends with; the log it names pointed at. The layouts come from
NVIDIA/nvidia-installer (tests/conformance/nvidia-installer/): one line per message on a pipe and in the log, rows
wrapped and indented to the prefix on a terminal, a message's text going on after a blank line unprefixed."""

from __future__ import annotations

import textwrap
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labwright.errors import OperationFailed
from labwright.hosts import Host, Result
from labwright.hostupgrade.installer import failure, guest_installer_said, read_failure
from labwright.hostupgrade.realhost import CommandHost
from support.host_tree import TreeHost

from .test_realhost import NEW, RUNNING, host, tree

CLOSING = ("Installation has failed.  Please see the file '{log}' for details.  You may find suggestions on fixing "
           "installation problems in the README available on the Linux driver download page at www.nvidia.com.")


def test_a_module_that_does_not_load_is_quoted_not_the_closing_line(tmp_path):
    """Built for the running kernel with no NVIDIA module loaded (nouveau holds the GPU), the test load fails: the
    step quotes that ERROR and the log the installer names."""
    root = tree(tmp_path)
    (root / "proc/driver/nvidia/version").unlink()
    (root / "labwright-sim").mkdir()
    (root / "labwright-sim/nvidia-load-fails").write_text("")
    with pytest.raises(OperationFailed) as info:
        host(root).install_driver(NEW, RUNNING)
    message = str(info.value)
    assert "; the installer says: Unable to load the kernel module 'nvidia.ko'.  This happens most frequently" in \
        message
    assert "Installation has failed" not in message and message.endswith("(log: /var/log/nvidia-installer.log)")
    assert "\n" not in message


class _Said:
    """A runner whose installer run printed only the closing line (its output lost the rest, or it was a 545+
    abort): the log it names tells what failed."""

    label = "stub"

    def __init__(self, log: str):
        self.log = log

    def run(self, command: str, timeout: float | None = None) -> Result:
        return Result(1, "", f"\nERROR: {CLOSING.format(log=self.log)}\n\n")


def test_the_log_the_installer_names_is_read_and_pointed_at(tmp_path):
    root = tree(tmp_path)
    (root / "root").mkdir()
    (root / "root/nvidia-590.log").write_text(
        "-> Installing NVIDIA driver version 550.54.15.\n"
        "ERROR: An error occurred while performing the step: \"Building kernel modules\". See /root/nvidia-590.log "
        "for details.\n-> The command `make` failed with the following output:\n\nERROR: modpost: missing MODULE\n"
        f"ERROR: {CLOSING.format(log='/root/nvidia-590.log')}\n")
    h = CommandHost(TreeHost(root), root / "var/cache/labwright/nvidia",
                    runner=cast(Host, _Said("/root/nvidia-590.log")))
    with pytest.raises(OperationFailed) as info:
        h.install_driver(NEW, RUNNING)
    assert str(info.value).endswith('the installer says: An error occurred while performing the step: "Building '
                                    'kernel modules". See /root/nvidia-590.log for details.; modpost: missing MODULE '
                                    "(log: /root/nvidia-590.log)")


def test_nothing_named_falls_back_to_the_last_line():
    assert read_failure("Verifying archive integrity... Error in check sums 123 456\n").said() == ""
    assert guest_installer_said("Verifying archive integrity... Error in check sums 123 456\n") == \
        "Verifying archive integrity... Error in check sums 123 456"


def test_a_guests_failed_userspace_install_quotes_what_failed_and_the_log_there():
    output = (f"\nERROR: Unable to find the kernel source tree for the currently running kernel.\n\n"
              f"\nERROR: {CLOSING.format(log='/var/log/nvidia-installer.log')}\n\n")
    assert guest_installer_said(output) == ("Unable to find the kernel source tree for the currently running kernel. "
                                            "(log in the guest: /var/log/nvidia-installer.log)")


words = st.lists(st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="'"),
                         min_size=1, max_size=12), min_size=1, max_size=30)
log_paths = st.from_regex(r"\A/[a-z0-9_.-]{1,12}(/[a-z0-9_.-]{1,12}){0,3}\Z")


def wrapped(prefix: str, text: str) -> list[str]:
    """As a terminal 80 columns wide gets it (msg.c: rows of 79, the next ones indented to the prefix)."""
    return textwrap.wrap(text, 79, initial_indent=prefix, subsequent_indent=" " * len(prefix),
                         break_long_words=False, break_on_hyphens=False)


@given(first=words, second=st.one_of(st.none(), words), log=log_paths, tty=st.booleans(), in_log=st.booleans(),
       warn=st.booleans())
def test_the_errors_naming_the_failure_are_quoted_whatever_they_say(first, second, log, tty, in_log, warn):
    """Any ERROR text (one or two messages), on a pipe or a terminal, in the output or only in the log, with
    warnings and "-> " lines around: the quote is those messages and never the closing line; the log is the one
    the closing line names."""
    errors = [" ".join(first)] + ([" ".join(second)] if second else [])
    errors = [e for e in errors if not e.startswith("Installation has failed.")]
    lines: list[str] = ["-> Installing NVIDIA driver version 550.54.15."]
    if warn:
        lines += ["", "WARNING: An NVIDIA kernel module 'nvidia-uvm' appears to be already loaded.", ""]
    for error in errors:
        lines += [""] + (wrapped("ERROR: ", error) if tty else [f"ERROR: {error}"]) + ["", "-> Kernel messages:"]
    closing = CLOSING.format(log=log)
    lines += [""] + (wrapped("ERROR: ", closing) if tty else [f"ERROR: {closing}"]) + [""]
    text = "\n".join(lines)
    found = failure("", text) if in_log else failure(text, "")
    assert list(found.errors) == list(dict.fromkeys(errors)) and found.log == log
    said = found.said()
    assert "Installation has failed" not in said and "\n" not in said
    if errors:
        assert said.startswith(errors[0][:200])
    else:
        assert said == ("WARNING: An NVIDIA kernel module 'nvidia-uvm' appears to be already loaded." if warn else "")


def test_an_option_the_installer_does_not_know_is_quoted_with_its_parser_line():
    """nvgetopt's own line (no prefix) names the option; the ERROR after it only says the command line was bad."""
    output = ('./nvidia-installer: invalid option: "silent"\n\nERROR: Invalid commandline, please run '
              "`./nvidia-installer --help` for usage information.\n\n")
    found = failure(output, "ERROR: an earlier run's log\n")
    assert found.errors == ('invalid option: "silent"', "Invalid commandline, please run `./nvidia-installer --help` "
                            "for usage information.")
    assert found.commandline and found.log is None
    # a compiler's complaint in a build log is not the installer's parser
    logged = read_failure("   cc: error: unrecognized command-line option '-mfoo'\n"
                          '   make: unrecognized option: "--bar"\n')
    assert logged.errors == () and not logged.commandline
