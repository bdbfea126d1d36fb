"""One exception hierarchy; the CLI turns each into a one-line message and an exit code."""


class LabwrightError(Exception):
    """Base of every error labwright raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class BadInput(LabwrightError):
    """The user gave something unusable (a file, a name, a version): exit 2, nothing was changed."""

    exit_code = 2


class OperationFailed(LabwrightError):
    """A step against a host or daemon failed: exit 1."""

    exit_code = 1


class LxdError(OperationFailed):
    """The LXD/Incus daemon refused or failed a request."""

    def __init__(self, message: str, status_code: int = 0):
        super().__init__(message)
        self.status_code = status_code


class LxdNotFound(LxdError):
    """An LXD object (instance, network, image, file) does not exist."""


class OperationTimeout(OperationFailed):
    """A wait on a daemon's operation reached its deadline with the operation still running."""


class SafetyCheckFailed(LabwrightError):
    """A destructive step refused because its safety checks did not pass: exit 1, nothing changed."""

    exit_code = 1
