"""The launch plan (pure): what torchrun command and environment a set of flags produces."""

from __future__ import annotations

import pytest

from envtool.core.launch_plan import (
    LaunchRequest,
    parse_error_file,
    parse_last_exception,
    parse_root_cause,
    plan_launch,
    render_dry_run,
    render_failure,
)
from envtool.errors import UsageError


def req(**kw: object) -> LaunchRequest:
    base: dict[str, object] = dict(
        script="train.py",
        python="/env/bin/python",
        run_id="20261130-000000-abcdef",
        runs_root="runs",
        free_port=41234,
        cpu_count=16,
    )
    base.update(kw)
    return LaunchRequest(**base)  # type: ignore[arg-type]


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_gpu_host_defaults_to_every_visible_gpu_with_nccl() -> None:
    plan = plan_launch(req(visible_gpus=8))
    assert plan.backend == "nccl"
    assert flag(plan.argv, "--nproc-per-node") == "8"
    assert plan.env_add["OMP_NUM_THREADS"] == "2"  # 16 cores / 8 ranks
    assert plan.env_add["NCCL_NVLS_ENABLE"] == "0"
    assert plan.env_add["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in plan.env_add


def test_single_node_uses_c10d_on_loopback_with_the_free_port() -> None:
    plan = plan_launch(req(visible_gpus=2))
    assert flag(plan.argv, "--rdzv-backend") == "c10d"
    assert flag(plan.argv, "--rdzv-endpoint") == "127.0.0.1:41234"
    assert "29500" not in " ".join(plan.argv)
    assert plan.argv[:3] == ["/env/bin/python", "-m", "torch.distributed.run"]


def test_more_gpus_than_visible_is_a_usage_error_naming_cuda_visible_devices() -> None:
    with pytest.raises(UsageError) as err:
        plan_launch(req(gpus="4", visible_gpus=2, cuda_visible_devices="0,1"))
    assert "asked for 4 GPUs; this host shows 2 (CUDA_VISIBLE_DEVICES=0,1)" in err.value.message


def test_gpus_on_a_host_without_gpus_points_to_cpu() -> None:
    with pytest.raises(UsageError) as err:
        plan_launch(req(gpus="2", visible_gpus=0))
    assert "--cpu" in (err.value.hint or "")


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_bad_gpu_counts_are_rejected(bad: str) -> None:
    with pytest.raises(UsageError, match="--gpus"):
        plan_launch(req(gpus=bad, visible_gpus=8))


def test_cpu_runs_gloo_hides_gpus_and_defaults_to_two_processes() -> None:
    plan = plan_launch(req(cpu=True, visible_gpus=8))
    assert plan.backend == "gloo"
    assert flag(plan.argv, "--nproc-per-node") == "2"
    assert plan.env_add["CUDA_VISIBLE_DEVICES"] == ""
    assert "NCCL_NVLS_ENABLE" not in plan.env_add
    assert flag(plan_launch(req(cpu=True, nproc=3)).argv, "--nproc-per-node") == "3"


def test_no_gpu_and_no_flags_falls_back_to_cpu() -> None:
    assert plan_launch(req(visible_gpus=0)).backend == "gloo"


def test_user_settings_are_kept_and_reported() -> None:
    environ = {"OMP_NUM_THREADS": "7", "NCCL_NVLS_ENABLE": "1"}
    plan = plan_launch(req(visible_gpus=1, environ=environ))
    assert "OMP_NUM_THREADS" not in plan.env_add
    assert "NCCL_NVLS_ENABLE" not in plan.env_add
    assert plan.env_add["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert "OMP_NUM_THREADS=7 kept (set by you)" in plan.notes
    assert "NCCL_NVLS_ENABLE=1 kept (set by you)" in plan.notes


def test_omp_threads_never_drop_below_one() -> None:
    assert plan_launch(req(cpu=True, nproc=4, cpu_count=2)).env_add["OMP_NUM_THREADS"] == "1"


def test_console_shows_rank_zero_unless_all_ranks() -> None:
    plan = plan_launch(req(cpu=True))
    assert flag(plan.argv, "--local-ranks-filter") == "0"
    assert flag(plan.argv, "--tee") == "3"
    assert flag(plan.argv, "--log-dir") == "runs/20261130-000000-abcdef/torchrun"
    assert "--local-ranks-filter" not in plan_launch(req(cpu=True, all_ranks=True)).argv


def test_script_and_its_args_come_last_in_order() -> None:
    plan = plan_launch(req(cpu=True, script_args=["--lr", "0.1", "--", "x"]))
    assert plan.argv[-5:] == ["train.py", "--lr", "0.1", "--", "x"]


def test_multi_node_with_node_rank_is_static_rendezvous() -> None:
    plan = plan_launch(
        req(cpu=True, nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29400", free_port=None)
    )
    assert flag(plan.argv, "--master-addr") == "10.0.0.1"
    assert flag(plan.argv, "--master-port") == "29400"
    assert flag(plan.argv, "--node-rank") == "1"
    assert flag(plan.argv, "--nnodes") == "2"
    assert "--rdzv-backend" not in plan.argv
    assert plan.rendezvous["kind"] == "static"


def test_multi_node_without_node_rank_is_c10d_with_an_id_every_node_derives_alike() -> None:
    a = plan_launch(req(cpu=True, nnodes=2, rdzv_endpoint="head:29400", run_id="one"))
    b = plan_launch(req(cpu=True, nnodes=2, rdzv_endpoint="head:29400", run_id="two"))
    assert flag(a.argv, "--rdzv-id") == flag(b.argv, "--rdzv-id") == "envtool-head-29400"
    given = plan_launch(req(cpu=True, nnodes=2, rdzv_endpoint="head:29400", rdzv_id="exp7"))
    assert flag(given.argv, "--rdzv-id") == "exp7"


@pytest.mark.parametrize(
    "kw, fragment",
    [
        (dict(nnodes=2), "needs --rdzv-endpoint"),
        (dict(nnodes=2, rdzv_endpoint="head"), "not HOST:PORT"),
        (dict(nnodes=2, rdzv_endpoint="head:99999"), "not HOST:PORT"),
        (dict(nnodes=2, node_rank=2, rdzv_endpoint="h:1"), "outside 0..1"),
        (dict(max_restarts=-1), "negative"),
    ],
)
def test_bad_multi_node_flags_are_usage_errors(kw: dict[str, object], fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        plan_launch(req(cpu=True, **kw))


def test_dry_run_prints_exports_then_the_exact_command() -> None:
    lines = render_dry_run(plan_launch(req(cpu=True, script_args=["--name", "a b"])))
    assert "export CUDA_VISIBLE_DEVICES=''" in lines
    assert lines[-1].startswith("/env/bin/python -m torch.distributed.run --nnodes 1")
    assert lines[-1].endswith("train.py --name 'a b'")


# torchrun 2.13's failure summary, captured from a real run of tests/scripts/rank_file.py
ROOT_CAUSE = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
/work/main/tests/scripts/rank_file.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_03:19:47
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 9331)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def test_parse_root_cause_names_rank_exit_and_time() -> None:
    f = parse_root_cause("noise\n" + ROOT_CAUSE)
    assert f is not None
    assert (f.rank, f.local_rank, f.exitcode, f.time) == (1, 1, 1, "2026-11-30_03:19:47")
    killed = parse_root_cause(ROOT_CAUSE.replace("exitcode  : 1 (pid", "exitcode  : -9 (pid"))
    assert killed is not None and killed.exitcode == -9
    assert parse_root_cause("no summary here") is None


def test_parse_last_exception_reads_the_final_traceback_line() -> None:
    log = (
        "[default1]:step 1\n[default1]:Traceback (most recent call last):\n"
        '[default1]:  File "x.py", line 3, in <module>\n'
        "[default1]:    main()\n[default1]:ValueError: planted failure\n"
    )
    assert parse_last_exception(log) == "ValueError: planted failure"
    assert parse_last_exception("all fine\n") is None


def test_parse_last_exception_after_the_distributed_excepthook_prefix() -> None:
    """init_process_group's excepthook writes "[rank1]: " (with a space) before every line; the
    space is not indentation (it hid the exception: "rank 1 failed first (exit 1)" alone)."""
    tb = [
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in <module>',
        "    main()",
        "ValueError: boom",
    ]
    assert parse_last_exception("".join(f"[rank1]: {t}\n" for t in tb)) == "ValueError: boom"
    both = "".join(f"[default1]:[rank1]: {t}\n" for t in tb)  # the console copy
    assert parse_last_exception(both) == "ValueError: boom"


def test_parse_error_file_of_record_decorator() -> None:
    data = {"message": {"message": "RuntimeError: oops\nmore", "extraInfo": {"timestamp": "1"}}}
    assert parse_error_file(data) == ("RuntimeError: oops", "1")


def test_render_failure_message() -> None:
    f = parse_root_cause(ROOT_CAUSE)
    assert f is not None
    f.error, f.log = "ValueError: boom", "runs/x/1/stderr.log"
    assert render_failure(f) == (
        "rank 1 failed first (exit 1 at 03:19:47): ValueError: boom — logs: runs/x/1/stderr.log"
    )
    f.exitcode, f.error = -9, None
    killed = render_failure(f)
    assert "killed by SIGKILL" in killed
    assert "out-of-memory killer (check `dmesg`)" in killed  # the usual sender, named
    f.exitcode = -15
    assert "out-of-memory" not in render_failure(f)


def test_c10d_endpoint_on_this_machine_is_declared_host_and_local_addr_passes_through() -> None:
    base = dict(cpu=True, nnodes=2, rdzv_endpoint="10.0.0.1:29400", free_port=None)
    head = plan_launch(req(**base, endpoint_is_local=True, local_addr="10.0.0.1"))
    assert flag(head.argv, "--rdzv-conf") == "is_host=1"
    assert flag(head.argv, "--local-addr") == "10.0.0.1"
    other = plan_launch(req(**base))
    assert "--rdzv-conf" not in other.argv and "--local-addr" not in other.argv


@pytest.mark.parametrize("value", ["\u00b2", "\u0664", "0", "-1", "four"])
def test_gpus_that_are_not_a_plain_positive_count_are_a_usage_error(value: str) -> None:
    """'²' and Arabic-Indic digits pass str.isdigit() but are no count int() reads."""
    from envtool.core.launch_plan import parse_gpus

    with pytest.raises(UsageError, match="is not a count"):
        parse_gpus(value)


def test_parse_last_lines_takes_a_ranks_last_words_prefixes_off() -> None:
    from envtool.core.launch_plan import parse_last_lines

    log = "[rank1]: rank 1 up\n[default1]:[rank1]: fatal: bad config\n\n   \n"
    assert parse_last_lines(log) == ["rank 1 up", "fatal: bad config"]
    assert parse_last_lines(log, 1) == ["fatal: bad config"]
    assert parse_last_lines("") == []
