"""The tfds route without the data and without a network: one clear error, at once, saying what to put
where -- not tfds's minutes of download retries ending in a connection error."""
from __future__ import annotations

import socket

import pytest

pytest.importorskip("tensorflow_datasets", reason="tensorflow-datasets (the optional lra[tfds] extra) is not installed")

import tensorflow_datasets as tfds  # noqa: E402

from lra.cli import main  # noqa: E402
from tasks import tfds_source  # noqa: E402
from tests.tasks import tfds_builders  # noqa: E402

NO_NAME = "[Errno -2] Name or service not known"


@pytest.fixture
def empty_data_dir(tmp_path, monkeypatch):
    """A data dir with an empty tensorflow_datasets/ folder (tfds looks there, not in ~), no proxy."""
    (tmp_path / "tensorflow_datasets").mkdir()
    monkeypatch.setattr(tfds_source.urllib.request, "getproxies", dict)
    return tmp_path


@pytest.fixture
def no_download(monkeypatch):
    """Fails the test if tfds starts a download."""
    def download(self, *args, **kwargs):
        raise AssertionError(f"tfds started downloading {self.name}")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", download)


def test_an_unreachable_server_stops_before_any_download(empty_data_dir, no_download, monkeypatch):
    probed = []
    monkeypatch.setattr(tfds_source, "unreachable", lambda host, port: probed.append((host, port)) or NO_NAME)
    with pytest.raises(FileNotFoundError) as err:
        tfds_source.prepare("imdb_reviews", empty_data_dir, otherwise="put aclImdb/ under the data dir")
    text = str(err.value)
    assert probed == [("ai.stanford.edu", 80)]
    assert "tfds 'imdb_reviews' is not prepared in " + str(empty_data_dir / "tensorflow_datasets") in text
    assert f"ai.stanford.edu cannot be reached from here ({NO_NAME})" in text
    assert f"copy its folder (imdb_reviews/ of ~/tensorflow_datasets) to {empty_data_dir / 'tensorflow_datasets'}/" in text
    assert text.endswith("; or put aclImdb/ under the data dir.")


def test_missing_data_is_said_once_without_tfds_warnings(empty_data_dir, no_download, monkeypatch, capfd, caplog):
    """tfds logs a warning of its own for a data set it has not prepared ("Variant folder ... has no
    dataset_info.json"); the error that follows says it all, so nothing else is printed."""
    import logging

    monkeypatch.setattr(tfds_source, "unreachable", lambda host, port: NO_NAME)
    with caplog.at_level(logging.WARNING), pytest.raises(FileNotFoundError, match="is not prepared"):
        tfds_source.prepare("imdb_reviews", empty_data_dir)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    captured = capfd.readouterr()
    assert "dataset_info" not in captured.err + captured.out
    assert logging.getLogger("absl").level < logging.ERROR  # the logger is left as it was


def test_a_failed_download_says_what_to_put_where(empty_data_dir, monkeypatch):
    import requests

    monkeypatch.setattr(tfds_source, "unreachable", lambda host, port: None)

    def download(self, *args, **kwargs):
        raise requests.exceptions.ConnectionError("Max retries exceeded")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", download)
    with pytest.raises(FileNotFoundError, match=r"tfds could not download and prepare 'cifar10' in .*: Max retries "
                                                r"exceeded\. Prepare it where there is a network"):
        tfds_source.prepare("cifar10", empty_data_dir)


def test_behind_a_proxy_tfds_tries_the_download_itself(empty_data_dir, monkeypatch):
    def probe(host, port):
        raise AssertionError("probed a server directly behind a proxy")

    monkeypatch.setattr(tfds_source, "unreachable", probe)
    monkeypatch.setattr(tfds_source.urllib.request, "getproxies", lambda: {"https": "http://proxy:3128"})

    def download(self, *args, **kwargs):
        raise OSError("proxy refused")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare", download)
    with pytest.raises(FileNotFoundError, match="could not download and prepare 'imdb_reviews'.*proxy refused"):
        tfds_source.prepare("imdb_reviews", empty_data_dir)


def test_prepared_data_needs_no_server(tmp_path, monkeypatch):
    tfds_builders.prepare("imdb_reviews", tmp_path / "tensorflow_datasets")
    monkeypatch.setattr(tfds_source, "unreachable", lambda host, port: pytest.fail("probed with the data prepared"))
    tfds_source.prepare("imdb_reviews", tmp_path)


def test_unreachable_tells_a_closed_port_from_a_listening_one():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert tfds_source.unreachable("127.0.0.1", listening.getsockname()[1], timeout=5) is None
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))   # bound, not listening: connections are refused
        reason = tfds_source.unreachable("127.0.0.1", closed.getsockname()[1], timeout=5)
    assert reason and "refused" in reason.lower()


def test_lra_train_on_text_without_data_or_network_fails_at_once_with_the_fix(empty_data_dir, no_download,
                                                                              monkeypatch, capsys):
    monkeypatch.setattr(tfds_source, "unreachable", lambda host, port: NO_NAME)
    code = main(["train", "--task", "text", "--attention", "softmax", "--preset", "smoke",
                 "--data-dir", str(empty_data_dir), "--runs-dir", str(empty_data_dir / "runs")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "ai.stanford.edu cannot be reached from here" in err and "aclImdb/" in err and "Traceback" not in err


def test_reading_never_downloads(empty_data_dir, no_download, monkeypatch, capsys):
    """Readers that skip the DataModule's prepare step (`lra data check`, `lra eval`) go through the same
    check: tfds's own readers download by default."""
    monkeypatch.setattr(tfds_source, "unreachable", lambda host, port: NO_NAME)
    with pytest.raises(FileNotFoundError, match="www.cs.toronto.edu cannot be reached"):
        next(tfds_source.examples("cifar10", "train", empty_data_dir))
    code = main(["data", "check", "image", "--source", "tfds", "--data-dir", str(empty_data_dir)])
    err = capsys.readouterr().err
    assert code != 0 and "www.cs.toronto.edu cannot be reached" in err and "cifar-10-batches-py/" in err, err
