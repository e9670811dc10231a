"""The README's claims that drift with the code: the default pipeline, the environment
variables the code reads, and the READMEs it points to."""

import re
from pathlib import Path

from flowc.passes import PIPELINES

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_default_pipeline_is_the_one_listed():
    listed = re.search(r"the named pipeline `default`\s*\n?\(`([^`]+)`\)", README)
    assert listed and listed[1] == ",".join(name for name, _ in PIPELINES["default"])


def test_every_environment_variable_read_is_in_the_debug_table():
    read = set()
    # flowc/testing is the test harnesses' (FLOWC_HOSTILE_MARKER is a planted secret the
    # hostile-model runner looks for, not a switch)
    for path in [*(ROOT / "flowc").rglob("*.py"), *(ROOT / "flowc").rglob("*.c")]:
        if "testing" in path.relative_to(ROOT / "flowc").parts:
            continue
        read |= set(re.findall(r"(?:environ(?:\.get)?[\[(]|getenv\()\s*\"(FLOWC_[A-Z_]+)\"",
                               path.read_text()))
    assert {"FLOWC_COMPILE_JOBS", "FLOWC_CUDA_DEVICE", "FLOWC_NUM_THREADS"} <= read
    table = README.split("## Debug switches", 1)[1]
    assert sorted(v for v in read if f"`{v}=" not in table) == []


def test_the_readmes_the_readme_points_to_exist():
    assert (ROOT / "examples" / "c_app" / "README.md").is_file()
    for path in re.findall(r"\((?:\./)?([\w/.-]+\.md)\)", README):
        assert (ROOT / path).is_file(), path
