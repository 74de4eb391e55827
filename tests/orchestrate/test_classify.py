"""Where a killed rank was, from its faulthandler dump (harness.orchestrate.session.classify)."""

from __future__ import annotations

from harness.orchestrate.session.classify import _where

DUMP = """Thread 0x00007f1 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 324 in wait
  File "/usr/lib/python3.11/threading.py", line 622 in wait
  File "/work/main/harness/host/meter.py", line 100 in _loop
  File "/usr/lib/python3.11/threading.py", line 975 in run
  File "/usr/lib/python3.11/threading.py", line 1038 in _bootstrap_inner
  File "/usr/lib/python3.11/threading.py", line 995 in _bootstrap

Current thread 0x00007f0 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 4100 in barrier
  File "/work/main/harness/cell/loop.py", line 24 in _fence
  File "/work/main/harness/cell/loop.py", line 60 in run_window
  File "/work/main/harness/cell/__main__.py", line 30 in <module>
"""


def test_the_main_thread_says_where_the_rank_was_not_an_instrument_thread_asleep_between_reads():
    assert _where(DUMP) == "waiting for its peers in _fence (harness/cell/loop.py:24)"
    alone = DUMP.split("\n\n")[0]  # a dump of the instrument's thread alone still names it
    assert _where(alone) == "in _loop (harness/host/meter.py:100)"
