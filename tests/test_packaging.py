"""`pip install .` and the `attention-viewer` command: dispatch, where files are found, checkpoint paths."""
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import types

import pytest

from conftest import ASSETS, CAPTIONS, ROOT, SHIPPED, TINY_HPARAMS

import viewer.__main__ as cli_main
import viewer.app as app
from viewer import cli, paths


@pytest.fixture
def calls(monkeypatch):
    """Both mains replaced by recorders: which one got which arguments."""
    seen = []
    monkeypatch.setattr(cli_main, "main", lambda argv=None: seen.append(("cli", argv)) or 0)
    monkeypatch.setattr(app, "main", lambda argv=None, prog=None: seen.append(("app", argv)) or 0)
    return seen


@pytest.mark.parametrize("argv", [["caption", "photo.jpg", "--model", "runs/x"], ["models", "--json"],
                                  ["train", "--model", "sat-soft", "--data", "d"], ["evaluate"], ["import", "x.pth"],
                                  ["bench"], ["triage"], ["average", "a", "b", "--out", "c"],
                                  ["--device", "cpu", "caption", "p.jpg"], ["--checkpoints=ck", "models"]])
def test_commands_go_to_the_command_line(calls, argv):
    assert cli.main(argv) == 0
    assert calls == [("cli", argv)]


@pytest.mark.parametrize("argv", [[], ["--port", "8000"], ["--device", "cpu", "--port", "8000"],
                                  ["--checkpoints", "models"], ["--host", "0.0.0.0", "--lecture"]])
def test_everything_else_starts_the_app(calls, argv):
    assert cli.main(argv) == 0
    assert calls == [("app", argv)]


def test_no_arguments_reads_the_command_line(calls, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["attention-viewer", "models"])
    cli.main()
    assert calls == [("cli", ["models"])]


def test_app_help_names_the_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "usage: attention-viewer" in out and "launch.py" not in out


def test_launch_options_reach_the_apps_parser(monkeypatch):
    """The real app parser: --port and --device arrive where launch.py would put them."""
    got = {}
    studio = types.SimpleNamespace(captioner=types.SimpleNamespace(vision=None), warm_up=lambda: [])
    monkeypatch.setattr(app, "create_app", lambda *a, **kw: got.update(create=a, options=kw) or ("demo", studio))
    monkeypatch.setattr(app, "launch", lambda demo, host, port, **kw: got.update(launch=(demo, host, port)))
    assert cli.main(["--port", "8000", "--device", "cpu", "--lecture"]) == 0
    assert got["launch"] == ("demo", "127.0.0.1", 8000)
    assert got["create"][0] == "cpu" and got["options"] == {"lecture": True}
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--no-such-option"])
    assert exit_.value.code == 2


def test_the_dispatcher_knows_every_command(capsys):
    """Every command `python -m viewer` accepts is dispatched by `attention-viewer`, and no other word."""
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["--help"])
    assert exit_.value.code == 0
    listed = re.search(r"\{([\w,-]+)\}", capsys.readouterr().out).group(1).split(",")   # argparse's own choices
    assert set(cli.SUBCOMMANDS) == set(listed)
    for name in listed:
        assert cli.is_command([name]) and cli.is_command(["--device", "cpu", name])
        with pytest.raises(SystemExit) as exit_:
            cli.main([name, "--help"])              # reaches the command's own parser
        assert exit_.value.code == 0 and f"usage: python -m viewer {name}" in capsys.readouterr().out
    assert not cli.is_command(["no-such-command"])


def test_paths_in_a_checkout():
    from viewer.engine import checkpoints
    from viewer.app import session
    from viewer.data import cache

    assert not paths.INSTALLED
    assert paths.ROOT == ROOT
    assert paths.CHECKPOINT_DIR == paths.OWN_CHECKPOINT_DIR == os.path.join(ROOT, "checkpoints")
    assert checkpoints.MODEL_DIRS == (paths.CHECKPOINT_DIR,)   # a checkout reads and writes one folder
    assert set(SHIPPED) <= set(checkpoints.available())
    assert os.path.isfile(os.path.join(paths.CHECKPOINT_DIR, "README.md"))
    assert paths.ASSETS == ASSETS and os.path.isfile(os.path.join(paths.ASSETS, "CREDITS.md"))
    assert any(n.endswith(".jpg") for n in os.listdir(paths.ASSETS))
    assert session.TRIAGE_DIR == os.path.join(ROOT, "triage")
    if "VIEWER_CACHE" not in os.environ:
        assert os.path.abspath(cache.DEFAULT_ROOT) == os.path.join(ROOT, ".cache", "features")


def test_pyproject_packages_every_module_and_the_shipped_files():
    conf = tomllib.load(open(os.path.join(ROOT, "pyproject.toml"), "rb"))
    tool = conf["tool"]["setuptools"]
    found = {os.path.relpath(d, ROOT).replace(os.sep, ".") for d, _, files in os.walk(os.path.join(ROOT, "viewer"))
             if "__init__.py" in files}
    assert found == {p for p in tool["packages"] if not p.startswith("viewer._data")}
    assert tool["package-dir"] == {"viewer._data.checkpoints": "checkpoints", "viewer._data.assets": "assets"}
    assert conf["project"]["scripts"]["attention-viewer"] == "viewer.cli:main"


def test_model_path_without_its_suffix(tmp_path, monkeypatch, capsys):
    """`import --out runs/x` writes runs/x.safetensors; `--model runs/x` finds it. The checkpoint is
    an untrained tiny sat-soft (conftest's sizes): tiny_checkpoints' training is not needed here."""
    from viewer.engine import checkpoints
    from viewer.engine.checkpoints import CheckpointError, resolve
    from viewer.engine.vocab import Vocabulary
    from viewer.engine.models import build_model
    from viewer.engine.vision.encoder import FEATURE_DIM

    vocab = Vocabulary.build((c for caps in CAPTIONS.values() for c in caps), min_freq=1)
    hparams = {**TINY_HPARAMS["sat-soft"], "vocab_size": len(vocab), "dropout": 0.0, "feature_dim": FEATURE_DIM}
    checkpoints.save(str(tmp_path / "runs" / "x.safetensors"), build_model("sat-soft", **hparams), vocab,
                     "sat-soft", "sat-soft", hparams)
    monkeypatch.chdir(tmp_path)
    x = os.path.join("runs", "x")
    assert resolve(x) == x + ".safetensors" and resolve(x + ".safetensors") == x + ".safetensors"
    with pytest.raises(CheckpointError):
        resolve("x")   # a bare name is still a model of the checkpoints folder
    photo = os.path.join(ASSETS, "coffee.jpg")
    assert cli.main(["--device", "cpu", "caption", photo, "--model", x, "--greedy", "--json"]) == 0
    trace = json.loads(capsys.readouterr().out.strip().splitlines()[0])
    assert trace["model"] == "sat-soft" and trace["caption"]


def test_pip_install_gives_the_command(tmp_path):
    """`pip install .` into a fresh venv that borrows this one's packages (nothing downloaded, nothing
    reinstalled): the command runs from another folder, with the shipped models and photos."""
    src = tmp_path / "src"   # a copy, so pip's in-tree build leaves the checkout alone
    os.makedirs(src)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyi")
    for name in ("viewer", "checkpoints", "assets"):
        shutil.copytree(os.path.join(ROOT, name), src / name, ignore=ignore)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "borrowed.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    pip = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--quiet",
                          "--disable-pip-version-check", str(src)], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    os.makedirs(elsewhere)
    where = subprocess.run([python, "-c", "import viewer.paths as p; "
                            "print(p.INSTALLED, p.CHECKPOINT_DIR, p.ASSETS, p.OWN_CHECKPOINT_DIR)"],
                           cwd=elsewhere, capture_output=True, text=True, check=True).stdout.split()
    assert where[0] == "True" and where[1].startswith(site) and where[2].startswith(site)
    assert where[3] == str(elsewhere / "checkpoints")   # imported and shipped models never go into site-packages
    assert {"CREDITS.md", "coffee.jpg"} <= set(os.listdir(where[2]))
    out = subprocess.run([str(venv / "bin" / "attention-viewer"), "models", "--json"], cwd=elsewhere,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert set(SHIPPED) <= {json.loads(line)["name"] for line in out.stdout.splitlines()}
