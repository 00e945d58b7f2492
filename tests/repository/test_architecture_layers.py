"""``docs/architecture.md`` and the import-linter layers contract in ``pyproject.toml`` name the same layers, with
the same packages, in the same order: a package the contract adds or the doc lists fails here, whichever of the
two it is missing from."""

import re
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def contract_layers(pyproject: Path = REPO / "pyproject.toml") -> list[frozenset[str]]:
    """The packages of each layer of the one ``layers`` contract over all of ``kora``, top layer first (the layers
    contracts inside one package name it in ``containers``)."""
    contracts = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    layered = [contract for contract in contracts if contract["type"] == "layers" and "containers" not in contract]
    assert len(layered) == 1, f"expected one layers contract over kora in pyproject.toml, found {len(layered)}"
    return [frozenset(name.strip() for name in layer.split("|")) for layer in layered[0]["layers"]]


def documented_layers(document: Path = REPO / "docs" / "architecture.md") -> list[frozenset[str]]:
    """The packages of each line of the indented block under the ``## Layers`` heading, top layer first: a line
    starts with its packages, separated by ``|``, then two or more spaces and what the layer holds."""
    text = document.read_text(encoding="utf-8")
    section = re.search(r"^## Layers\b.*?\n(.*?)(?=^## )", text, re.M | re.S)
    assert section, f"{document.relative_to(REPO)} has no '## Layers' section"
    block = re.search(r"(?:^ {4}\S.*\n)+", section.group(1), re.M)
    assert block, f"{document.relative_to(REPO)}: no indented block of layers under '## Layers'"
    return [
        frozenset(name.strip() for name in re.split(r"\s{2,}", line.strip(), maxsplit=1)[0].split("|"))
        for line in block.group(0).splitlines()
    ]


def show(layers: list[frozenset[str]]) -> str:
    return "\n".join(f"  {' | '.join(sorted(layer))}" for layer in layers)


def test_the_architecture_doc_lists_the_layers_of_the_import_contract():
    documented, contracted = documented_layers(), contract_layers()
    assert len(contracted) > 3
    assert documented == contracted, (
        "docs/architecture.md ('## Layers') and the layers contract in pyproject.toml differ.\n"
        f"The doc, top first:\n{show(documented)}\nThe contract, top first:\n{show(contracted)}\n"
        f"Only in the doc: {sorted(set().union(*documented) - set().union(*contracted))}; "
        f"only in the contract: {sorted(set().union(*contracted) - set().union(*documented))}"
    )


def test_the_reader_splits_each_layer_line(tmp_path: Path):
    doc = tmp_path / "architecture.md"
    doc.write_text(
        "# A\n\n## Layers (down only)\n\n    kora.cli             the CLI\n"
        "    kora.a | kora.b      workloads | more\n    kora.core\n\nText.\n\n## Next\n",
        encoding="utf-8",
    )
    assert documented_layers(doc) == [
        frozenset({"kora.cli"}),
        frozenset({"kora.a", "kora.b"}),
        frozenset({"kora.core"}),
    ]
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        '[[tool.importlinter.contracts]]\nname = "x"\ntype = "layers"\nlayers = ["kora.cli", "kora.a | kora.b"]\n'
        '[[tool.importlinter.contracts]]\nname = "y"\ntype = "forbidden"\n',
        encoding="utf-8",
    )
    assert contract_layers(pyproject) == [frozenset({"kora.cli"}), frozenset({"kora.a", "kora.b"})]
