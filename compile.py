#!/usr/bin/env python3
"""Build libmha_fwd.so / libmha_bwd.so (and the aiter_mha Python module) into the current directory.

Generates one small .cu per kernel instance plus the dispatch tables (csrc/codegen/generate.py), writes build.ninja
(csrc/codegen/ninja_writer.py) and runs ninja. Never imports torch. Rebuilding with nothing changed compiles nothing.

  python3 compile.py                         # every instance, for the visible GPU (else sm_80 + sm_90a)
  python3 compile.py --preset ci             # the smallest useful set
  python3 compile.py --api fwd --dtypes bf16 --hdims 128 --arch sm_90a
  python3 compile.py --list                  # instances and the support table; builds nothing
  MAX_JOBS=16 python3 compile.py             # parallel compile jobs (default: CPU count)
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import time

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "csrc", "codegen"))
import generate as gen  # noqa: E402
from ninja_writer import write_ninja  # noqa: E402

CUTLASS_PIN = "4.2.0.0"


class BuildError(Exception):
    pass


def csv(value: str, option: str = "") -> list[str]:
    """The items of a comma list; a value that lists nothing ("--api=,") is an error rather than the default."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if option and value.strip() and not items:
        raise BuildError(f"{option}={value!r} lists nothing: give at least one item, or leave {option} out for the "
                         "default")
    return items


class Once(argparse.Action):
    """An option that may be given once: a second value (e.g. an --api in AITER_MHA_COMPILE_ARGS beside the CMake
    module's own) is an error instead of argparse's silent last-one-wins."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = getattr(namespace, "_given", set())
        if self.dest in seen:
            parser.error(f"{option_string} given more than once (cmake/aiter_mha.cmake passes AITER_MHA_APIS as "
                         "--api: leave it out of AITER_MHA_COMPILE_ARGS)" if self.dest == "api" else
                         f"{option_string} given more than once")
        seen.add(self.dest)
        namespace._given = seen
        setattr(namespace, self.dest, values)


def executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_nvcc() -> str:
    """NVCC, then CUDA_HOME's (as torch's cpp_extension), then nvcc on PATH, then /usr/local/cuda's."""
    if os.environ.get("NVCC"):
        if not executable(os.environ["NVCC"]):
            raise BuildError(f"NVCC={os.environ['NVCC']} is not an executable file")
        return os.environ["NVCC"]
    if os.environ.get("CUDA_HOME"):
        cand = os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc")
        if executable(cand):
            return cand
        raise BuildError(f"CUDA_HOME={os.environ['CUDA_HOME']} has no bin/nvcc: point it at a CUDA toolkit (12.4 or "
                         "newer) or unset it to use the nvcc on PATH")
    for cand in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if cand and executable(cand):
            return cand
    raise BuildError("nvcc not found: install the CUDA toolkit (12.4 or newer), put nvcc on PATH, "
                     "or set NVCC=/path/to/nvcc or CUDA_HOME")


def find_cutlass() -> str:
    """CUTLASS_DIR, then 3rdparty/cutlass, then the nvidia-cutlass wheel (found without importing it)."""
    if os.environ.get("CUTLASS_DIR"):
        root = os.environ["CUTLASS_DIR"]
        for inc in (os.path.join(root, "include"), root):  # a checkout or its include/
            if os.path.isfile(os.path.join(inc, "cute", "tensor.hpp")):
                return inc
        raise BuildError(f"CUTLASS_DIR={root} holds no include/cute/tensor.hpp: point it at a CUTLASS checkout, or "
                         f"unset it to use `pip install nvidia-cutlass=={CUTLASS_PIN}` or 3rdparty/cutlass")
    cands = []
    cands.append(os.path.join(ROOT, "3rdparty", "cutlass", "include"))
    spec = importlib.util.find_spec("cutlass_library")
    if spec and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cands.append(os.path.join(loc, "source", "include"))
    for inc in cands:
        if os.path.isfile(os.path.join(inc, "cute", "tensor.hpp")):
            return inc
    raise BuildError("CUTLASS/CuTe headers not found. Install them with "
                     f"`pip install nvidia-cutlass=={CUTLASS_PIN}`, or set CUTLASS_DIR to a CUTLASS checkout, "
                     "or clone CUTLASS into 3rdparty/cutlass (see 3rdparty/README.md)")


def detect_archs() -> list[str]:
    """The visible GPUs' architectures, else sm_80 + sm_90a."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=20).stdout
            archs, unknown = [], []
            for line in out.split():
                major, minor = line.strip().split(".")
                name = f"sm_{major}{minor}" + ("a" if major in ("9", "10", "12") else "")
                if name in gen.ARCHS:
                    if name not in archs:
                        archs.append(name)
                elif line.strip() not in unknown:
                    unknown.append(line.strip())
            if unknown:
                print(f"compile.py: warning: no build target for the visible GPU(s) of compute capability "
                      f"{', '.join(unknown)} (targets: {', '.join(gen.ARCHS)}); the library will not run there. "
                      "Pass --arch to choose.", file=sys.stderr)
            if archs:
                return archs
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    return ["sm_80", "sm_90a"]


def python_build_info():
    """(include dirs and module suffix for the pybind11 binding, None) or (None, why it is skipped)."""
    try:
        import pybind11
    except ImportError:
        return None, "pybind11 not found"
    py_inc = sysconfig.get_paths()["include"]
    if not os.path.isfile(os.path.join(py_inc, "Python.h")):
        return None, f"Python headers not found in {py_inc} (install python3-dev)"
    return dict(includes=[pybind11.get_include(), py_inc],
                ext_suffix=sysconfig.get_config_var("EXT_SUFFIX") or ".so"), ""


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False) # build_mha.sh matches --list / --print-toolchain by name
    ap.add_argument("--api", action=Once, default="", help=f"comma list of {', '.join(gen.APIS)} (default: fwd,bwd, i.e. "
                                             "all). As in AITER, fwd builds mha_fwd, mha_fwd_splitkv and "
                                             "mha_batch_prefill; fwd_v3 / bwd_v3 (AITER's asm-only builds) build "
                                             "the mha_fwd / mha_bwd instances")
    ap.add_argument("--dtypes", action=Once, default="", help=f"comma list of {', '.join(gen.DTYPES)} (default: all)")
    ap.add_argument("--hdims", action=Once, default="", help="comma list of instance head dims: hdim_q ('192') or hdim_qxhdim_v "
                                                "('192x128') (default: all)")
    ap.add_argument("--variants", action=Once, default="", help=f"comma list of {', '.join(gen.ALL_VARIANTS)} (default: all; "
                                                   "'full' adds soft-cap, bias, ALiBi, sinks and dropout; the "
                                                   "backward's 'alibi' / 'dropout' have only that feature)")
    ap.add_argument("--arch", action=Once, default="", help=f"comma list of {', '.join(gen.ARCHS)}; sm_90 / sm_100 / sm_120 mean "
                                               "their 'a' targets (default: the visible GPU's, else sm_80,sm_90a)")
    ap.add_argument("--preset", action=Once, default="all", choices=sorted(gen.PRESETS), help="base instance set (default all)")
    ap.add_argument("--filter", action=Once, default="", help="fnmatch pattern on instance names, e.g. '*bf16_d128*'")
    ap.add_argument("--list", action="store_true", help="print the instances and the support table, build nothing")
    ap.add_argument("--build-dir", action=Once, default=os.path.join(os.getcwd(), "build"), help="objects and generated sources")
    ap.add_argument("--no-python", action="store_true", help="skip the aiter_mha Python module")
    ap.add_argument("--print-toolchain", action="store_true", help="print the nvcc this build uses (first line) and "
                    "the -gencode flags for host programs linking it (the build's archs plus compute_80 PTX), build "
                    "nothing; build_mha.sh links the benchmarks with them")
    return ap.parse_args(argv)


def resolve_selection(a):
    preset = gen.PRESETS[a.preset]
    apis = csv(a.api, "--api") or list(preset["apis"])
    for api in apis:
        if api not in gen.APIS:
            raise BuildError(f"unknown api '{api}': choose from {', '.join(gen.APIS)}")
    dtypes = csv(a.dtypes, "--dtypes") or list(preset["dtypes"])
    for d in dtypes:
        if d not in gen.DTYPES:
            raise BuildError(f"unknown dtype '{d}': choose from {', '.join(gen.DTYPES)}")
    hdims = csv(a.hdims, "--hdims") or (list(preset["hdims"]) if preset["hdims"] is not None else None)
    if hdims is not None:
        for h in hdims:
            if h not in gen.known_hdims():
                raise BuildError(f"unknown hdim {h}: instances exist for head dims "
                                 f"{', '.join(gen.known_hdims())} (smaller head dims run on the next larger "
                                 "instance)")
    variants = csv(a.variants, "--variants") or list(preset["variants"])
    for v in variants:
        if v not in gen.ALL_VARIANTS:
            raise BuildError(f"unknown variant '{v}': choose from {', '.join(gen.ALL_VARIANTS)}")
    # sm_90 / sm_100 / sm_120 name the GPUs; their kernels are built for the arch-specific targets (wgmma, TMA)
    archs = [{"sm_90": "sm_90a", "sm_100": "sm_100a", "sm_120": "sm_120a"}.get(x, x) for x in csv(a.arch, "--arch")]
    archs = list(dict.fromkeys(archs)) or detect_archs()
    for arch in archs:
        if arch not in gen.ARCHS:
            raise BuildError(f"unknown arch '{arch}': choose from {', '.join(gen.ARCHS)}")
    return apis, dtypes, hdims, variants, archs


ENTRY_POINTS = {"fwd": "mha_fwd", "fwd_splitkv": "mha_fwd_splitkv / mha_batch_prefill", "bwd": "mha_bwd"}


def check_nonempty(everything, chosen, apis, dtypes, hdims, pattern, variants):
    """Every requested api gets at least one instance, else the build would link a library without kernels; an api
    that serves several entry points (fwd) and is left with none for one of them gets a note naming it."""
    for api in apis:
        kinds = gen.API_INSTANCES[api]
        if not gen.select(chosen, [api], None, None, ""):
            have = sorted({i.variant for i in everything if i.api in kinds})
            raise BuildError(f"no instance for --api {api} matches the selection (dtypes {','.join(dtypes)}; hdims "
                             f"{','.join(hdims) if hdims else 'all'}; variants {','.join(variants)}"
                             f"{'; filter ' + repr(pattern) if pattern else ''}); its variants are {', '.join(have)}")
        for kind in kinds:
            if not any(i.api == kind for i in chosen):
                have = sorted({i.variant for i in everything if i.api == kind})
                print(f"[compile.py] note: --api {api} with this selection builds no {kind} instance: "
                      f"{ENTRY_POINTS[kind]} will answer 'not in this build' (its variants are {', '.join(have)})",
                      file=sys.stderr)
            elif kind == "fwd_splitkv" and not any(i.api == kind and i.variant == "full" for i in chosen):
                # the plain split-KV instances are decode tiles (up to 16 rows per KV head) without features
                print(f"[compile.py] note: --api {api} with this selection builds only plain split-KV decode tiles: "
                      f"{ENTRY_POINTS[kind]} calls with more than 16 query rows per KV head or with soft-cap, bias, "
                      "ALiBi, sinks or dropout will answer 'not in this build' (add --variants full)", file=sys.stderr)


def max_jobs() -> str:
    jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
    if not jobs.isdigit() or int(jobs) < 1:
        raise BuildError(f"MAX_JOBS={jobs!r}: give a positive number of parallel compile jobs")
    return jobs


def main(argv=None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        apis, dtypes, hdims, variants, archs = resolve_selection(a)
        everything = gen.all_instances(archs)
        chosen = gen.select(everything, apis, dtypes, hdims, a.filter, variants)
        # the asm family is sm_90a code only: a build without that target leaves its rows unbuilt
        chosen = [i for i in chosen if i.family != "asm_v3" or gen.ASM_ARCH in archs]
        if a.print_toolchain:
            print(find_nvcc())
            ptx = "-gencode=arch=compute_80,code=compute_80"
            print(" ".join([f"-gencode={gen.ARCHS[x][0]}" for x in archs] + [ptx]))
            return 0
        if a.list:
            print(f"instances: {len(chosen)} selected of {len(everything)} known")
            for i in everything:
                print(f"  [{'x' if i in chosen else ' '}] {i.name}")
            print(f"archs: {','.join(archs)}\n")
            print(gen.support_table(chosen, archs))
            # the same verdict the build would give on this selection
            check_nonempty(everything, chosen, apis, dtypes, hdims, a.filter, variants)
            return 0
        check_nonempty(everything, chosen, apis, dtypes, hdims, a.filter, variants)
        for api in apis:
            if api in ("fwd_v3", "bwd_v3"):
                print(f"[compile.py] --api {api}: AITER's asm-only build; there is no separate asm build here, so "
                      f"this builds the mha_{api[:3]} instances (asm and ck)", flush=True)
        jobs = max_jobs()
        nvcc = find_nvcc()
        cutlass = find_cutlass()
        ninja = shutil.which("ninja")
        if ninja is None:
            raise BuildError("ninja not found: `pip install ninja` or install your distribution's ninja-build")

        build_dir = os.path.abspath(a.build_dir)
        gen_dir = os.path.join(build_dir, "gen")
        sources, bwd_sources = [], []
        for i in chosen:
            path = os.path.join(gen_dir, "instances", i.name + ".cu")
            gen.write_if_changed(path, gen.instance_source(i))
            (bwd_sources if i.api == "bwd" else sources).append(path)
        gen.write_if_changed(os.path.join(gen_dir, "fwd_table.cpp"), gen.fwd_table_source(everything, chosen, archs))
        gen.write_if_changed(os.path.join(gen_dir, "bwd_table.cpp"), gen.bwd_table_source(everything, chosen, archs))
        want_fwd = any(x in apis for x in ("fwd", "fwd_splitkv", "batch_prefill", "fwd_v3"))
        want_bwd = any(x in apis for x in ("bwd", "bwd_v3"))
        py, py_skip = (None, "") if a.no_python else python_build_info()
        if py is not None and not (want_fwd and want_bwd): # the module links both libraries
            py, py_skip = None, "the module needs both libraries (--api fwd,bwd)"
        text = write_ninja(root=ROOT, build_dir=build_dir, out_dir=os.getcwd(), nvcc=nvcc, cutlass_include=cutlass,
                           archs=archs, kernel_sources=sources, bwd_kernel_sources=bwd_sources, want_fwd=want_fwd,
                           want_bwd=want_bwd, python=py,
                           extra_flags=os.environ.get("MHA_NVCC_FLAGS", ""))
        gen.write_if_changed(os.path.join(build_dir, "build.ninja"), text)

        print(f"[compile.py] {len(chosen)} instance(s) for {','.join(archs)}; apis {','.join(apis)}; "
              f"CUTLASS {cutlass}; MAX_JOBS={jobs}", flush=True)
        t0 = time.time()
        r = subprocess.run([ninja, "-C", build_dir, "-j", jobs])
        if r.returncode != 0:
            raise BuildError(f"ninja failed (exit {r.returncode}); see the compiler output above")
        outs = [n for n, want in (("libmha_fwd.so", want_fwd), ("libmha_bwd.so", want_bwd)) if want]
        sizes = ", ".join(f"{n} {os.path.getsize(n) / 2**20:.1f} MiB" for n in outs)
        print(f"[compile.py] done in {time.time() - t0:.1f} s: {sizes}" + (f" ({py_skip}: Python module skipped)"
                                                                            if py_skip else ""))
        return 0
    except BuildError as e:
        print(f"compile.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
