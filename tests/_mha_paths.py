"""Where the built aiter_mha module lives, for the binding tests (test_binding_cpu.py, test_gpu_fwd*.py), and the repo root.

compile.py leaves aiter_mha<EXT_SUFFIX> next to libmha_fwd.so in the directory it runs in: the repo root by default,
or $MHA_BUILD_DIR when set (searched first). load_binding() puts both on sys.path and imports the module.
"""
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def binding_dirs():
    """Directories searched for aiter_mha, highest priority first."""
    dirs = []
    build = os.environ.get("MHA_BUILD_DIR")
    if build:
        dirs.append(str(Path(build).resolve()))
    dirs.append(str(REPO_ROOT))
    return dirs


def load_binding():
    """Return (aiter_mha module, "") or (None, reason it could not be imported)."""
    for d in reversed(binding_dirs()):  # insert lowest priority first so the first dir ends up at sys.path[0]
        if d in sys.path:
            sys.path.remove(d)
        sys.path.insert(0, d)
    try:
        import aiter_mha
    except Exception as e:  # ImportError, or OSError when libmha_fwd.so / libcudart cannot be loaded
        where = " or ".join(binding_dirs())
        return None, (f"aiter_mha is not importable from {where} ({type(e).__name__}: {e}); "
                      f"build it with `python3 compile.py` (needs pybind11)")
    return aiter_mha, ""


def gpu_test_modules(what):
    """(torch, aiter_mha) for a GPU test module, or skip the whole module with the reason; `what` names its tests.

    On a machine with an NVIDIA GPU (nvidia-smi lists one) a missing torch, a torch without CUDA or a binding that does
    not import is an error, not a skip: otherwise every GPU test module would skip and the run still pass.
    MHA_ALLOW_GPU_SKIPS=1 skips there too."""
    import pytest
    from conftest import gpu_available

    strict = gpu_available()[0] and os.environ.get("MHA_ALLOW_GPU_SKIPS") != "1"

    def give_up(reason):
        if strict:
            pytest.fail(f"{reason} (this machine has a GPU: the {what} must run; MHA_ALLOW_GPU_SKIPS=1 skips them)",
                        pytrace=False)
        pytest.skip(reason, allow_module_level=True)

    try:
        import torch
    except ImportError:
        give_up("torch is not installed: the GPU tests need it as their reference, and an NVIDIA GPU")
    if not torch.cuda.is_available():
        give_up(f"torch.cuda is not available: the {what} need an NVIDIA GPU")
    module, reason = load_binding()
    if module is None:
        give_up(reason)
    return torch, module
