"""The house rules: no import cycles between modules, the data layer never imports the framework, no
module over 400 lines, no side effects on import."""
import subprocess
import sys
from pathlib import Path

from mnp.tools import depgraph

ROOT = Path(__file__).resolve().parents[1]

def test_no_import_cycles_and_the_data_layer_stands_alone():
    graph = depgraph.edges(depgraph.modules())
    assert depgraph.cycles(graph) == []
    assert ("datamodules", "mnp") not in depgraph.package_edges(graph)
    assert ("datamodules", "baselines") not in depgraph.package_edges(graph)


def test_modules_stay_short():
    long = {p.relative_to(ROOT).as_posix(): n for pkg in depgraph.PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_importing_the_packages_registers_nothing_and_prints_nothing():
    code = ("import omegaconf, mnp, datamodules, baselines, mnp.model, mnp.core.pipeline\n"
            "print(omegaconf.OmegaConf.has_resolver('mnp_run_suffix'))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert res.stdout.strip() == "False", res.stderr[-1000:]
