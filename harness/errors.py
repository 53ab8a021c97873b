"""The harness's exceptions and the exit code each maps to (docs/results.md).

    KstressError                    4  harness internal error (a bug in kstress)
     +-- UsageError                 2  bad flags, settings, target, catalog or state file; a sandbox
     |                                 that cannot be created here (run as root, or --mechanism userns)
     +-- TargetError                3  the system under test failed to start or died
     |    +-- TargetDied            3    it died during the run (partial results are written)
     +-- InfraError                 5  kstress's own side failed, not the kernel: a sandbox that
     |    |                            cannot be cleaned up, the mock LLM died
     |    +-- SandboxCleanupError   5
     |    +-- MockDied              5    the mock LLM exited during the run
     |    +-- ConnectorGone         5    the sandbox's connector (TCP and ws kernels) is gone
     +-- ChecksFailed               1  the run finished and some verdict failed
    (no exception)                 6  incomplete: every check that ran held, but the scenario's core
                                      check could not run (its contract declares the kernel lacks it)
    (no exception)                99  every check held but a --threshold (a service level) failed

    (no exception)               130  interrupted: SIGINT, SIGTERM or SIGHUP cancel the run at the
                                      CLI edge; partial results are written

Every message a user can cause names the value, the rule and the fix.
"""

EXIT_OK = 0
EXIT_CHECKS_FAILED = 1
EXIT_USAGE = 2
EXIT_TARGET = 3
EXIT_INTERNAL = 4
EXIT_INFRA = 5
EXIT_INCOMPLETE = 6  # what the scenario is for was not checked: never a pass
EXIT_THRESHOLD = 99  # k6's code for a crossed threshold
EXIT_INTERRUPTED = 130


class KstressError(Exception):
    exit_code = EXIT_INTERNAL


class UsageError(KstressError):
    exit_code = EXIT_USAGE


class TargetError(KstressError):
    exit_code = EXIT_TARGET


class TargetDied(TargetError):
    """The target exited while the run was driving it."""


class InfraError(KstressError):
    exit_code = EXIT_INFRA


class SandboxCleanupError(InfraError):
    """A sandbox's processes or namespace could not be removed."""


class MockDied(InfraError):
    """The mock LLM exited while a run was driving its kernel: every turn after
    it would fail, and not by the kernel's fault."""


class ConnectorGone(InfraError):
    """The sandbox's connector, through which the harness reaches a kernel
    listening on TCP or a WebSocket inside the namespace, is gone: no input
    after it could reach the kernel, and not by the kernel's fault."""


class ChecksFailed(KstressError):
    exit_code = EXIT_CHECKS_FAILED
