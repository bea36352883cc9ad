"""bench/startup/startup.py's "csi plugin" case starts the plugin as its node plugin must be
started now (review29): since the plugin refuses to start without the kubelet's dir
(``--kubelet-dir``, default /var/lib/kubelet), the case exited 2 on every machine without a
kubelet, and a whole ``startup.py`` run stopped there."""

from __future__ import annotations

import types
from pathlib import Path

from bench.startup import startup


def test_the_csi_plugin_case_starts_the_plugin_on_a_machine_without_a_kubelet(tmp_path: Path) -> None:
    config = tmp_path / "datahub.toml"
    config.write_text(f'home = "{tmp_path / "home"}"\n')
    fx = types.SimpleNamespace(work=tmp_path, home=tmp_path / "home", empty_home=tmp_path, config=config)
    case = startup.commands(fx, {"csi plugin"})["csi plugin"]  # type: ignore[arg-type]
    cpu, wall = case(startup.ROOT)  # before: SystemExit "... exited 2: ... --kubelet-dir ..."
    assert cpu > 0 and wall > 0
