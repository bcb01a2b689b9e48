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
