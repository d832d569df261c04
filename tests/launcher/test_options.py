"""accordrun's command line, in process: torchrun's spellings, syntaxes and defaults."""

from __future__ import annotations

import os

import pytest

from accord.launch import get_legacy_parser
from accord.launcher.elastic_options import parse_endpoint, parse_nnodes
from accord.launcher.options import Std, config_from_args, get_args_parser, ignored_options, parse_nproc, parse_std


def _config(*argv: str):
    return config_from_args(get_args_parser().parse_args(list(argv)))


def test_dash_and_underscore_spellings_and_script_arguments():
    for spelling in ("--nproc-per-node", "--nproc_per_node"):
        cfg = _config(spelling, "3", "--max_restarts=2", "--monitor-interval", "0.5",
                      "train.py", "--lr", "0.1", "--nproc-per-node", "9")
        assert cfg.nproc_per_node == 3 and cfg.max_restarts == 2 and cfg.monitor_interval == 0.5
        assert cfg.entrypoint == "train.py"
        assert cfg.args == ["--lr", "0.1", "--nproc-per-node", "9"]  # REMAINDER: the script's


def test_single_node_defaults_as_torchrun():
    cfg = _config("x.py")
    assert (cfg.rdzv_backend, cfg.rdzv_host, cfg.rdzv_port) == ("c10d", "127.0.0.1", 0)
    assert cfg.run_id != "none" and cfg.nproc_per_node == 1 and cfg.max_restarts == 0
    assert _config("--standalone", "--rdzv-id", "mine", "x.py").run_id != "mine"
    cfg = _config("--master-port", "29999", "x.py")  # an explicit port is kept
    assert (cfg.rdzv_backend, cfg.rdzv_port, cfg.run_id) == ("static", 29999, "none")


def test_multi_node_static_and_c10d():
    cfg = _config("--nnodes", "2", "--node_rank", "1", "--master_addr", "10.0.0.1", "x.py")
    assert (cfg.rdzv_backend, cfg.rdzv_host, cfg.rdzv_port) == ("static", "10.0.0.1", 29500)
    assert (cfg.min_nodes, cfg.max_nodes, cfg.node_rank) == (2, 2, 1)
    cfg = _config("--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h1",
                  "--rdzv-conf", "join_timeout=5,last_call_timeout=2", "x.py")
    assert (cfg.rdzv_host, cfg.rdzv_port, cfg.min_nodes, cfg.max_nodes) == ("h1", 29400, 1, 4)
    assert (cfg.join_timeout, cfg.last_call_timeout) == (5.0, 2.0)
    cfg = _config("--nnodes", "1:4", "--rdzv-endpoint", "h1:7000", "x.py")  # static: MAX
    assert (cfg.min_nodes, cfg.max_nodes, cfg.rdzv_port) == (4, 4, 7000)


def test_value_syntaxes():
    assert parse_nnodes("3") == (3, 3) and parse_nnodes("2:5") == (2, 5)
    assert parse_nproc("auto") == parse_nproc("cpu") == len(os.sched_getaffinity(0))
    assert parse_std("3", "-r", 2) == {0: Std.ALL, 1: Std.ALL}
    assert parse_std("0:1,1:2", "-t", 2) == {0: Std.OUT, 1: Std.ERR}
    assert parse_endpoint("[::1]:80", 1) == ("::1", 80) and parse_endpoint("a.b", 9) == ("a.b", 9)


@pytest.mark.parametrize("argv, words", [
    (["--nnodes", "2:1", "x.py"], "--nnodes"),
    (["--nnodes", "a", "x.py"], "--nnodes"),
    (["--nproc-per-node", "0", "x.py"], "--nproc-per-node"),
    (["--nproc-per-node", "gpu", "x.py"], "no gpu support"),
    (["-r", "5", "x.py"], "--redirects"),
    (["--nnodes", "2", "--node-rank", "2", "x.py"], "--node-rank"),
    (["--rdzv-backend", "etcd", "x.py"], "'static' and 'c10d'"),
    (["--rdzv-backend", "c10d", "--nnodes", "2", "x.py"], "--rdzv-endpoint"),
    (["--rdzv-conf", "join_timeout", "x.py"], "--rdzv-conf"),
    (["--no-python", "-m", "x"], "--no-python"),
    (["--max-restarts", "-1", "x.py"], "--max-restarts"),
    (["--local-ranks-filter", "a", "x.py"], "--local-ranks-filter"),
    (["--signals-to-handle", "SIGTERM,SIGKILL,NOPE", "x.py"], "SIGKILL, NOPE cannot be handled"),
])
def test_bad_options_name_themselves(argv, words):
    with pytest.raises(ValueError, match=words):
        _config(*argv)


def test_pet_environment_defaults(monkeypatch):
    monkeypatch.setenv("PET_NPROC_PER_NODE", "5")
    monkeypatch.setenv("PET_STANDALONE", "1")
    cfg = _config("x.py")
    assert cfg.nproc_per_node == 5 and cfg.rdzv_port == 0
    assert _config("--nproc-per-node", "2", "x.py").nproc_per_node == 2  # the flag wins


def test_replace_workers_is_a_flag_off_by_default(monkeypatch):
    assert _config("x.py").replace_workers is False
    assert _config("--replace-workers", "x.py").replace_workers is True
    assert _config("--replace_workers", "--max-restarts", "3", "x.py").replace_workers is True
    monkeypatch.setenv("PET_REPLACE_WORKERS", "1")
    assert _config("x.py").replace_workers is True


def test_ignored_torchrun_options_are_accepted_and_named():
    args = get_args_parser().parse_args(["--start-method", "fork", "--numa-binding", "node",
                                         "x.py"])
    assert ignored_options(args) == ["--start-method", "--numa-binding"]


def test_legacy_parser_has_use_env():
    assert get_legacy_parser().parse_args(["--use_env", "x.py"]).use_env is True
    assert get_legacy_parser().parse_args(["x.py"]).use_env is False
