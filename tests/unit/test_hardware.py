from __future__ import annotations

from pytest_vllm_perf.serving import hardware

TWO = (("0", "NVIDIA H200"), ("1", "NVIDIA H200"))


def test_cuda_visible_devices_picks_the_gpus_of_the_hardware_class():
    # nvidia-smi lists the host's GPUs; a run pinned to one of two is a 1x class
    assert hardware.visible(TWO, None) == ("NVIDIA H200", "NVIDIA H200")
    assert hardware.visible(TWO, "1") == ("NVIDIA H200",)
    assert hardware.visible(TWO, "0,1") == ("NVIDIA H200", "NVIDIA H200")
    assert hardware.visible(TWO, "") == ()
    # UUIDs are not indices: every GPU nvidia-smi listed, rather than a guess
    assert hardware.visible(TWO, "GPU-5f3c") == ("NVIDIA H200", "NVIDIA H200")


def test_each_xdist_worker_takes_its_own_group_of_the_job_s_gpus():
    """``pytest -n 2`` on four GPUs: two each, in CUDA_VISIBLE_DEVICES order (a profile
    with tensor_parallel_size 2 fits each group); on two, one each; more workers than
    GPUs is refused with the counts."""
    import pytest

    from pytest_vllm_perf.serving.hardware import worker_devices

    four = ["3", "1", "0", "2"]
    assert [worker_devices(four, k, 2) for k in (0, 1)] == [(("3", "1"), 1), (("0", "2"), 1)]
    assert [worker_devices(["0", "1"], k, 2) for k in (0, 1)] == [(("0",), 1), (("1",), 1)]
    with pytest.raises(ValueError, match=r"3 pytest-xdist workers and 2 GPU.*per-gpu=2"):
        worker_devices(["0", "1"], 0, 3)


def test_workers_share_a_gpu_only_when_asked_and_each_knows_how_many_share_it():
    """``pytest -n 2 --vllm-workers-per-gpu 2`` on one H200: both workers take GPU 0 and
    know it is shared by 2 (each server then takes its share of the memory); three
    workers on two GPUs: GPU 0 shared by workers 0 and 2, GPU 1 by worker 1 alone;
    asking for too few per GPU is still refused."""
    import pytest

    from pytest_vllm_perf.serving.hardware import hardware_class, worker_devices

    assert [worker_devices(["0"], k, 2, per_gpu=2) for k in (0, 1)] == [(("0",), 2)] * 2
    three = [worker_devices(["0", "1"], k, 3, per_gpu=2) for k in range(3)]
    assert three == [(("0",), 2), (("1",), 1), (("0",), 2)]
    with pytest.raises(ValueError, match="3 pytest-xdist workers and 1 GPU"):
        worker_devices(["0"], 0, 3, per_gpu=2)
    assert hardware_class("cpu", 2).startswith("cpu: ")  # no GPU: nothing is shared
