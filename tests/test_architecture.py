"""The house rules: no import cycles between modules, the data layer never imports the framework, the
core imports neither the tools nor the model package, no module over 400 lines, no side effects on
import."""

import pytest
import subprocess
import sys
from pathlib import Path

from mnp.tools import depgraph

ROOT = Path(__file__).resolve().parents[1]


def test_no_import_cycles_and_the_data_layer_stands_alone():
    mods = depgraph.modules()
    graph = depgraph.edges(mods)
    assert depgraph.cycles(graph) == []
    packages = depgraph.package_edges(graph, mods)
    assert not [e for e in packages if e[0] == "datamodules"], packages


def test_subpackages_are_nodes_of_the_package_graph():
    mods = depgraph.modules()
    assert depgraph.package_of("mnp.core.routine", mods) == "mnp.core"
    assert depgraph.package_of("mnp.core", mods) == "mnp.core"
    assert depgraph.package_of("mnp.model", mods) == "mnp"
    packages = depgraph.package_edges(depgraph.edges(mods), mods)
    assert "mnp.core.routine -> mnp.core.metrics" not in {w for why in packages.values() for w in why}
    assert "mnp.model -> mnp.core.routine" in packages[("mnp", "mnp.core")]


def test_the_core_imports_neither_the_tools_nor_the_model_package():
    mods = depgraph.modules()
    assert depgraph.package_of("mnp.core.figures", mods) == "mnp.core"
    packages = depgraph.package_edges(depgraph.edges(mods), mods)
    assert ("mnp.core", "mnp.tools") not in packages, packages.get(("mnp.core", "mnp.tools"))
    assert ("mnp.core", "mnp") not in packages, packages.get(("mnp.core", "mnp"))


def test_modules_stay_short():
    long = {
        p.relative_to(ROOT).as_posix(): n
        for pkg in depgraph.PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not long, long


@pytest.mark.slow
def test_importing_the_packages_registers_nothing_and_prints_nothing():
    code = (
        "import omegaconf, mnp, datamodules, baselines, mnp.model, mnp.core.pipeline\n"
        "print(omegaconf.OmegaConf.has_resolver('mnp_run_suffix'))"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert res.stdout.strip() == "False", res.stderr[-1000:]
