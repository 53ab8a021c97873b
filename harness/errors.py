"""The harness's exceptions and the exit code each maps to (docs/results.md).

    KstressError                    4  harness internal error (a bug in kstress)
     +-- UsageError                 2  bad flags, settings, target or catalog file
     +-- TargetError                3  the system under test failed to start or died
     +-- ChecksFailed               1  the run finished and some verdict failed
"""

EXIT_OK = 0
EXIT_CHECKS_FAILED = 1
EXIT_USAGE = 2
EXIT_TARGET = 3
EXIT_INTERNAL = 4


class KstressError(Exception):
    exit_code = EXIT_INTERNAL


class UsageError(KstressError):
    exit_code = EXIT_USAGE


class TargetError(KstressError):
    exit_code = EXIT_TARGET


class ChecksFailed(KstressError):
    exit_code = EXIT_CHECKS_FAILED
