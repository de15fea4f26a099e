"""The app under load and bad input: concurrent sessions, junk uploads, temp files, binding, paths."""
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from PIL import Image

from conftest import ASSETS, ROOT


@pytest.fixture(scope="module")
def twenty_photos(tmp_path_factory):
    """20 photos in 10 sizes: each client can recognise its own result, and pairs of clients see
    identical pictures (served from the same cached file at the same time)."""
    folder = tmp_path_factory.mktemp("photos")
    names = sorted(n for n in os.listdir(ASSETS) if n.endswith(".jpg"))
    paths = []
    for i in range(20):
        img = Image.open(os.path.join(ASSETS, names[i % 10 % len(names)])).convert("RGB")
        img = img.resize((320 + 7 * (i % 10), 240 + 3 * (i % 10)))
        path = folder / f"photo_{i:02d}.jpg"
        img.save(path, quality=85)
        paths.append(str(path))
    return paths


def test_twenty_concurrent_clients(server, twenty_photos):
    from viewer.app.session import display_copy
    from viewer.engine.images import load_photo
    from viewer.measure.loadtest import run_load
    url, studio = server
    result = run_load(url, twenty_photos, "sat-soft", clients=20, timeout_s=600)
    assert result["errors"] == []
    assert len(result["sessions"]) == 20
    for session in result["sessions"]:
        h, w = display_copy(load_photo(session["photo"])).shape[:2]
        assert session["view_sizes"] == [(w, h)], "a client saw another client's photo"
        assert session["steps"] == list(range(1, len(session["steps"]) + 1)), "a client's panels are not its own trace's"
    print(f"\nload: {result['requests']} requests, median {result['median_ms']} ms, p95 {result['p95_ms']} ms, "
          f"{result['wall_s']} s")
    assert len(studio._decodes) <= studio.max_decodes
    assert len(studio.captioner._features) <= studio.captioner.max_cached_photos


def _caption(url, path):
    from gradio_client import Client, handle_file

    from viewer.app.session import Style
    from viewer.app.ui import GUIDES_BY_DEFAULT
    client = Client(url, verbose=False)
    return client.predict(handle_file(str(path)), "sat-soft", "Greedy", 3, 1.0, 0, 20, "", GUIDES_BY_DEFAULT, *Style().inputs(),
                          api_name="/caption_photo")


@pytest.mark.parametrize("name, data, words", [
    ("notes.jpg", b"just text", "not an image"),
    ("cut.jpg", open(os.path.join(ASSETS, "coffee.jpg"), "rb").read()[:5000], "damaged or truncated"),
    ("bomb.png", None, "megapixels"),
])
def test_junk_uploads_get_a_readable_error_and_the_server_keeps_serving(server, tmp_path, name, data, words):
    url, _ = server
    path = tmp_path / name
    if data is None:
        Image.new("1", (20000, 20000)).save(path)
    else:
        path.write_bytes(data)
    with pytest.raises(Exception) as info:
        _caption(url, path)
    assert words in str(info.value) and "Traceback" not in str(info.value)
    assert "sat-soft" in _caption(url, os.path.join(ASSETS, "chelsea.jpg"))[1]   # beams, status, ...


def test_uploads_over_the_size_limit_are_refused(server, tmp_path):
    url, _ = server
    big = tmp_path / "huge.jpg"
    big.write_bytes(b"\xff\xd8" + os.urandom(61 * 2**20))
    with pytest.raises(Exception) as info:
        _caption(url, big)
    assert "large" in str(info.value).lower() or "size" in str(info.value).lower()


def test_no_file_outside_the_app_can_be_read(server):
    url, _ = server
    for trick in ("gradio_api/file=/etc/passwd", "gradio_api/file=../../../../etc/passwd",
                  "gradio_api/file=%2Fetc%2Fpasswd", "file=/etc/passwd"):
        try:
            with urllib.request.urlopen(url + trick, timeout=10) as resp:
                body = resp.read()
        except urllib.error.HTTPError as err:
            assert err.code in (400, 403, 404)
            continue
        assert b"root:" not in body


def test_export_names_cannot_escape_the_export_folder(studio_for_exports):
    from viewer.app import session as S
    studio, ex = studio_for_exports
    ex.photo.name = "../../../../tmp/evil name.jpg"
    path = studio.export_json(ex)
    assert os.path.realpath(path).startswith(os.path.realpath(studio.export_dir) + os.sep)
    assert os.path.basename(path).startswith("evil_name_")
    png = studio.export_png(ex, S.overlay(ex, S.Style()), "view")
    assert os.path.dirname(os.path.dirname(png)) == studio.export_dir


def test_exports_are_bounded_and_removed_on_close(captioner, photo):
    from viewer.app.session import Studio
    from viewer.engine.decoding import DecodeSettings
    studio = Studio(captioner, max_exports=3)
    ex = studio.explore(photo, "sat-soft", DecodeSettings(strategy="greedy"))
    for _ in range(6):
        studio.export_json(ex)
    assert len(os.listdir(studio.export_dir)) == 3
    studio.close()
    assert not os.path.exists(studio.export_dir)


@pytest.fixture
def studio_for_exports(captioner, photo):
    from viewer.app.session import Studio
    from viewer.engine.decoding import DecodeSettings
    studio = Studio(captioner)
    yield studio, studio.explore(photo, "sat-soft", DecodeSettings(strategy="greedy"))
    studio.close()


def _start(args, timeout=120):
    """Run launch.py until its page answers; returns (process, seconds to a usable page, stderr so far)."""
    from viewer.app import free_port
    port = free_port()
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "launch.py", "--port", str(port), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    while time.perf_counter() - start < timeout:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=2):
                return proc, port, time.perf_counter() - start
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"launch.py did not serve a page: {proc.communicate()[1][-2000:]}")


def _listening_addresses(port: int) -> set[str]:
    """IPv4 addresses with a listening socket on `port`, read from /proc/net/tcp."""
    found = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(".".join(str(int(address[i:i + 2], 16)) for i in (6, 4, 2, 0)))
    return found


def test_launch_binds_to_loopback_by_default_and_warns_otherwise(tiny_checkpoints):
    proc, port, seconds = _start(["--checkpoints", tiny_checkpoints])
    try:
        print(f"\nstartup to a usable page: {seconds:.1f} s")
        assert _listening_addresses(port) == {"127.0.0.1"}
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    proc, port, _ = _start(["--checkpoints", tiny_checkpoints, "--host", "0.0.0.0"])
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert "warning: binding to 0.0.0.0" in err
