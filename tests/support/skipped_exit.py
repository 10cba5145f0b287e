"""pytest plugin of the CTest entries (tests/CMakeLists.txt loads it with
`-p skipped_exit`): a run in which no test ran and at least one was skipped
exits with SKIPPED_EXIT_CODE, which CTest's SKIP_RETURN_CODE turns into
"Skipped" instead of "Passed". A run where some tests passed and others were
skipped keeps its exit code 0; failures and errors keep theirs, and so does
a file that has no tests at all (5).

"Ran" means a test's call phase happened (passed, failed, xfailed or xpassed)
or one of its phases errored; "skipped" covers skip marks, pytest.skip() in a
fixture or test, and a module skipped at collection.
"""

SKIPPED_EXIT_CODE = 77


class _Outcomes:
    def __init__(self):
        self.ran = 0
        self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.skipped:
            # xfail is reported as skipped with a wasxfail attribute: it ran.
            if hasattr(report, "wasxfail"):
                self.ran += 1
            else:
                self.skipped += 1
        elif report.when == "call" or report.failed:
            self.ran += 1

    def pytest_collectreport(self, report):
        if report.skipped:
            self.skipped += 1

    def pytest_sessionfinish(self, session, exitstatus):
        # 5: nothing collected, which is what a module skipped at collection
        # gives; a file with no tests at all (nothing skipped) keeps it.
        if int(exitstatus) in (0, 5) and self.ran == 0 and self.skipped > 0:
            session.exitstatus = SKIPPED_EXIT_CODE


def pytest_configure(config):
    config.pluginmanager.register(_Outcomes(), "skipped_exit_outcomes")
