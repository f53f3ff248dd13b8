"""The architecture page's module map follows the code: every module of the import-direction
test's ``LAYERS`` table (the truth of the layer order) has its line, in layer order, and the map
names no module the table does not know (issue 35, item 5)."""

from __future__ import annotations

import ast
import re

from .blocks import DOCS, ROOT

PAGE = DOCS / "architecture.md"
_ENTRY = re.compile(r"^- ((?:`[\w.]+`(?:, )?)+):", re.M)


def _layers() -> list[tuple[str, ...]]:
    """``LAYERS`` as tests/test_import_direction.py writes it (read, not imported: that file is a
    test module of another folder)."""
    tree = ast.parse((ROOT / "tests" / "test_import_direction.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in targets):
                assert node.value is not None
                layers: list[tuple[str, ...]] = ast.literal_eval(node.value)
                return layers
    raise AssertionError("tests/test_import_direction.py defines no LAYERS")


def _module_map() -> list[str]:
    """The modules the page's module map lists, in the order it lists them."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## The module map", 1)[1].split("\n## ", 1)[0]
    return [
        name for match in _ENTRY.finditer(section) for name in re.findall(r"`([\w.]+)`", match[1])
    ]


def test_the_module_map_lists_every_layered_module_in_layer_order() -> None:
    layers = _layers()
    layer_of = {module: index for index, layer in enumerate(layers) for module in layer}
    listed = _module_map()
    assert sorted(listed) == sorted(layer_of), (
        f"missing from the map: {sorted(set(layer_of) - set(listed))}; "
        f"not in LAYERS: {sorted(set(listed) - set(layer_of))}"
    )
    order = [layer_of[module] for module in listed]
    out_of_order = [m for m, a, b in zip(listed[1:], order, order[1:], strict=False) if b < a]
    assert not out_of_order, f"listed after a module of a higher layer: {out_of_order}"
