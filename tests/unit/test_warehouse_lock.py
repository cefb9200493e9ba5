"""The warehouse's lock files are never written through a symbolic link: `warehouse.lock` replaced by a link
had its target overwritten with the holder's pid. Now the command stops with one line saying to remove
the link, and the target is untouched; a lock path that is not a regular file is one line too."""

from __future__ import annotations

import os

import pytest

from routerscope.core.errors import WarehouseError
from routerscope.warehouse.client import load_lock, load_lock_path, open_warehouse
from tests.support.home import settings_for


@pytest.mark.parametrize("which", ["warehouse.lock", "warehouse.load.lock"])
def test_a_lock_file_replaced_by_a_symlink_is_refused_and_its_target_untouched(tmp_path, which):
    home = tmp_path / "home"
    settings = settings_for(home)
    (home / "warehouse").mkdir(parents=True)
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's own file\n")
    lock = home / which
    assert lock == (load_lock_path(settings) if "load" in which else home / "warehouse.lock")
    lock.symlink_to(precious)
    with pytest.raises(WarehouseError, match="is a symbolic link") as raised:
        if "load" in which:
            with load_lock(settings):
                pass
        else:
            with open_warehouse(settings, purpose="test"):
                pass
    assert "\n" not in str(raised.value) and "remove the link" in str(raised.value)
    assert precious.read_text() == "the user's own file\n"


def test_a_lock_path_that_is_a_fifo_is_one_line(tmp_path):
    home = tmp_path / "home"
    settings = settings_for(home)
    (home / "warehouse").mkdir(parents=True)
    os.mkfifo(home / "warehouse.lock")
    with pytest.raises(WarehouseError, match="not a regular file"):
        with open_warehouse(settings, purpose="test"):
            pass
