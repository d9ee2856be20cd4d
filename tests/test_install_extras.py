"""The install extras stay CPU-only, and the install instructions get a CPU
user PyTorch's CPU build: on Linux, PyPI's torch is the CUDA build, which no
requirement of an extra can avoid, so the README and the getting-started
page say to install the CPU build before the extras.
"""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CPU_INDEX = "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu"
GPU_ONLY = re.compile(r"^(nvidia-|triton|cupy|jax\[cuda|jax\[tpu|jaxlib.*cuda|torch.*cu\d)",
                      re.I)


def _text(name):
    path = ROOT / name
    if not path.exists():
        pytest.skip(f"{name} is not next to the tests")
    return path.read_text(encoding="utf-8")


def test_no_extra_requires_gpu_packages():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads(_text("pyproject.toml"))["project"]["optional-dependencies"]
    assert {"demo", "test", "torch", "optax", "mpi", "docs"} <= set(extras)
    gpu = [f"{name}: {req}" for name, reqs in extras.items() for req in reqs
           if GPU_ONLY.match(req.replace(" ", ""))]
    assert gpu == []


def test_readme_installs_the_cpu_torch_before_the_test_extras():
    readme = _text("README.md")
    cpu = readme.find(CPU_INDEX)
    assert cpu >= 0
    assert cpu < readme.find('python -m pip install ".[test,torch,optax]" && pytest')


def test_getting_started_gives_the_cpu_torch_and_the_size_of_each_extra():
    page = _text("docs/getting_started.md")
    assert CPU_INDEX in page
    for extra in ("demo", "test", "torch", "optax", "mpi", "docs"):
        assert re.search(rf'^\| `"\.\[{extra}\]"` \| \d+ MiB \| \d+ MiB \|', page, re.M), extra
