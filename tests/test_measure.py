"""Measurement from outside the teaching code: on a GPU the clock is read only after the GPU's work is done."""

import pytest
import torch

from attention_book.measure import benchmark, profile


@pytest.fixture
def events(monkeypatch):
    """A pretend CUDA machine whose synchronisations and clock readings are recorded in order."""
    recorded = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: recorded.append("sync"))
    monkeypatch.setattr(benchmark, "perf_counter", lambda: recorded.append("clock") or float(len(recorded)))
    return recorded


def test_each_generation_step_is_synchronised_before_the_clock(events):
    def steps():
        for token in range(3):
            events.append("step")
            yield token

    seconds, last = benchmark.time_steps(steps())
    assert (len(seconds), last) == (3, 2)
    after_steps = [events[i + 1:i + 3] for i, event in enumerate(events) if event == "step"]
    assert after_steps == [["sync", "clock"]] * 3


def test_each_timed_call_is_synchronised_before_the_clock(events):
    benchmark.interleaved_medians({"a": lambda: events.append("call")}, repeats=2, progress=False)
    timed = [events[i + 1:i + 3] for i, event in enumerate(events) if event == "call"][1:]  # after the warm-up
    assert timed == [["sync", "clock"]] * 2


def test_cpu_work_on_a_cuda_machine_does_not_start_cuda(monkeypatch):
    """Timing CPU code must not initialise CUDA (seconds of start-up inside the first measurement)."""
    def synchronize():
        raise AssertionError("synchronised a GPU that this process never used")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    benchmark.synchronize()


def test_a_rate_spread_swaps_the_time_quartiles():
    # times 1, 2, 4, 8, 16 s of 16 units: the slowest quarter is the lowest rate
    seconds = [2.0, 16.0, 1.0, 8.0, 4.0]
    rates = benchmark.rate_spread(16.0, seconds)
    times = benchmark.spread(seconds)
    assert rates == {"median": 16.0 / times["median"], "q1": 16.0 / times["q3"], "q3": 16.0 / times["q1"]}
    assert rates["q1"] < rates["median"] < rates["q3"]
    with pytest.raises(ValueError, match="amount must be positive, got 0"):
        benchmark.rate_spread(0, seconds)


def test_the_load_average_names_its_windows_and_the_cores():
    load = benchmark.load_average()
    assert set(load) == {"cores", "1 min", "5 min", "15 min"}
    assert load["cores"] >= 1 and all(load[k] >= 0 for k in ("1 min", "5 min", "15 min"))


def test_a_read_counts_each_byte_once_and_a_copy_twice(monkeypatch):
    """The read-only stream is compared with the copy's whole rate (chapter 7): per round, read GB/s over
    copy GB/s is copy time / (2 · read time)."""
    times = {"copy": [2.0, 4.0, 3.0], "read": [1.0, 1.0, 3.0]}
    monkeypatch.setattr(profile, "interleaved_times", lambda functions, repeats, progress: times)
    rates = profile.memory_bandwidth(megabytes=1, repeats=3)
    nbytes = 2**20 / 1e9
    assert rates["copy"] == benchmark.rate_spread(2 * nbytes, times["copy"])
    assert rates["read"] == benchmark.rate_spread(nbytes, times["read"])
    assert rates["read_over_copy"] == {"median": 1.0, "lowest": 0.5, "highest": 2.0}
    with pytest.raises(ValueError, match="megabytes"):
        profile.memory_bandwidth(megabytes=0)


def test_the_last_level_cache_is_the_largest_size_sysfs_lists(tmp_path):
    for index, size in (("index0", "48K"), ("index2", "1024K"), ("index3", "32768K")):
        (tmp_path / index).mkdir()
        (tmp_path / index / "size").write_text(size + "\n")
    (tmp_path / "index1").mkdir()  # no size: skipped
    assert benchmark.last_level_cache(tmp_path) == 32 * 2**20
    assert benchmark.last_level_cache(tmp_path / "absent") is None
