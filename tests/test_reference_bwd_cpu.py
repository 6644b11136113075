"""The host backward reference (csrc/reference/host_reference_bwd.h, groundwork for mha_bwd and benchmark_mha_bwd -v=1)
against central finite differences of the loss sum(dO * O): batch and group mode, GQA (dK/dV per query head, summed
over the group), every mask kind with windows and sink tokens, soft-cap, elementwise bias (dBias), ALiBi, sink logits
and dropout from fixed random values (tests/cpp/reference_bwd_check.cpp). No GPU needed."""
import subprocess

from conftest import build_host_check


def test_backward_reference_matches_finite_differences(tmp_path):
    exe = build_host_check("reference_bwd_check", tmp_path)
    r = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "reference_bwd_check: 8 cases ok" in r.stdout
