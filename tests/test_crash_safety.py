"""Crash-safe sweeps (issue 17, item 4): checksummed chunks, damaged chunks detected and
recomputed, a full disk that loses nothing, and a study killed with SIGKILL at random moments
that resumes to the same bytes as an uninterrupted run."""

import errno
import io
import json
import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dpjax import cli, results, study, sweep
from dpjax.algorithms import dp_em
from dpjax.experiments._em_common import BetaError, InitNearTruth
from dpjax.models import GaussianMixture, sparse_unit_beta

REPO = Path(__file__).resolve().parents[1]
MODEL = GaussianMixture(0.5)
N, D, S, N0 = 200, 10, 2, 3
REPS = 4
FP = "0123456789abcdef"


# ---------------------------------------------------------------------------------------------
# The chunk format
# ---------------------------------------------------------------------------------------------


def _arrays(rows=3, seed=0):
    rng = np.random.default_rng(seed)
    return {"error": rng.standard_normal((rows, 2, 5)).astype(np.float32),
            "clip": rng.uniform(size=(rows, 2, 5)).astype(np.float32)}


def _same(a, b):
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


def test_a_chunk_round_trips_with_its_header(tmp_path):
    path = tmp_path / "c.npz"
    arrays = _arrays()
    results.encode_chunk(path, FP, "setting", 3, 6, arrays)
    assert _same(results.decode_chunk(path, FP, "setting", 3, 6), arrays)
    with np.load(path) as f:
        meta = json.loads(f["__chunk__"].tobytes())
    assert meta["key"] == "setting" and (meta["start"], meta["stop"]) == (3, 6)
    assert meta["fingerprint"] == FP and len(meta["sha256"]) == 64
    assert meta["arrays"]["error"] == {"dtype": "<f4", "shape": [3, 2, 5]}
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_every_truncation_is_detected(tmp_path):
    path = tmp_path / "c.npz"
    results.encode_chunk(path, FP, "k", 0, 3, _arrays())
    blob = path.read_bytes()
    for n in range(len(blob)):
        path.write_bytes(blob[:n])
        with pytest.raises(results.ChunkError):
            results.decode_chunk(path, FP, "k", 0, 3)


def test_a_flipped_byte_is_detected_or_harmless(tmp_path):
    """Every single-byte corruption either fails verification or leaves the content intact
    (zip metadata such as timestamps): a damaged chunk is never used."""
    path = tmp_path / "c.npz"
    arrays = _arrays()
    results.encode_chunk(path, FP, "k", 0, 3, arrays)
    blob = path.read_bytes()
    detected = 0
    for i in range(len(blob)):
        bad = bytearray(blob)
        bad[i] ^= 0xFF
        path.write_bytes(bytes(bad))
        try:
            got = results.decode_chunk(path, FP, "k", 0, 3)
        except results.ChunkError:
            detected += 1
        else:
            assert _same(got, arrays), f"byte {i}: wrong data accepted"
    assert detected > 0.6 * len(blob)


def test_the_checksum_covers_the_data_not_just_the_zip_crc(tmp_path):
    """A re-packed archive with a consistent zip but one changed number fails the checksum."""
    path = tmp_path / "c.npz"
    results.encode_chunk(path, FP, "k", 0, 3, _arrays())
    with np.load(path) as f:
        members = {k: f[k] for k in f.files}
    members["error"][1, 0, 2] += 1e-3
    np.savez(path, **members)
    with pytest.raises(results.ChunkError, match="checksum mismatch"):
        results.decode_chunk(path, FP, "k", 0, 3)


@pytest.mark.parametrize("expect,match", [
    (("other-fp0000000", "k", 0, 3), "holds fingerprint"),
    ((FP, "other", 0, 3), "holds key 'k'"),
    ((FP, "k", 3, 6), "holds start 0"),
    ((FP, "k", 0, 2), "holds stop 3"),
])
def test_a_chunk_of_another_setting_range_or_configuration_is_refused(tmp_path, expect, match):
    path = tmp_path / "c.npz"
    results.encode_chunk(path, FP, "k", 0, 3, _arrays())
    with pytest.raises(results.ChunkError, match=match):
        results.decode_chunk(path, *expect)


def test_files_that_are_not_verified_chunks_are_refused(tmp_path):
    path = tmp_path / "c.npz"
    np.savez(path, **_arrays())  # the old format: no header, no checksum
    with pytest.raises(results.ChunkError, match="no checksum"):
        results.decode_chunk(path, FP, "k", 0, 3)
    np.save(tmp_path / "a.npy", np.zeros(3))
    with pytest.raises(results.ChunkError, match="not an .npz"):
        results.decode_chunk(tmp_path / "a.npy", FP, "k", 0, 3)
    # a consistent header and checksum for arrays of the wrong length
    arrays = _arrays(rows=4)
    header = results._chunk_header(FP, "k", 0, 3, arrays)
    meta = header | {"sha256": results._chunk_digest(header, arrays)}
    np.savez(path, **arrays, __chunk__=np.frombuffer(json.dumps(meta).encode(), np.uint8))
    with pytest.raises(results.ChunkError, match="not 3 repetitions"):
        results.decode_chunk(path, FP, "k", 0, 3)
    with pytest.raises(ValueError, match="expected 3 repetitions"):
        results.encode_chunk(path, FP, "k", 0, 3, arrays)


# ---------------------------------------------------------------------------------------------
# A toy study: damaged chunks on resume
# ---------------------------------------------------------------------------------------------


def _setting(key):
    return sweep.Setting(
        key=key, columns={"method": "hd-dp-em", "n": N, "d": D, "s": S},
        estimator=dp_em.hd_dp_em(MODEL, S, N0), simulate=MODEL.simulate,
        init=InitNearTruth(0.125), record=BetaError(), truth=sparse_unit_beta(D, S),
        plan=sweep.DataPlan(N0, N // N0), hparams_type=dp_em.DPEMHyperparams,
        levels=tuple({"epsilon": e, "delta": 1 / (2 * N), "eta": 0.5, "truncation": 2.0}
                     for e in (0.5, math.inf)), n=N,
    )


TOY = study.Experiment(
    name="toy", title="toy study", defaults={"seed_label": "a"},
    settings=lambda c: [_setting("toy-a"), _setting("toy-b")], reps=REPS, quick_reps=2,
)


def _run(out, **kw):
    return study.run_experiment(TOY, out, reps=REPS, seed=5, chunk_size=1, progress=False,
                                num_devices=1, **kw)


def _chunks(out):
    return sorted(Path(out, "chunks").glob("*/*.npz"))


def _files(out):
    return {name: Path(out, name).read_bytes()
            for name in ("results.csv", "iterations.csv", "summary.csv")}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """An uninterrupted toy run: its directory and results files."""
    out = tmp_path_factory.mktemp("finished")
    _run(out)
    assert len(_chunks(out)) == 2 * REPS
    return out, _files(out)


@pytest.fixture
def kernel_calls(monkeypatch):
    """The repetitions of every kernel call (what a run computes rather than loads)."""
    calls = []
    real, real_shared = sweep.make_kernel, sweep.make_shared_kernels

    def count(kernel):
        def wrapped(reps, *rest):
            calls.append(np.asarray(reps).tolist())
            return kernel(reps, *rest)

        return wrapped

    def counting(*args, **kwargs):
        return count(real(*args, **kwargs))

    def counting_shared(*args, **kwargs):  # a shared program: its algorithm calls
        data, alg = real_shared(*args, **kwargs)
        return data, count(alg)

    monkeypatch.setattr(sweep, "make_kernel", counting)
    monkeypatch.setattr(sweep, "make_shared_kernels", counting_shared)
    return calls


def _folder(out, key):
    return Path(out, "chunks", results._safe(key))


def _truncate(path, out):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _empty(path, out):
    path.write_bytes(b"")


def _flip(path, out):
    """Flip one bit inside the data of the ``error`` array (np.savez stores members
    uncompressed: local header, name, a 128-byte .npy header, then the data)."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = z.getinfo("error.npy")
    blob = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 128
    blob[start + 2] ^= 0x01
    path.write_bytes(bytes(blob))


def _other_range(path, out):
    shutil.copyfile(path.with_name("reps-0000001-0000002.npz"), path)


def _other_setting(path, out):
    shutil.copyfile(_folder(out, "toy-b") / path.name, path)


def _other_configuration(path, out):
    fp = (Path(out) / "chunks" / "fingerprint.txt").read_text().strip()
    arrays = results.decode_chunk(path, fp, "toy-a", 2, 3)
    results.encode_chunk(path, "another-fp000000", "toy-a", 2, 3, arrays)


def _old_format(path, out):
    with np.load(path) as f:
        arrays = {k: f[k] for k in f.files if k != "__chunk__"}
    np.savez(path, **arrays)


@pytest.mark.parametrize("damage", [_truncate, _empty, _flip, _other_range, _other_setting,
                                    _other_configuration, _old_format])
def test_a_damaged_chunk_is_reported_moved_aside_and_recomputed(finished, tmp_path, capsys,
                                                                kernel_calls, damage):
    src, expected = finished
    out = tmp_path / "run"
    shutil.copytree(src, out)
    for name in expected:
        (out / name).unlink()
    target = _folder(out, "toy-a") / "reps-0000002-0000003.npz"
    damage(target, out)
    capsys.readouterr()

    _run(out)

    err = capsys.readouterr().err
    assert f"dpjax: warning: damaged chunk {target} (" in err, err
    assert err.count("damaged chunk") == 1
    assert kernel_calls == [[2]]  # only the damaged chunk was computed again
    assert target.with_name(target.name + ".corrupt").exists()
    fp = (out / "chunks" / "fingerprint.txt").read_text().strip()
    assert _same(results.decode_chunk(target, fp, "toy-a", 2, 3),
                 results.decode_chunk(_folder(src, "toy-a") / target.name, fp, "toy-a", 2, 3))
    assert _files(out) == expected


def test_temporary_files_of_a_killed_run_are_removed_and_never_used(finished, tmp_path,
                                                                    kernel_calls):
    src, expected = finished
    out = tmp_path / "run"
    shutil.copytree(src, out)
    target = _folder(out, "toy-a") / "reps-0000002-0000003.npz"
    stale = [target.with_name(f".{target.name}.x1y2z3.tmp"), out / ".results.csv.a1b2c3.tmp",
             out / "chunks" / ".fingerprint.txt.q9w8e7.tmp"]
    shutil.copyfile(target, stale[0])  # even a complete copy: only the rename completes a chunk
    target.unlink()
    for p in stale[1:]:
        p.write_text("partial")
    _run(out)
    assert kernel_calls == [[2]]
    assert not any(p.exists() for p in stale)
    assert _files(out) == expected


def test_valid_chunks_that_disagree_in_shape_stop_the_run(finished, tmp_path):
    """Chunks that verify but hold other metrics than the rest (another dpjax version) are not
    mixed: the run stops with a clear error."""
    src, _ = finished
    out = tmp_path / "run"
    shutil.copytree(src, out)
    fp = (out / "chunks" / "fingerprint.txt").read_text().strip()
    target = _folder(out, "toy-a") / "reps-0000002-0000003.npz"
    arrays = results.decode_chunk(target, fp, "toy-a", 2, 3)
    results.encode_chunk(target, fp, "toy-a", 2, 3, arrays | {"extra": arrays["error"]})
    with pytest.raises(study.ConfigError, match="the chunks of setting 'toy-a' disagree"):
        _run(out)


# ---------------------------------------------------------------------------------------------
# A full disk
# ---------------------------------------------------------------------------------------------


def _enospc():
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.fixture
def disk_full(monkeypatch):
    """``arm(point, nth)``: the ``nth`` chunk written fails with ENOSPC at ``point`` --
    creating its temporary file, halfway through writing it, at fsync, or at the rename;
    ``point="results"`` fails the rename of results.csv. Returns a dict; set ``off`` to free
    the disk."""
    state = {"saves": 0, "armed": False, "off": False}

    def arm(point, nth=0):
        real_save = results.ChunkStore.save

        def save(self, key, i, arr):
            state["saves"] += 1
            state["armed"] = state["saves"] == nth and not state["off"]
            try:
                real_save(self, key, i, arr)
            finally:
                state["armed"] = False

        monkeypatch.setattr(results.ChunkStore, "save", save)
        if point == "create":
            real_mkstemp = results.tempfile.mkstemp

            def mkstemp(*args, **kwargs):
                if state["armed"]:
                    raise _enospc()
                return real_mkstemp(*args, **kwargs)

            monkeypatch.setattr(results.tempfile, "mkstemp", mkstemp)
        elif point == "write":
            real_savez = np.savez

            def savez(f, *args, **arrays):
                if not state["armed"]:
                    return real_savez(f, *args, **arrays)
                buf = io.BytesIO()
                real_savez(buf, *args, **arrays)
                f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
                raise _enospc()

            monkeypatch.setattr(np, "savez", savez)
        elif point == "fsync":
            real_fsync = os.fsync

            def fsync(fd):
                if state["armed"] and stat.S_ISREG(os.fstat(fd).st_mode):
                    raise _enospc()
                return real_fsync(fd)

            monkeypatch.setattr(os, "fsync", fsync)
        elif point in ("replace", "results"):
            real_replace = os.replace

            def replace(src, dst, *args, **kwargs):
                name = Path(dst).name
                if not state["off"] and (
                        (point == "replace" and state["armed"] and name.endswith(".npz"))
                        or (point == "results" and name == "results.csv")):
                    raise _enospc()
                return real_replace(src, dst, *args, **kwargs)

            monkeypatch.setattr(os, "replace", replace)
        else:  # pragma: no cover
            raise ValueError(point)
        return state

    return arm


def _no_partial_files(out):
    left = [p for p in Path(out).rglob("*") if p.name.endswith(".tmp")]
    assert left == [], left


@pytest.mark.parametrize("point", ["create", "write", "fsync", "replace"])
def test_a_full_disk_keeps_earlier_chunks_and_a_rerun_resumes(finished, tmp_path, disk_full,
                                                             kernel_calls, point):
    src, expected = finished
    out = tmp_path / "run"
    state = disk_full(point, nth=3)
    with pytest.raises(results.StorageError) as info:
        _run(out)
    exc = info.value
    assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    assert isinstance(exc, study.ConfigError)  # what the command line prints in one line
    target = _folder(out, "toy-a") / "reps-0000002-0000003.npz"
    assert str(exc) == (f"could not write {target}: No space left on device (ENOSPC); completed "
                        "chunks are kept: free some space and rerun the same command to resume")
    # the two earlier chunks are intact, the failed one is not there, nor any partial file
    fp = (out / "chunks" / "fingerprint.txt").read_text().strip()
    assert _chunks(out) == sorted(_folder(out, "toy-a") / f"reps-{a:07d}-{a + 1:07d}.npz"
                                  for a in (0, 1))
    for p in _chunks(out):
        a = int(p.name.split("-")[1])
        assert _same(results.decode_chunk(p, fp, "toy-a", a, a + 1),
                     results.decode_chunk(_folder(src, "toy-a") / p.name, fp, "toy-a", a, a + 1))
    _no_partial_files(out)
    assert not (out / "results.csv").exists()

    state["off"] = True  # space freed: the rerun computes only what is missing
    kernel_calls.clear()
    _run(out)
    assert kernel_calls == [[2], [3], [0], [1], [2], [3]]
    assert _files(out) == expected
    _no_partial_files(out)


def _toy_cli(monkeypatch, out, *extra):
    monkeypatch.setattr(cli, "_registry", lambda: {"toy": TOY})
    return ["run", "toy", "--out", str(out), "--reps", str(REPS), "--chunk-size", "1",
            "--seed", "5", "--no-progress", *extra]


def test_the_command_line_reports_a_full_disk_in_one_line(finished, tmp_path, capsys,
                                                          monkeypatch, disk_full):
    _, expected = finished
    args = _toy_cli(monkeypatch, tmp_path)
    state = disk_full("write", nth=3)
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    target = _folder(tmp_path, "toy-a") / "reps-0000002-0000003.npz"
    assert err == (f"dpjax: error: could not write {target}: No space left on device (ENOSPC); "
                   "completed chunks are kept: free some space and rerun the same command to "
                   "resume\n")
    state["off"] = True
    assert cli.main(args) == 0
    assert _files(tmp_path) == expected


def test_a_full_disk_at_the_results_files(finished, tmp_path, capsys, monkeypatch, disk_full,
                                          kernel_calls):
    _, expected = finished
    args = _toy_cli(monkeypatch, tmp_path)
    state = disk_full("results")
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err == (f"dpjax: error: could not write {tmp_path / 'results.csv'}: No space left on "
                   "device (ENOSPC)\n")
    _no_partial_files(tmp_path)
    assert len(_chunks(tmp_path)) == 2 * REPS
    state["off"] = True
    kernel_calls.clear()
    assert cli.main(args) == 0
    assert kernel_calls == []  # every chunk was complete
    assert _files(tmp_path) == expected


def test_the_command_line_refuses_another_configuration_in_one_line(finished, tmp_path, capsys,
                                                                    monkeypatch):
    src, _ = finished
    shutil.copytree(src, tmp_path / "run")
    args = _toy_cli(monkeypatch, tmp_path / "run", "--seed", "6")
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"dpjax: error: {tmp_path / 'run'} holds results of a different "
                          "configuration") and err.count("\n") == 1


# ---------------------------------------------------------------------------------------------
# SIGKILL at random moments
# ---------------------------------------------------------------------------------------------

# em_fig1 cut down to one setting (n = 20000, d = 20, s = 2; epsilon 0.5 and infinity), 20
# chunks of one repetition: about 4-6 s per uninterrupted run on 2 shared CPU cores with a warm
# compilation cache, a third of it spent starting, a third computing and writing chunks, a third
# writing the results files and drawing the figure.
KILL_STUDY = ["run", "em_fig1", "--quick", "--reps", "20", "--chunk-size", "1", "--no-progress",
              "--set", "d=20", "--set", "n_grid=20000", "--set", "s_grid=2",
              "--set", "n_base=20000", "--set", "s_base=2", "--set", "large_n=20000",
              "--set", "eps_grid=0.5"]
COMPARED = ("results.csv", "summary.csv", "iterations.csv")


def _study_env(cache):
    env = dict(os.environ)  # XLA_FLAGS of conftest included: the same flags in every run
    env.update(JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""))
    return env


def _start(out, env):
    return subprocess.Popen([sys.executable, "-m", "dpjax.cli", *KILL_STUDY, "--out", str(out)],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc):
    try:
        _, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, stderr.decode()[-3000:]
    return stderr.decode()


def _config_without_timings(out):
    cfg = json.loads(Path(out, "config.json").read_text())
    cfg.pop("environment")
    cfg.pop("timing")  # seconds and programs compiled: facts of the run (the cache is warm)
    for s in cfg["settings"]:
        s.pop("seconds")
        s.pop("compiled")  # whether this process compiled the program: a fact of the run
        for k in ("programs_compiled", "compile_seconds", "programs_from_cache"):
            s.pop(k)
        s.pop("peak_rss_gb", None)  # the process's memory so far: a fact of the run
    return cfg


def _all_chunks_verify(out):
    marker = Path(out, "chunks", "fingerprint.txt")
    if not marker.exists():
        # killed between creating chunks/ and writing its marker: the store writes the marker
        # before any chunk, so there is none to verify
        assert not list(Path(out, "chunks").rglob("*.npz"))
        return 0
    fp = marker.read_text().strip()
    n = 0
    for p in Path(out, "chunks").glob("*/*.npz"):
        a, b = (int(x) for x in p.stem.split("-")[1:])
        with np.load(p) as f:  # the key is in the header; decode_chunk checks the rest
            key = json.loads(f["__chunk__"].tobytes())["key"]
        assert p.parent.name == results._safe(key)
        results.decode_chunk(p, fp, key, a, b)
        n += 1
    return n


def _same_results(out, ref):
    for name in COMPARED:
        assert (out / name).read_bytes() == (ref / name).read_bytes(), (out, name)
    assert _config_without_timings(out) == _config_without_timings(ref)


def _kill_and_resume(tmp_path, kills, seed=20261122):
    """Run the study uninterrupted (twice: to fill the compilation cache, then timed), then
    start it, SIGKILL it at a random moment of that duration, start it again in the same
    directory, ... ``kills`` times. The moments are stratified (one uniform draw in each
    ``kills``-th of the duration, in increasing order) so that they sweep every phase of a run:
    starting, computing and writing chunks, writing the results files, drawing the figure. A run
    that finishes before its moment completes its directory: its files are compared with the
    uninterrupted run's and the next run starts a fresh directory. After every kill every chunk
    file on disk verifies; the last directory is run to completion and compared."""
    env = _study_env(tmp_path / "jax-cache")
    ref = tmp_path / "reference"
    _finish(_start(ref, env))  # compiles and fills the cache
    t0, wall0 = time.perf_counter(), time.time()
    timed = tmp_path / "timed"
    _finish(_start(timed, env))
    duration = time.perf_counter() - t0
    _same_results(timed, ref)
    total = _all_chunks_verify(ref)
    # when the timed run wrote its chunks (relative to its start): the window of the retries
    written = sorted(p.stat().st_mtime - wall0 for p in (timed / "chunks").rglob("*.npz"))

    u = np.random.default_rng(seed).uniform(size=kills)
    moments = (np.arange(kills) + u) / kills * duration
    fresh = iter(tmp_path / f"killed-{i}" for i in range(kills + 1))
    out, outcomes = next(fresh), []
    for t in moments:
        before = _all_chunks_verify(out) if (out / "chunks").exists() else 0
        proc = _start(out, env)
        try:
            proc.wait(timeout=t)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode in (0, -signal.SIGKILL), stderr.decode()[-3000:]
        assert "damaged chunk" not in stderr.decode()
        after = _all_chunks_verify(out) if (out / "chunks").exists() else 0
        outcomes.append((round(float(t / duration), 2), proc.returncode, before, after))
        if proc.returncode == 0:
            _no_partial_files(out)
            _same_results(out, ref)
            out = next(fresh)
    stderr = _finish(_start(out, env))
    assert "damaged chunk" not in stderr
    assert _all_chunks_verify(out) == total
    _no_partial_files(out / "chunks")
    _same_results(out, ref)
    # some kills interrupted a run while it was computing and writing chunks; where the
    # stratified moments all missed that phase (a fast kernel makes it a small part of the run),
    # kill fresh runs at moments inside the phase as the timed run saw it
    mid = [o for o in outcomes if o[1] == -signal.SIGKILL and o[2] < o[3] < total]
    rng = np.random.default_rng(seed + 1)
    for i in range(6 if not mid else 0):
        out = tmp_path / f"retry-{i}"
        t = rng.uniform(written[0], written[-1]) if written else rng.uniform(0, duration)
        proc = _start(out, env)
        try:
            proc.wait(timeout=max(t, 0.01))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        after = _all_chunks_verify(out) if (out / "chunks").exists() else 0
        outcomes.append((round(float(t / duration), 2), proc.returncode, 0, after))
        if proc.returncode == -signal.SIGKILL and 0 < after < total:
            stderr = _finish(_start(out, env))  # and this one resumes to the same bytes too
            assert "damaged chunk" not in stderr
            _same_results(out, ref)
            mid = [outcomes[-1]]
            break
    print(f"\nuninterrupted run {duration:.2f} s, {total} chunks; {len(mid)} kills between "
          f"chunks; (moment/duration, status, chunks before, after): {outcomes}")
    assert mid, outcomes


def test_a_study_killed_at_random_moments_resumes_to_the_same_bytes(tmp_path):
    _kill_and_resume(tmp_path, kills=8)


@pytest.mark.slow
def test_a_study_killed_at_20_random_moments_resumes_to_the_same_bytes(tmp_path):
    _kill_and_resume(tmp_path, kills=20, seed=17)
