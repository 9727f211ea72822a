"""Every module of the goblin package is installed (pygoblin/meson.build lists each file
by hand; a module left out imports in the source tree and fails after pip install)."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_every_module_is_in_the_install_list():
    src = os.path.join(ROOT, "pygoblin", "goblin")
    with open(os.path.join(ROOT, "pygoblin", "meson.build")) as f:
        listed = set(re.findall(r"'goblin/([^']+)'", f.read()))
    files = {n for n in os.listdir(src) if n.endswith((".py", ".pyi")) or n == "py.typed"}
    assert files, "no package files found"
    missing = sorted(files - listed)
    assert not missing, f"pygoblin/meson.build does not install {missing}"
