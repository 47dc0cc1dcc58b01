"""`output_to`: what the libraries print inside the block lands in the log, the console gets nothing of it, and
the console is back afterwards."""

import logging
import os
import warnings

from layout_solver.lowering.quiet import output_to


def test_native_and_python_output_go_to_the_log_and_the_console_comes_back(tmp_path, capfd):
    log = tmp_path / "third_party.log"
    with output_to(log):
        os.write(2, b"WARNING: Different TOSA spec\n")  # what native code prints
        print("a library's print", flush=True)
        logging.getLogger("executorch").warning("a library's warning")
        warnings.warn("a Python warning", stacklevel=1)
    print("ours")
    captured = capfd.readouterr()
    assert captured.out == "ours\n" and captured.err == ""
    assert log.read_text() == "WARNING: Different TOSA spec\na library's print\n"
    assert logging.getLogger("executorch").isEnabledFor(logging.WARNING)  # logging is back on


def test_the_console_comes_back_after_an_error(tmp_path, capfd):
    try:
        with output_to(tmp_path / "log"):
            raise ValueError("inside")
    except ValueError:
        pass
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"
