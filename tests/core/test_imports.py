"""kora.core.imports: a module imported as if an optional package were not installed (``import_without``), and a
module imported on its first use (``DeferredImport``)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from kora.core.imports import DeferredImport, import_without, modules_absent

pytestmark = pytest.mark.unit

USER = """
try:
    import kora_test_extra
except ImportError:
    kora_test_extra = None
"""


@pytest.fixture
def packages(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "kora_test_extra").mkdir()
    (tmp_path / "kora_test_extra" / "__init__.py").write_text("VALUE = 1\n")
    (tmp_path / "kora_test_user.py").write_text(USER)
    sys.path.insert(0, str(tmp_path))
    yield tmp_path
    sys.path.remove(str(tmp_path))
    for name in ("kora_test_extra", "kora_test_user"):
        sys.modules.pop(name, None)


def test_the_module_takes_its_path_without_the_package_and_the_package_still_imports_later(packages: Path) -> None:
    user = import_without("kora_test_user", ["kora_test_extra"])
    assert user.kora_test_extra is None
    assert "kora_test_extra" not in sys.modules
    import kora_test_extra

    assert kora_test_extra.VALUE == 1
    assert not any(type(finder).__name__ == "_Absent" for finder in sys.meta_path)


def test_a_package_already_imported_is_not_refused(packages: Path) -> None:
    import kora_test_extra

    user = import_without("kora_test_user", ["kora_test_extra"])
    assert user.kora_test_extra is kora_test_extra


def test_other_threads_import_the_package_meanwhile(packages: Path) -> None:
    (packages / "kora_test_user.py").write_text(
        "import threading\nfound = []\n"
        "def other():\n    import kora_test_extra\n    found.append(kora_test_extra.VALUE)\n"
        "thread = threading.Thread(target=other)\nthread.start()\nthread.join()\n" + USER
    )
    user = import_without("kora_test_user", ["kora_test_extra"])
    assert user.found == [1]


def test_a_dotted_name_refuses_that_module_and_below_only(packages: Path) -> None:
    (packages / "kora_test_extra" / "legacy.py").write_text("OLD = True\n")
    (packages / "kora_test_extra" / "legacy_tools.py").write_text("TOOLS = True\n")
    with modules_absent(["kora_test_extra.legacy"]):
        import kora_test_extra
        import kora_test_extra.legacy_tools

        with pytest.raises(ModuleNotFoundError, match=r"kora_test_extra\.legacy"):
            import kora_test_extra.legacy
    assert kora_test_extra.VALUE == 1
    assert kora_test_extra.legacy_tools.TOOLS
    import kora_test_extra.legacy

    assert kora_test_extra.legacy.OLD
    assert not any(type(finder).__name__ == "_Absent" for finder in sys.meta_path)
    for name in ("kora_test_extra.legacy", "kora_test_extra.legacy_tools"):
        sys.modules.pop(name, None)


def test_a_deferred_module_is_imported_by_its_first_load_only(packages: Path) -> None:
    deferred = DeferredImport("kora_test_extra")
    assert "kora_test_extra" not in sys.modules

    async def load_twice() -> list[ModuleType]:
        return list(await asyncio.gather(deferred.load(), deferred.load()))

    first, second = asyncio.run(load_twice())
    assert first is second is sys.modules["kora_test_extra"]
    assert first.VALUE == 1


def test_a_deferred_module_is_imported_without_the_packages_it_names_absent(packages: Path) -> None:
    # kora_test_user takes its no-extra path; the extra itself can still be imported afterwards.
    deferred = DeferredImport("kora_test_user", absent=["kora_test_extra"])
    user = asyncio.run(deferred.load())
    assert user.kora_test_extra is None
    assert "kora_test_extra" not in sys.modules
    assert not any(type(finder).__name__ == "_Absent" for finder in sys.meta_path)
