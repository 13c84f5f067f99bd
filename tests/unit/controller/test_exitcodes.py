from gpudiag.exitcodes import ExitCode, decide_exit_code


def test_exit_code_precedence():
    assert decide_exit_code(has_fail=False, has_unchecked=False) == ExitCode.OK == 0
    assert decide_exit_code(has_fail=True, has_unchecked=True) == ExitCode.FAIL == 1
    assert decide_exit_code(has_fail=False, has_unchecked=True) == ExitCode.UNCHECKED == 3
    assert decide_exit_code(has_fail=True, has_unchecked=True, interrupted=True) == ExitCode.INTERRUPTED == 130
    assert ExitCode.USAGE == 2
