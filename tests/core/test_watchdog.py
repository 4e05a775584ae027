"""The no-progress watchdog (issue 35 item 5): ``fedsim.core.watchdog`` and ``--watchdog_s``."""

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

from fedsim.results import EXIT_HUNG

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_STUCK = textwrap.dedent("""
  import sys, threading, time
  from fedsim.core.watchdog import Watchdog

  def helper_waits_in_callback():
    time.sleep(60)

  def stuck_in_compiled_call():
    time.sleep(60)

  with Watchdog(float(sys.argv[1]), dump_path=sys.argv[2]) as wd:
    for i in range(3):   # progress first: beats keep it quiet
      time.sleep(0.1)
      wd.beat(f"round {i}")
    threading.Thread(target=helper_waits_in_callback, name="host-callback", daemon=True).start()
    stuck_in_compiled_call()
  print("not reached")
""")


def _python(code, *args, timeout=60):
  return subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=REPO, capture_output=True, text=True,
                        timeout=timeout, env=dict(os.environ, JAX_PLATFORMS="cpu"))


def test_fires_on_a_stuck_main_thread_with_one_line_and_exit_code(tmp_path):
  dump = tmp_path / "stacks.txt"
  t0 = time.monotonic()
  proc = _python(_STUCK, 1.0, dump)
  took = time.monotonic() - t0
  assert proc.returncode == EXIT_HUNG == 4, proc.stderr
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1, proc.stderr
  line = lines[0]
  assert re.match(r"watchdog: no progress for 1\.\d s \(last: round 2\); threads: MainThread at ", line), line
  assert "stuck_in_compiled_call" in line.split("; ")[1]  # the main thread's innermost frames come first
  assert "host-callback at " in line and "helper_waits_in_callback" in line
  assert "fedsim-watchdog" not in line and f"exiting with status {EXIT_HUNG}" in line
  assert "not reached" not in proc.stdout and took < 20
  text = dump.read_text()
  assert "stuck_in_compiled_call" in text and "helper_waits_in_callback" in text  # faulthandler's full dump


def test_beats_keep_it_quiet_and_exit_stops_it():
  code = textwrap.dedent("""
    import sys, time
    from fedsim.core.watchdog import Watchdog
    with Watchdog(0.5) as wd:
      for _ in range(20):   # 2 s of work, a beat every 0.1 s
        time.sleep(0.1)
        wd.beat()
    time.sleep(1.5)          # after the block: no watchdog any more
    with Watchdog(0) as off:  # 0: off
      time.sleep(0.3)
    print("done")
  """)
  proc = _python(code)
  assert proc.returncode == 0 and proc.stdout.strip() == "done" and proc.stderr == "", proc.stderr


def test_guard_error_exit_ends_a_process_that_cannot_shut_down():
  code = textwrap.dedent("""
    import atexit, sys, time
    from fedsim.core.watchdog import Watchdog
    def shutdown_waits_for_a_dead_peer():
      time.sleep(60)
    atexit.register(shutdown_waits_for_a_dead_peer)
    with Watchdog(1.0, guard_error_exit=sys.argv[1] == "1"):
      raise RuntimeError("collective failed")
  """)
  guarded = _python(code, 1)
  assert guarded.returncode == EXIT_HUNG, guarded.stderr[-2000:]
  line = guarded.stderr.strip().splitlines()[-1]
  assert re.match(r"watchdog: no progress for 1\.\d s \(last: ending on RuntimeError\); threads: MainThread at ", line)
  assert "shutdown_waits_for_a_dead_peer" in line and "RuntimeError: collective failed" in guarded.stderr
  code_quick = code.replace("time.sleep(60)", "pass")
  plain = _python(code_quick, 0)  # not guarded: the error ends the process as usual (status 1)
  assert plain.returncode == 1 and "watchdog" not in plain.stderr


def test_watchdog_s_is_a_setting_with_a_range():
  import fedsim
  from fedsim.config import FieldError
  assert fedsim.ExperimentConfig().watchdog_s == 0
  with pytest.raises(FieldError, match=r"^watchdog_s: must be >= 0 and finite; got -1") as e:
    fedsim.ExperimentConfig(watchdog_s=-1)
  assert e.value.field == "watchdog_s"
  from tests.cli_probe import validate_flag_sets
  assert validate_flag_sets([["--watchdog_s=-1"], ["--watchdog_s=2.5"]]) == [
      ["watchdog_s", "--watchdog_s: must be >= 0 and finite; got -1.0"], None]


def test_a_short_run_with_the_watchdog_finishes(tmp_path):
  t0 = time.monotonic()
  proc = subprocess.run([sys.executable, "-m", "experiments.run", "--task=quadratic", "--dim=5", "--algorithm=fedavg",
                         "--num_clients=4", "--clients_per_round=2", "--rounds=4", "--eval_every=2",
                         "--watchdog_s=30", "--compilation_cache=", f"--output_dir={tmp_path}"],
                        cwd=REPO, capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "watchdog" not in proc.stderr and not list(tmp_path.glob("watchdog-*.txt"))
  assert time.monotonic() - t0 < 120


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_dead_peer_of_a_two_process_run_is_noticed_by_the_watchdog(tmp_path):
  """Process 1 of a 2-process jax.distributed run is killed mid-run; process 0, with the runtime's heartbeat
  set far out (300 s), is ended by --watchdog_s=10 with status 4 well within a minute of the kill (measured
  10-11 s). Process 0 either waits in its next collective (the watchdog names the frame) or gets gloo's
  "connection reset" error and then waits in jax.distributed's shutdown for the dead peer (the watchdog
  keeps guarding a multi-process run's exit after an error)."""
  import signal

  from tests.core.test_multihost import _env, _free_port
  port, out = _free_port(), tmp_path / "run"
  env = dict(_env(2), FEDSIM_HEARTBEAT_TIMEOUT_S="300")
  procs = [subprocess.Popen(
      [sys.executable, "-m", "experiments.run", "--task=quadratic", "--dim=5", "--algorithm=fedavg",
       "--num_clients=8", "--clients_per_round=4", "--rounds=1000000", "--eval_every=1", "--watchdog_s=10",
       "--compilation_cache=", f"--output_dir={out}", f"--coordinator_address=localhost:{port}",
       "--num_processes=2", f"--process_id={i}"],
      cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(2)]
  try:
    metrics, t0 = out / "fedavg" / "metrics.jsonl", time.monotonic()
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 5):  # both compiled, rounds running
      assert procs[0].poll() is None and procs[1].poll() is None, procs[0].stderr.read()[-3000:]
      assert time.monotonic() - t0 < 200, "the two processes did not start their rounds"
      time.sleep(0.2)
    procs[1].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    _, err = procs[0].communicate(timeout=120)
    took = time.monotonic() - killed
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.communicate()
  print(f"\nsurvivor exit {procs[0].returncode} {took:.1f} s after the kill")
  assert procs[0].returncode == EXIT_HUNG, err[-3000:]
  assert took < 60
  line = [ln for ln in err.splitlines() if ln.startswith("watchdog: no progress for ")]
  assert len(line) == 1 and "MainThread at " in line[0], err[-3000:]
  assert (out / "watchdog-0.txt").exists()
